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
``to_numpy``, ``nonzero``'s size). Optional fused kernels have composite fallbacks here,
built from the primitives, so a new backend works before it is fast.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence

from genesis.backends import llm_composite
from genesis.dtypes import DType, float32, float64

Array = object  # a backend's array type; see the module docstring
Shape = tuple[int, ...]
Scalar = bool | int | float


class Backend(ABC):
    """Base class of every device backend (registered under the ``genesis.backends`` group).

    Subclasses set ``name`` (the device type, e.g. ``"cuda"``) and implement every
    abstract method. Methods marked *optional* have working defaults in terms of the
    primitives and may be overridden with fused kernels.
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
        """The ordinal of the device holding ``a`` (``None`` for the CPU)."""

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

    def reinterpret(self, a: Array, dtype: DType) -> Array:
        """*Optional.* ``a``'s bytes seen as ``dtype`` of the same itemsize (a view)."""
        raise TypeError(f"backend {self.name!r} cannot reinterpret arrays as {dtype}")

    # -------------------------------------------------------------- creation
    @abstractmethod
    def empty(self, shape: Shape, dtype: DType, index: int | None) -> Array:
        """A new contiguous, uninitialised array."""

    @abstractmethod
    def full(self, shape: Shape, value: Scalar, dtype: DType, index: int | None) -> Array:
        """A new contiguous array filled with ``value``."""

    @abstractmethod
    def arange(self, start: Scalar, end: Scalar, step: Scalar, dtype: DType,
               index: int | None) -> Array:
        """``[start, start+step, ...)`` up to but excluding ``end``, as torch.arange."""

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

    @abstractmethod
    def contiguous(self, a: Array) -> Array:
        """``a`` itself if it is C-contiguous, else a contiguous copy."""

    @abstractmethod
    def cast(self, a: Array, dtype: DType) -> Array:
        """``a``'s values converted to ``dtype``: a new contiguous array, or ``a`` itself
        when it already has that dtype."""

    @abstractmethod
    def item(self, a: Array) -> Scalar:
        """The single value of a one-element array as a Python scalar."""

    # ------------------------------------------------------------ elementwise
    # Unary float ops get floating inputs (genesis casts integers first); the others
    # keep the input dtype. isnan/isinf/isfinite/logical_not return bool.
    UNARY_OPS = (
        "neg", "abs", "sign", "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt",
        "rsqrt", "sin", "cos", "tanh", "sigmoid", "relu", "erf", "floor", "ceil", "round",
        "logical_not", "isnan", "isinf", "isfinite", "bitwise_not",
    )
    # Binary ops: add sub mul div (true division, floating) floor_divide remainder pow
    # maximum minimum atan2 keep the operand dtype; comparisons and logical_* return bool.
    BINARY_OPS = (
        "add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "maximum",
        "minimum", "atan2", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
        "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
    )

    @abstractmethod
    def unary(self, op: str, a: Array, out: Array | None = None) -> Array:
        """Apply the unary op named ``op`` (one of ``UNARY_OPS``) elementwise.

        Genesis looks the kernel up once per op through ``unary_kernel`` below; a backend
        may override ``unary_kernel`` to return a specialised callable."""

    @abstractmethod
    def binary(self, op: str, a: Array, b: Array | Scalar, out: Array | None = None) -> Array:
        """Apply the binary op named ``op`` (one of ``BINARY_OPS``) elementwise."""

    def unary_kernel(self, op: str):
        """A callable ``(a, out=None) -> Array`` for ``op``; called once per op and cached."""
        return lambda a, out=None: self.unary(op, a, out)

    def binary_kernel(self, op: str):
        """A callable ``(a, b, out=None) -> Array`` for ``op``; called once and cached."""
        return lambda a, b, out=None: self.binary(op, a, b, out)

    @abstractmethod
    def where(self, cond: Array, a: Array | Scalar, b: Array | Scalar) -> Array:
        """``a`` where ``cond`` (bool) else ``b``; all the same shape, ``a``/``b`` the same
        dtype (either may be a scalar, not both)."""

    @abstractmethod
    def clamp(self, a: Array, lo: Scalar | None, hi: Scalar | None,
              out: Array | None = None) -> Array:
        """``min(max(a, lo), hi)`` with scalar bounds (either may be ``None``)."""

    # -------------------------------------------------------------- reductions
    @abstractmethod
    def sum(self, a: Array, dims: Shape, keepdim: bool, dtype: DType) -> Array:
        """Sum over ``dims`` (``()`` sums nothing: genesis lists every dim for a full
        reduction), accumulating at least in float32 for half types, result in ``dtype``."""

    @abstractmethod
    def prod(self, a: Array, dims: Shape, keepdim: bool, dtype: DType) -> Array:
        """Product over ``dims``, result in ``dtype``."""

    @abstractmethod
    def amax(self, a: Array, dims: Shape, keepdim: bool) -> Array:
        """Maximum over ``dims`` (NaN propagates)."""

    @abstractmethod
    def amin(self, a: Array, dims: Shape, keepdim: bool) -> Array:
        """Minimum over ``dims`` (NaN propagates)."""

    @abstractmethod
    def argmax(self, a: Array, dim: int, keepdim: bool) -> Array:
        """int64 index of the first maximum along ``dim``."""

    @abstractmethod
    def argmin(self, a: Array, dim: int, keepdim: bool) -> Array:
        """int64 index of the first minimum along ``dim``."""

    @abstractmethod
    def all(self, a: Array, dims: Shape, keepdim: bool) -> Array:
        """bool: every element over ``dims`` is non-zero."""

    @abstractmethod
    def any(self, a: Array, dims: Shape, keepdim: bool) -> Array:
        """bool: some element over ``dims`` is non-zero."""

    @abstractmethod
    def cumsum(self, a: Array, dim: int, dtype: DType) -> Array:
        """Inclusive prefix sum along ``dim`` in ``dtype``."""

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
        k, n = x.shape[-1], weight.shape[0]
        lead = tuple(x.shape[:-1])
        m = math.prod(lead)
        xc = self.contiguous(x)
        x2 = self.as_strided(xc, (m, k), (k, 1), self.storage_offset_of(xc))  # (M, K)
        ws = self.strides_of(weight)
        w_t = self.as_strided(weight, (k, n), (ws[1], ws[0]), self.storage_offset_of(weight))
        out = self.matmul(x2, w_t)  # (M, N), contiguous
        if bias is not None:
            out = self.binary("add", out, self._expand_to(bias, out), out=out)
        strides = tuple(n * math.prod(lead[i + 1:]) for i in range(len(lead))) + (1,)
        return self.as_strided(out, lead + (n,), strides, 0)

    # ---------------------------------------------------------------- indexing
    @abstractmethod
    def gather(self, a: Array, dim: int, index: Array) -> Array:
        """``out[i][j] = a[i][index[i][j]]`` along ``dim``; result has ``index``'s shape."""

    @abstractmethod
    def scatter(self, a: Array, dim: int, index: Array, src: Array | Scalar,
                reduce: str | None) -> Array:
        """A copy of ``a`` with ``src`` written (``reduce=None``) or added (``"add"``) at
        ``index`` along ``dim``."""

    @abstractmethod
    def index_select(self, a: Array, dim: int, index: Array) -> Array:
        """Entries of ``a`` at the 1-d ``index`` along ``dim``."""

    @abstractmethod
    def index_add(self, a: Array, dim: int, index: Array, src: Array) -> Array:
        """A copy of ``a`` with slices of ``src`` added at the 1-d ``index`` along ``dim``
        (repeated indices accumulate)."""

    @abstractmethod
    def index(self, a: Array, indices: Sequence[Array | None]) -> Array:
        """Advanced indexing ``a[indices]``: one entry per leading dim of ``a``, each an
        int64 array (all broadcast to one shape) or ``None`` (take the whole dim).
        Same result layout as numpy/torch."""

    @abstractmethod
    def index_put_(self, a: Array, indices: Sequence[Array | None], values: Array,
                   accumulate: bool) -> Array:
        """In place ``a[indices] = values`` (or ``+=`` when ``accumulate``, where repeated
        indices sum); ``values`` broadcasts to the indexed shape. With ``accumulate``
        genesis passes no ``None`` entries. Returns ``a``."""

    @abstractmethod
    def nonzero(self, a: Array) -> Array:
        """int64 (N, ndim) coordinates of the non-zero elements, in C order."""

    @abstractmethod
    def sort(self, a: Array, dim: int, descending: bool, stable: bool) -> tuple[Array, Array]:
        """(values, int64 indices) sorted along ``dim``; NaN sorts as the largest value."""

    @abstractmethod
    def topk(self, a: Array, k: int, dim: int, largest: bool,
             sorted: bool) -> tuple[Array, Array]:
        """The ``k`` largest (or smallest) values along ``dim`` and their indices."""

    # ----------------------------------------------------------------- layout
    @abstractmethod
    def cat(self, arrays: Sequence[Array], dim: int) -> Array:
        """Concatenate arrays of one dtype along ``dim`` (other dims equal)."""

    @abstractmethod
    def flip(self, a: Array, dims: Shape) -> Array:
        """A copy of ``a`` reversed along ``dims``."""

    @abstractmethod
    def tril(self, a: Array, k: int) -> Array:
        """Lower triangle of the last two dims (diagonal offset ``k``), rest zero."""

    @abstractmethod
    def triu(self, a: Array, k: int) -> Array:
        """Upper triangle of the last two dims (diagonal offset ``k``), rest zero."""

    # ------------------------------------------------------------------ random
    @abstractmethod
    def new_generator(self, index: int | None):
        """A new random-number generator state for device ``index``."""

    @abstractmethod
    def default_generator(self, index: int | None):
        """The default generator of device ``index``: created on first call and seeded then
        from ``genesis.random.initial_seed()`` (``genesis.manual_seed`` reseeds it later)."""

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
    def normal_(self, a: Array, mean: float, std: float, gen) -> Array:
        """Fill floating ``a`` in place with N(mean, std^2) draws from ``gen``."""

    @abstractmethod
    def random_(self, a: Array, low: int, high: int, gen) -> Array:
        """Fill ``a`` in place with uniform integers in ``[low, high)``."""

    @abstractmethod
    def randperm(self, n: int, dtype: DType, index: int | None, gen) -> Array:
        """A random permutation of ``0..n-1``."""

    # ----------------------------------------------- optional fused kernels
    # Each has a composite default written with the primitives above. Defaults return
    # what the fused kernel must return, so autograd code is the same either way.

    def softmax(self, x: Array, dim: int, log: bool) -> Array:
        """*Optional.* softmax (or log_softmax when ``log``) along ``dim`` of floating
        ``x``, computed in at least float32 and returned in ``x``'s dtype."""
        work = x if self.dtype_of(x).itemsize >= 4 else self.cast(x, float32)
        shifted = self.binary("sub", work, self._expand(self.amax(work, (dim,), True), work))
        exp = self.unary("exp", shifted)
        total = self._expand(self.sum(exp, (dim,), True, self.dtype_of(work)), work)
        if log:
            out = self.binary("sub", shifted, self._expand_to(self.unary("log", total), work))
        else:
            out = self.binary("div", exp, total)
        return self.cast(out, self.dtype_of(x))

    def softmax_backward(self, y: Array, grad: Array, dim: int, log: bool) -> Array:
        """*Optional.* Gradient of (log_)softmax given its output ``y`` and ``grad``."""
        dt = self.dtype_of(y)
        if log:  # g - exp(y) * sum(g)
            total = self._expand(self.sum(grad, (dim,), True, dt), grad)
            return self.binary("sub", grad, self.binary("mul", self.unary("exp", y), total))
        dot = self._expand(self.sum(self.binary("mul", grad, y), (dim,), True, dt), y)
        return self.binary("mul", y, self.binary("sub", grad, dot))

    def layer_norm(self, x: Array, weight: Array | None, bias: Array | None,
                   eps: float) -> tuple[Array, Array, Array]:
        """*Optional.* Layer norm over the last dim: returns ``(y, mean, rstd)``, with
        ``mean``/``rstd`` float32 (float64 for float64 input) of shape ``x.shape[:-1] + (1,)``."""
        acc = _acc_dtype(self.dtype_of(x))
        xw = self.cast(x, acc)
        last = len(x.shape) - 1
        n = x.shape[-1]
        mean = self.binary("div", self.sum(xw, (last,), True, acc), float(n))
        centered = self.binary("sub", xw, self._expand(mean, xw))
        var = self.binary(
            "div", self.sum(self.binary("mul", centered, centered), (last,), True, acc),
            float(n))
        rstd = self.unary("rsqrt", self.binary("add", var, float(eps)))
        y = self.binary("mul", centered, self._expand(rstd, xw))
        y = self._affine(y, weight, bias, acc)
        return self.cast(y, self.dtype_of(x)), mean, rstd

    def layer_norm_backward(self, grad: Array, x: Array, weight: Array | None, mean: Array,
                            rstd: Array) -> tuple[Array, Array | None, Array | None]:
        """*Optional.* ``(grad_x, grad_weight, grad_bias)`` of ``layer_norm``."""
        acc = _acc_dtype(self.dtype_of(x))
        g = self.cast(grad, acc)
        xw = self.cast(x, acc)
        last = len(x.shape) - 1
        n = float(x.shape[-1])
        xhat = self.binary("mul", self.binary("sub", xw, self._expand(mean, xw)),
                           self._expand(rstd, xw))
        lead = tuple(range(last))
        gw = self.cast(self.sum(self.binary("mul", g, xhat), lead, False, acc),
                       self.dtype_of(weight)) if weight is not None else None
        gb = self.cast(self.sum(g, lead, False, acc), self.dtype_of(weight)) \
            if weight is not None else None
        gxhat = self.binary("mul", g, self._expand_to(self.cast(weight, acc), g)) \
            if weight is not None else g
        mean_g = self.binary("div", self.sum(gxhat, (last,), True, acc), n)
        mean_gx = self.binary(
            "div", self.sum(self.binary("mul", gxhat, xhat), (last,), True, acc), n)
        inner = self.binary("sub", self.binary("sub", gxhat, self._expand(mean_g, g)),
                            self.binary("mul", xhat, self._expand(mean_gx, g)))
        gx = self.binary("mul", inner, self._expand(rstd, g))
        return self.cast(gx, self.dtype_of(x)), gw, gb

    def rms_norm(self, x: Array, weight: Array | None, eps: float) -> tuple[Array, Array]:
        """*Optional.* RMS norm over the last dim: ``(y, rstd)``, ``rstd`` float32 of shape
        ``x.shape[:-1] + (1,)``."""
        acc = _acc_dtype(self.dtype_of(x))
        xw = self.cast(x, acc)
        last = len(x.shape) - 1
        ms = self.binary("div", self.sum(self.binary("mul", xw, xw), (last,), True, acc),
                         float(x.shape[-1]))
        rstd = self.unary("rsqrt", self.binary("add", ms, float(eps)))
        y = self._affine(self.binary("mul", xw, self._expand(rstd, xw)), weight, None, acc)
        return self.cast(y, self.dtype_of(x)), rstd

    def rms_norm_backward(self, grad: Array, x: Array, weight: Array | None,
                          rstd: Array) -> tuple[Array, Array | None]:
        """*Optional.* ``(grad_x, grad_weight)`` of ``rms_norm``."""
        acc = _acc_dtype(self.dtype_of(x))
        g = self.cast(grad, acc)
        xw = self.cast(x, acc)
        last = len(x.shape) - 1
        xhat = self.binary("mul", xw, self._expand(rstd, xw))
        gw = None
        if weight is not None:
            gw = self.cast(self.sum(self.binary("mul", g, xhat), tuple(range(last)), False, acc),
                           self.dtype_of(weight))
            g = self.binary("mul", g, self._expand_to(self.cast(weight, acc), g))
        mean_gx = self.binary("div", self.sum(self.binary("mul", g, xhat), (last,), True, acc),
                              float(x.shape[-1]))
        inner = self.binary("sub", g, self.binary("mul", xhat, self._expand(mean_gx, g)))
        gx = self.binary("mul", inner, self._expand(rstd, g))
        return self.cast(gx, self.dtype_of(x)), gw

    # --------------------------- optional fused kernels: LLM training (issue 9)
    # Composite defaults in ``genesis.backends.llm_composite`` (written with the contract's
    # other methods); a fused kernel reads half-precision operands once and computes in
    # float32 registers.

    def cross_entropy(self, logits: Array, target: Array, ignore_index: int,
                      label_smoothing: float) -> tuple[Array, Array]:
        """*Optional.* Per-row cross-entropy of ``logits`` (M, C) against int64 ``target`` (M,).

        Returns ``(loss, lse)``, both (M,) in float32 (float64 for float64 logits): ``lse``
        the row's logsumexp, ``loss = (1 - s) * (lse - z[t]) + s / C * (C * lse - sum(z))``
        with ``s = label_smoothing``, and 0 where ``target == ignore_index``. A fused kernel
        makes no float32 copy of half-precision logits."""
        return llm_composite.cross_entropy(self, logits, target, ignore_index, label_smoothing)

    def cross_entropy_backward(self, grad: Array, logits: Array, target: Array, lse: Array,
                               ignore_index: int, label_smoothing: float) -> Array:
        """*Optional.* Gradient of ``cross_entropy``'s per-row loss: ``grad`` (M,) float32 is
        each row's incoming gradient, ``lse`` (M,) the forward's. Returns (M, C) in
        ``logits``' dtype: ``grad * (softmax(z) - (1 - s) * onehot(t) - s / C)``, zero rows
        where ``target == ignore_index``."""
        return llm_composite.cross_entropy_backward(self, grad, logits, target, lse,
                                                    ignore_index, label_smoothing)

    def swiglu(self, gate: Array, up: Array) -> Array:
        """*Optional.* ``silu(gate) * up`` (same shape and dtype), in ``gate``'s dtype,
        computed in float32 (float64 stays) and rounded once."""
        return llm_composite.swiglu(self, gate, up)

    def swiglu_backward(self, grad: Array, gate: Array, up: Array) -> tuple[Array, Array]:
        """*Optional.* ``(grad_gate, grad_up)`` of ``swiglu``: with ``s = sigmoid(gate)``,
        ``grad * up * s * (1 + gate * (1 - s))`` and ``grad * gate * s``."""
        return llm_composite.swiglu_backward(self, grad, gate, up)

    def add_rms_norm(self, x: Array, residual: Array, weight: Array | None,
                     eps: float) -> tuple[Array, Array, Array]:
        """*Optional.* The residual add and RMS norm of a pre-norm decoder block in one pass:
        ``h = x + residual`` (same shape and dtype; rows over the last dim), returns
        ``(h, rms_norm(h), rstd)`` as ``rms_norm`` does (the norm of ``h`` as stored)."""
        return llm_composite.add_rms_norm(self, x, residual, weight, eps)

    def rotary(self, q: Array, k: Array, cos: Array, sin: Array,
               inverse: bool) -> tuple[Array, Array]:
        """*Optional.* Rotary position embedding of ``q`` (B, Hq, S, D) and ``k``
        (B, Hk, S, D) with ``cos``/``sin`` (B, S, D) (any strides; one dtype throughout),
        rotating the half-split pairs ``(x[..., i], x[..., i + D/2])``:
        ``out = x * cos + rotate_half(x) * sin``, ``rotate_half(x) = cat(-x2, x1)``. With
        ``inverse`` the transpose (the backward): ``x * cos - rotate_half(x * sin)``.
        Returns new contiguous arrays."""
        return llm_composite.rotary(self, q, k, cos, sin, inverse)

    def adam_step(self, params: Sequence[Array], grads: Sequence[Array],
                  exp_avgs: Sequence[Array], exp_avg_sqs: Sequence[Array],
                  max_exp_avg_sqs: Sequence[Array] | None, step: int, lr: float, beta1: float,
                  beta2: float, eps: float, weight_decay: float, decoupled: bool,
                  maximize: bool) -> None:
        """*Optional.* One Adam (``decoupled``: AdamW) step, in place, for every ``i``:
        ``params[i]``, its moments ``exp_avgs[i]`` / ``exp_avg_sqs[i]`` and, for AMSGrad,
        ``max_exp_avg_sqs[i]`` (else ``None``), all at step ``step`` (counted from 1) —
        ``genesis.optim.Adam``'s update. Lists of same-dtype arrays on one device; the
        composite replays the per-parameter update primitive by primitive (the same bits)."""
        llm_composite.adam_step(self, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
                                step, lr, beta1, beta2, eps, weight_decay, decoupled, maximize)

    def sgd_step(self, params: Sequence[Array], grads: Sequence[Array],
                 momentum_buffers: Sequence[Array | None], lr: float, momentum: float,
                 dampening: float, weight_decay: float, nesterov: bool,
                 maximize: bool) -> list[Array | None]:
        """*Optional.* One SGD step, in place, for every ``params[i]``; a ``None`` momentum
        buffer (first step) starts as a copy of the gradient. Returns the buffers (all
        ``None`` without momentum) — ``genesis.optim.SGD``'s update, as ``adam_step``."""
        return llm_composite.sgd_step(self, params, grads, momentum_buffers, lr, momentum,
                                      dampening, weight_decay, nesterov, maximize)

    def multi_tensor_norm(self, arrays: Sequence[Array], norm_type: float) -> Array:
        """*Optional.* The 2-norm (``norm_type`` 2.0) or max-abs norm (``inf``) of all of
        ``arrays``' elements together (floating arrays of one dtype on one device), as a
        0-d float32 array (float64 for float64 arrays); 0 when there are no elements."""
        return llm_composite.multi_tensor_norm(self, arrays, norm_type)

    def multi_tensor_scale_(self, arrays: Sequence[Array], scale: Array) -> None:
        """*Optional.* In place ``a *= scale`` for every array, ``scale`` a 0-d floating
        array on their device (read there: no host synchronisation); the product is taken in
        ``scale``'s dtype and rounded once to ``a``'s."""
        llm_composite.multi_tensor_scale_(self, arrays, scale)

    def amp_unscale_(self, arrays: Sequence[Array], inv_scale: Array, found_inf: Array) -> None:
        """*Optional.* GradScaler's unscale: set the 0-d float32 ``found_inf`` to 1 if any
        element of ``arrays`` is inf or NaN (checked before scaling), then
        ``a *= inv_scale`` (a 0-d float32 array) in place, for every array."""
        llm_composite.amp_unscale_(self, arrays, inv_scale, found_inf)

    # ------------------------------------------------------------- helpers
    def _expand(self, reduced: Array, like: Array) -> Array:
        """View a keepdim-reduced array (size-1 dims) at ``like``'s shape."""
        strides = tuple(0 if n == 1 else s for n, s in zip(reduced.shape,
                                                           self.strides_of(reduced)))
        return self.as_strided(reduced, like.shape, strides, self.storage_offset_of(reduced))

    def _expand_to(self, a: Array, like: Array) -> Array:
        """View ``a`` (trailing-aligned, numpy broadcasting) at ``like``'s shape."""
        pad = len(like.shape) - len(a.shape)
        shape = (1,) * pad + tuple(a.shape)
        strides = (0,) * pad + tuple(self.strides_of(a))
        strides = tuple(0 if n == 1 else s for n, s in zip(shape, strides))
        return self.as_strided(a, like.shape, strides, self.storage_offset_of(a))

    def _affine(self, y: Array, weight: Array | None, bias: Array | None, acc: DType) -> Array:
        if weight is not None:
            y = self.binary("mul", y, self._expand_to(self.cast(weight, acc), y))
        if bias is not None:
            y = self.binary("add", y, self._expand_to(self.cast(bias, acc), y))
        return y


def _acc_dtype(dtype: DType) -> DType:
    """Accumulation dtype of the composite norms: float64 stays, the rest use float32."""
    return dtype if dtype is float64 else float32
