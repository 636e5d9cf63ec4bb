"""The backend contract: what a device plugin implements for genesis to run on it.

A backend owns *arrays*: strided views of device memory in its own representation. The
only thing genesis reads off an array directly is ``array.shape`` (a tuple of ints);
everything else goes through the backend's methods below. Genesis guarantees, before it
calls a kernel:

* Shapes are tuples of ints; ``dims`` are tuples of distinct, non-negative ints;
  ``dim`` is a non-negative int below the array's ndim (ops on 0-d arrays that take a
  ``dim`` — argmax, max along a dim — are answered by genesis without a kernel).
* Elementwise kernels get operands of the same shape and the same dtype (broadcasting is
  done by genesis with zero-stride views from ``as_strided``); ``b`` may instead be a Python
  scalar that fits that dtype. Inputs may have any strides, including 0 and overlapping.
* ``out``, when given, is an array of the result's shape and dtype, possibly strided, and
  possibly the very same view as an input (in-place ops); the kernel writes into it and
  returns it. Without ``out`` the kernel returns a new contiguous array.
* Indices are int64 arrays and in range (genesis checks bounds where it is cheap; kernels
  may assume it).

Kernels never synchronise the host unless their result is a host value (``item``,
``to_numpy``, ``nonzero``'s size).

The contract has two parts. The *required core* is the abstract methods (``REQUIRED``):
memory and geometry, host transfer, one copy, the elementwise families, two reductions,
matmul, general indexing, sort and the generator. Everything else is *optional*
(``OPTIONAL``): it has a composite default in ``genesis.backends.composite`` written with the
core, so a new backend runs every op once its core works, and overrides an optional method
when it has a faster kernel (the CPU and CUDA backends override nearly all of them).

Fused kernels (softmax, norms, attention, cross-entropy, SwiGLU, rotary, the optimizer
steps) are not part of this class: each fused op is a row declared by the package that owns
it (``genesis.fused_op``), and a backend registers kernels for rows by name with
``register_kernel``; without one, the row's composite runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import nullcontext

from genesis.backends import composite
from genesis.dtypes import DType
from genesis.op_declarations import BINARY_NAMES, REDUCTION_NAMES, UNARY_NAMES

Array = object  # a backend's array type; see the module docstring
Shape = tuple[int, ...]
Scalar = bool | int | float


class Backend(ABC):
    """Base class of every device backend (registered under the ``genesis.backends`` group).

    Subclasses set ``name`` (the device type, e.g. ``"cuda"``) and implement every
    abstract method (the required core). Methods marked *optional* have working defaults
    written with the core and may be overridden with kernels of their own.
    """

    name: str = ""

    # ------------------------------------------------------------------ device
    @abstractmethod
    def is_available(self) -> bool:
        """Whether at least one device of this type can be used right now."""

    @abstractmethod
    def device_count(self) -> int:
        """Number of devices of this type (0 when unavailable)."""

    def current_device(self) -> int:
        """*Optional.* The ordinal ``genesis.device('<name>')`` (no index) places tensors on."""
        return 0

    @abstractmethod
    def synchronize(self, index: int | None) -> None:
        """Block the host until all work queued on device ``index`` has finished."""

    def public_api(self):
        """*Optional.* A module of device-specific public API (streams, events, memory
        functions); ``genesis.<name>.X`` forwards to it, e.g. ``genesis.cuda.Stream``."""
        return None

    def memory_stats(self, index: int | None) -> dict:
        """*Optional.* Allocator statistics for device ``index`` (empty if not tracked)."""
        return {}

    # ----------------------------------------------------------- array basics
    @abstractmethod
    def dtype_of(self, a: Array) -> DType:
        """The genesis dtype of array ``a``."""

    @abstractmethod
    def device_index_of(self, a: Array) -> int | None:
        """The ordinal of the device holding ``a`` (``None`` for the CPU); the composite
        kernels allocate their results there."""

    @abstractmethod
    def strides_of(self, a: Array) -> Shape:
        """Strides of ``a`` in elements."""

    @abstractmethod
    def storage_offset_of(self, a: Array) -> int:
        """Offset of ``a``'s first element into its storage, in elements."""

    @abstractmethod
    def data_ptr(self, a: Array) -> int:
        """Address of ``a``'s first element (used for identity checks and DLPack)."""

    @abstractmethod
    def as_strided(self, a: Array, shape: Shape, strides: Shape, offset: int) -> Array:
        """A view of ``a``'s storage with the given geometry (no copy, shares memory)."""

    def view(self, a: Array, shape: Shape, strides: Shape) -> Array:
        """*Optional.* ``a`` seen at ``shape`` with ``strides``, which genesis derived from
        ``a``'s own as a reshape without a copy (what ``Tensor.view`` makes). The default is
        ``as_strided`` at ``a``'s offset; a backend may call a cheaper native reshape-view."""
        return self.as_strided(a, shape, strides, self.storage_offset_of(a))

    def reinterpret(self, a: Array, dtype: DType) -> Array:
        """*Optional.* ``a``'s bytes seen as ``dtype`` of the same itemsize (a view)."""
        raise TypeError(f"backend {self.name!r} cannot reinterpret arrays as {dtype}")

    # -------------------------------------------------------------- creation
    @abstractmethod
    def empty(self, shape: Shape, dtype: DType, index: int | None) -> Array:
        """A new contiguous, uninitialised array."""

    def full(self, shape: Shape, value: Scalar, dtype: DType, index: int | None) -> Array:
        """*Optional.* A new contiguous array filled with ``value``."""
        return composite.full(self, shape, value, dtype, index)

    def arange(self, start: Scalar, end: Scalar, step: Scalar, dtype: DType,
               index: int | None) -> Array:
        """*Optional.* ``[start, start+step, ...)`` up to but excluding ``end``, as
        torch.arange."""
        return composite.arange(self, start, end, step, dtype, index)

    @abstractmethod
    def from_numpy(self, data, index: int | None) -> Array:
        """Copy (CPU: may share) a numpy array onto device ``index``."""

    @abstractmethod
    def to_numpy(self, a: Array):
        """A numpy array with ``a``'s values (CPU: may share memory). bfloat16 is not
        representable in numpy; genesis casts to float32 first."""

    def from_dlpack(self, capsule_or_obj, index: int | None) -> Array:
        """*Optional.* Import a DLPack tensor living on this device type."""
        raise TypeError(f"backend {self.name!r} does not support DLPack import")

    def to_dlpack(self, a: Array, stream=None):
        """*Optional.* Export ``a`` as a DLPack capsule."""
        raise TypeError(f"backend {self.name!r} does not support DLPack export")

    def dlpack_device(self, a: Array) -> tuple[int, int]:
        """*Optional.* ``(DLDeviceType, index)`` of ``a``."""
        raise TypeError(f"backend {self.name!r} does not support DLPack")

    # ------------------------------------------------------ copies and casts
    @abstractmethod
    def copy_(self, dst: Array, src: Array) -> Array:
        """Copy ``src`` into ``dst`` (same shape; dtypes may differ: cast while copying;
        ``src`` may be on another device of this backend). Returns ``dst``."""

    def contiguous(self, a: Array) -> Array:
        """*Optional.* ``a`` itself if it is C-contiguous, else a contiguous copy."""
        return composite.contiguous(self, a)

    def cast(self, a: Array, dtype: DType) -> Array:
        """*Optional.* ``a``'s values converted to ``dtype``: a new contiguous array, or
        ``a`` itself when it already has that dtype."""
        return composite.cast(self, a, dtype)

    def item(self, a: Array) -> Scalar:
        """*Optional.* The single value of a one-element array as a Python scalar."""
        return composite.item(self, a)

    # ------------------------------------------------------------ elementwise
    # The elementwise kernels a backend implements: the ops declared in
    # genesis.op_declarations, under the same names. Unary ops that compute in floating
    # point get floating inputs (genesis casts integers first); the others keep the input
    # dtype. Comparisons, logical ops, isnan/isinf/isfinite return bool.
    UNARY_OPS = UNARY_NAMES
    BINARY_OPS = BINARY_NAMES

    @abstractmethod
    def unary(self, op: str, a: Array, out: Array | None = None) -> Array:
        """Apply the unary op named ``op`` (one of ``UNARY_OPS``) elementwise.

        Genesis looks the kernel up once per op through ``unary_kernel`` below; a backend
        may override ``unary_kernel`` to return a specialised callable."""

    @abstractmethod
    def binary(self, op: str, a: Array, b: Array | Scalar, out: Array | None = None) -> Array:
        """Apply the binary op named ``op`` (one of ``BINARY_OPS``) elementwise."""

    def unary_kernel(self, op: str):
        """A callable ``(a, out=None) -> Array`` for ``op`` (``out`` by keyword); cached."""
        return lambda a, out=None: self.unary(op, a, out)

    def binary_kernel(self, op: str):
        """A callable ``(a, b, out=None) -> Array`` for ``op`` (``out`` by keyword); cached."""
        return lambda a, b, out=None: self.binary(op, a, b, out)

    def inplace_kernel(self, op: str):
        """*Optional.* A callable ``(a, b)`` writing ``op(a, b)`` into ``a`` (``x.add_(y)``;
        ``b`` an array of ``a``'s shape and dtype, or a scalar); cached. The default calls
        ``binary_kernel(op)`` with ``out=a``."""
        run = self.binary_kernel(op)
        return lambda a, b: run(a, b, out=a)

    @abstractmethod
    def where(self, cond: Array, a: Array | Scalar, b: Array | Scalar) -> Array:
        """``a`` where ``cond`` (bool) else ``b``; all the same shape, ``a``/``b`` the same
        dtype (either may be a scalar, not both)."""

    def clamp(self, a: Array, lo: Scalar | None, hi: Scalar | None,
              out: Array | None = None) -> Array:
        """*Optional.* ``min(max(a, lo), hi)`` with scalar bounds (either may be ``None``);
        genesis passes integer bounds saturated into ``a``'s dtype range."""
        return composite.clamp(self, a, lo, hi, out)

    # -------------------------------------------------------------- reductions
    # The reductions declared in genesis.op_declarations, each a kernel method of that name
    # (its parameters: the row's ``kernel_params``).
    REDUCTION_OPS = REDUCTION_NAMES

    @abstractmethod
    def sum(self, a: Array, dims: Shape, keepdim: bool, dtype: DType) -> Array:
        """Sum over ``dims`` (``()`` sums nothing: genesis lists every dim for a full
        reduction), accumulating at least in float32 for half types, result in ``dtype``."""

    @abstractmethod
    def amax(self, a: Array, dims: Shape, keepdim: bool) -> Array:
        """Maximum over ``dims`` (NaN propagates)."""

    def prod(self, a: Array, dims: Shape, keepdim: bool, dtype: DType) -> Array:
        """*Optional.* Product over ``dims``, result in ``dtype``."""
        return composite.prod(self, a, dims, keepdim, dtype)

    def amin(self, a: Array, dims: Shape, keepdim: bool) -> Array:
        """*Optional.* Minimum over ``dims`` (NaN propagates)."""
        return composite.amin(self, a, dims, keepdim)

    def argmax(self, a: Array, dim: int, keepdim: bool) -> Array:
        """*Optional.* int64 index of the first maximum along ``dim`` (a NaN counts as the
        maximum)."""
        return composite.arg_extreme(self, a, dim, keepdim, largest=True)

    def argmin(self, a: Array, dim: int, keepdim: bool) -> Array:
        """*Optional.* int64 index of the first minimum along ``dim`` (a NaN counts as the
        minimum)."""
        return composite.arg_extreme(self, a, dim, keepdim, largest=False)

    def all(self, a: Array, dims: Shape, keepdim: bool) -> Array:
        """*Optional.* bool: every element over ``dims`` is non-zero."""
        return composite.all_(self, a, dims, keepdim)

    def any(self, a: Array, dims: Shape, keepdim: bool) -> Array:
        """*Optional.* bool: some element over ``dims`` is non-zero."""
        return composite.any_(self, a, dims, keepdim)

    def cumsum(self, a: Array, dim: int, dtype: DType) -> Array:
        """*Optional.* Inclusive prefix sum along ``dim`` in ``dtype``."""
        return composite.cumsum(self, a, dim, dtype)

    # ------------------------------------------------------------------ linalg
    @abstractmethod
    def matmul(self, a: Array, b: Array) -> Array:
        """Batched matrix product: ``a`` is (..., M, K), ``b`` is (..., K, N) with the same
        batch shape (genesis broadcasts), same floating dtype; result (..., M, N).
        Half types accumulate in float32."""

    def linear(self, x: Array, weight: Array, bias: Array | None) -> Array:
        """*Optional.* ``x @ weight.T + bias`` for x (..., K), weight (N, K), bias (N,) or
        None, one dtype; result (..., N). A fused kernel adds the bias before rounding to a
        half type (as cuBLAS/oneDNN epilogues do); this default rounds twice."""
        return composite.linear(self, x, weight, bias)

    # ---------------------------------------------------------------- indexing
    @abstractmethod
    def index(self, a: Array, indices: Sequence[Array | None]) -> Array:
        """Advanced indexing ``a[indices]``: one entry per leading dim of ``a``, each an
        int64 array (all broadcast to one shape) or ``None`` (take the whole dim).
        Same result layout as numpy/torch. Entries in ``[-size, 0)`` count from the end of
        their dim; out-of-range ones must not touch memory outside ``a`` (genesis checks
        them on the host only where reading values is free: see ``ops.common.checks_values``)."""

    @abstractmethod
    def index_put_(self, a: Array, indices: Sequence[Array | None], values: Array,
                   accumulate: bool) -> Array:
        """In place ``a[indices] = values`` (or ``+=`` when ``accumulate``, where repeated
        indices sum); ``values`` broadcasts to the indexed shape. With ``accumulate``
        genesis passes no ``None`` entries. Returns ``a``."""

    @abstractmethod
    def sort(self, a: Array, dim: int, descending: bool, stable: bool) -> tuple[Array, Array]:
        """(values, int64 indices) sorted along ``dim``; NaN sorts as the largest value."""

    def gather(self, a: Array, dim: int, index: Array) -> Array:
        """*Optional.* ``out[i][j] = a[i][index[i][j]]`` along ``dim``; result has
        ``index``'s shape."""
        return composite.gather(self, a, dim, index)

    def scatter(self, a: Array, dim: int, index: Array, src: Array | Scalar,
                reduce: str | None) -> Array:
        """*Optional.* A copy of ``a`` with ``src`` written (``reduce=None``) or added
        (``"add"``) at ``index`` along ``dim``."""
        return composite.scatter(self, a, dim, index, src, reduce)

    def index_select(self, a: Array, dim: int, index: Array) -> Array:
        """*Optional.* Entries of ``a`` at the 1-d ``index`` along ``dim``."""
        return composite.index_select(self, a, dim, index)

    def index_add(self, a: Array, dim: int, index: Array, src: Array) -> Array:
        """*Optional.* A copy of ``a`` with slices of ``src`` added at the 1-d ``index``
        along ``dim`` (repeated indices accumulate)."""
        return composite.index_add(self, a, dim, index, src)

    def index_add_(self, a: Array, dim: int, index: Array, src: Array) -> Array:
        """*Optional.* ``index_add`` written into ``a`` itself (same sums). Returns ``a``.

        The gradient of ``index_select`` (an embedding's) adds into fresh zeros: in place,
        it holds one weight-sized array, where ``index_add`` would hold two."""
        return self.copy_(a, self.index_add(a, dim, index, src))

    def nonzero(self, a: Array) -> Array:
        """*Optional.* int64 (N, ndim) coordinates of the non-zero elements, in C order."""
        return composite.nonzero(self, a)

    def topk(self, a: Array, k: int, dim: int, largest: bool,
             sorted: bool) -> tuple[Array, Array]:
        """*Optional.* The ``k`` largest (or smallest) values along ``dim`` and their
        indices."""
        return composite.topk(self, a, k, dim, largest, sorted)

    # ----------------------------------------------------------------- layout
    def cat(self, arrays: Sequence[Array], dim: int) -> Array:
        """*Optional.* Concatenate arrays of one dtype along ``dim`` (other dims equal)."""
        return composite.cat(self, arrays, dim)

    def flip(self, a: Array, dims: Shape) -> Array:
        """*Optional.* A copy of ``a`` reversed along ``dims``."""
        return composite.flip(self, a, dims)

    def tril(self, a: Array, k: int) -> Array:
        """*Optional.* Lower triangle of the last two dims (diagonal offset ``k``), rest
        zero."""
        return composite.triangle(self, a, k, upper=False)

    def triu(self, a: Array, k: int) -> Array:
        """*Optional.* Upper triangle of the last two dims (diagonal offset ``k``), rest
        zero."""
        return composite.triangle(self, a, k, upper=True)

    # ------------------------------------------------------------------ random
    @abstractmethod
    def new_generator(self, index: int | None):
        """A new random-number generator state for device ``index``."""

    @abstractmethod
    def default_generator(self, index: int | None):
        """The default generator of device ``index``: created on first call and seeded then
        from ``genesis.backends.seed.initial_seed()`` (``genesis.manual_seed`` reseeds it
        later)."""

    @abstractmethod
    def manual_seed_generator(self, gen, seed: int) -> None:
        """Reset ``gen`` so its stream is a pure function of ``seed``."""

    @abstractmethod
    def get_generator_state(self, gen):
        """``gen``'s state as a 1-d uint8 numpy array (opaque, round-trips exactly)."""

    @abstractmethod
    def set_generator_state(self, gen, state) -> None:
        """Restore a state returned by ``get_generator_state``."""

    @abstractmethod
    def uniform_(self, a: Array, low: float, high: float, gen) -> Array:
        """Fill floating ``a`` in place with U[low, high) draws from ``gen``."""

    @abstractmethod
    def random_(self, a: Array, low: int, high: int, gen) -> Array:
        """Fill ``a`` in place with uniform integers in ``[low, high)``."""

    def normal_(self, a: Array, mean: float, std: float, gen) -> Array:
        """*Optional.* Fill floating ``a`` in place with N(mean, std^2) draws from ``gen``."""
        return composite.normal_(self, a, mean, std, gen)

    def randperm(self, n: int, dtype: DType, index: int | None, gen) -> Array:
        """*Optional.* A random permutation of ``0..n-1``."""
        return composite.randperm(self, n, dtype, index, gen)

    # ------------------------------------------------ fused kernels, by op name
    # Fused ops (softmax, the norms, attention, cross-entropy, SwiGLU, rotary, the optimizer
    # steps ...) are not methods: each is declared once, as a row of the package that owns it
    # (``genesis.fused_declarations``, ``genesis.nn.fused_declarations``), with a composite
    # written with the methods above. A backend registers a kernel for a row by the row's
    # name; ``genesis.fused_op.call_fused`` runs it, or the composite where there is none.
    _kernels: dict[str, Callable] = {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls._kernels = dict(cls._kernels)  # a subclass starts with its parent's kernels

    @classmethod
    def register_kernel(cls, name: str, fn: Callable) -> None:
        """*Optional.* Register ``fn`` as this backend's kernel of the fused op ``name``.

        ``fn`` takes the arguments of the row's composite without the backend (e.g.
        ``rms_norm(x, weight, eps)``) and returns what it returns, or ``NotImplemented`` for
        operands it does not cover (the composite then runs). Registered on the class:
        every instance, and subclasses defined later, have it.

        Args:
            name: a fused op's kernel name (``"rms_norm"``, ``"rms_norm_backward"`` ...).
            fn: the kernel.

        Example:
            >>> CPUBackend.register_kernel("softmax", torch_softmax)
        """
        if not isinstance(name, str) or not callable(fn):
            raise TypeError(f"register_kernel(name, fn) takes a str and a callable, got "
                            f"{type(name).__name__} and {type(fn).__name__}")
        cls._kernels[name] = fn

    def kernel(self, name: str) -> Callable | None:
        """*Optional.* The kernel registered as ``name`` (see ``register_kernel``), or None."""
        return self._kernels.get(name)

    # ---------------------------------------------------------------- compiler
    def compile_graph(self, graph, options: dict) -> Callable | None:
        """*Optional.* Compile a traced graph of ``genesis.compile`` for this device.

        Called for every forward, backward and segment graph whose tensors live on this
        backend's device; ``genesis.compiler.graph``'s docstring is the contract (which
        tensors are inputs, in what order; constants, views, in-place ops, autocast casts).

        Args:
            graph: a ``genesis.compiler.Graph``.
            options: ``genesis.compile``'s ``options`` dict, with ``"mode"`` when given.

        Returns:
            ``run(inputs: list[Tensor]) -> list[Tensor]`` (inputs in ``graph.inputs``
            order, outputs in ``graph.outputs`` order), or None: core replays the graph
            itself, calling each op's implementation without the per-op dispatch (the
            default, and the CPU backend's choice).

        Example:
            >>> def compile_graph(self, graph, options):
            ...     return None if len(graph.nodes) < 2 else MyFuser(graph).run
        """
        return None

    def tracing(self):
        """*Optional.* A context manager ``genesis.compile`` holds while it traces a call
        (the function runs eagerly under the tracer, then its graphs are compiled).

        A backend may use it to do the trace's eager work differently, with the same
        results: genesis-cuda defers its kernel launches there, so the kernels the trace
        meets for the first time compile side by side instead of one after the other.

        Returns:
            A context manager (default: one that does nothing).

        Example (genesis-cuda's, ``genesis_cuda.backend.CUDABackend.tracing``):
            >>> def tracing(self):
            ...     return launch_queue.deferring(parallel_compile.collect,
            ...                                   parallel_compile.compile_jobs)
        """
        return nullcontext()


# The two halves of the contract, derived from the class (docs/backends.md is checked
# against them by tests/backends/test_contract_docs.py).
REQUIRED: tuple[str, ...] = tuple(sorted(Backend.__abstractmethods__))
OPTIONAL: tuple[str, ...] = tuple(sorted(
    name for name, value in vars(Backend).items()
    if (callable(value) or isinstance(value, classmethod)) and not name.startswith("_")
    and name not in Backend.__abstractmethods__))
