"""``genesis.Tensor``: an n-d array on a device, with the autograd bookkeeping.

A Tensor wraps one backend *array* (``_data``) and caches what the host path reads most
(``shape``, ``dtype``, ``device``, ``_backend``, and once read or known, the array's strides
and offset: ``_geom``). Views share their base's version counter (``_version_box``), which
is how autograd notices in-place edits of saved tensors.
Math methods live in ``genesis.ops`` and are attached in ``tensor_methods``.
"""

from __future__ import annotations

import math

import numpy as np

from genesis import dtypes as D
from genesis.autograd import engine
from genesis.autograd.function import _TENSOR_TYPES, _RemovableHandle, grad_edge
from genesis.autograd.grad_mode import no_grad
from genesis.device import CPU
from genesis.dispatch import registered_op
from genesis.printing import tensor_repr
from genesis.shapes import Size, _wrap_dim, interned_size, is_contiguous_geometry


class _TensorType(type):
    """Tensor's metaclass. ``genesis.Tensor(...)`` is not a constructor (tensors come from
    ``genesis.tensor``, ``genesis.zeros`` and friends); a subclass with its own ``__new__``
    (``nn.Parameter``) constructs as usual. Genesis makes its tensors with ``blank_tensor``,
    which does not come here."""

    def __call__(cls, *args, **kwargs):
        if cls.__new__ is object.__new__:
            raise TypeError(f"create tensors with genesis.tensor(...), genesis.zeros(...) and "
                            f"friends, not {cls.__name__}(...)")
        return super().__call__(*args, **kwargs)


class Tensor(metaclass=_TensorType):
    """A multi-dimensional array with autograd support; make one with ``genesis.tensor``.

    Example:
        >>> x = genesis.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        >>> (x * x).sum().backward()
        >>> x.grad
        tensor([[2., 4.],
                [6., 8.]])
    """

    __slots__ = ("_data", "_backend", "shape", "dtype", "device", "_version_box", "_base",
                 "_geom", "requires_grad", "grad_fn", "_out_idx", "_leaf_edge", "__weakref__",
                 "__dict__")
    # requires_grad and grad_fn are read by every op and set on every recorded output: slots,
    # set when a tensor is made. (CPython does not specialise reading a class-level default
    # through an instance, and a recorded output would allocate an instance dict.) _out_idx
    # (which output of grad_fn the tensor is) and _leaf_edge (the (AccumulateGrad, 0) edge of a
    # leaf that joined a graph) are slots left unset when a tensor is made — two slot writes
    # less per op, where most tensors never join a graph: _out_idx is set with a grad_fn and
    # read only where grad_fn is not None; _leaf_edge is made the first time the leaf joins a
    # graph (``grad_edge``). The rarer autograd state stays a class-level default, set per
    # instance where it changes.
    _grad = None
    _retains_grad = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _TENSOR_TYPES.add(cls)

    # ---------------------------------------------------------------- making
    @classmethod
    def _wrap(cls, data, device, base=None, shape=None, dtype=None) -> Tensor:
        """Wrap backend array ``data`` living on ``device`` (``base``: the tensor viewed).

        ``shape`` (a ``Size``) and ``dtype``, when the caller knows them, spare reading them
        off the array (the host path's most frequent backend calls)."""
        t = blank_tensor() if cls is Tensor else _new(cls)
        t._data = data
        backend = t._backend = device._backend or device.backend  # (property: first use)
        t.shape = shape if shape is not None else interned_size(data.shape)
        t.dtype = dtype if dtype is not None else backend.dtype_of(data)
        t.device = device
        t._geom = None
        t.requires_grad = False
        t.grad_fn = None
        if base is None:
            t._version_box = [0]
            t._base = None
        else:
            t._version_box = base._version_box
            t._base = base._base if base._base is not None else base
        return t

    @staticmethod
    def _make_subclass(cls, data: Tensor, requires_grad: bool = False) -> Tensor:
        """A ``cls`` instance sharing ``data``'s array (how ``nn.Parameter`` is made)."""
        t = cls._wrap(data._data, data.device)
        t.requires_grad = requires_grad
        return t

    # ------------------------------------------------------------ properties
    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    def size(self, dim: int | None = None):
        """The shape, or the length of one dimension."""
        if dim is None:
            return self.shape
        return self.shape[_wrap_dim(dim, len(self.shape))]

    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    nelement = numel

    def stride(self, dim: int | None = None):
        """Strides in elements (of one dim, or all)."""
        strides = geometry(self)[0]
        return strides if dim is None else strides[_wrap_dim(dim, len(strides))]

    def storage_offset(self) -> int:
        return geometry(self)[1]

    def data_ptr(self) -> int:
        return self._backend.data_ptr(self._data)

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.numel() * self.dtype.itemsize

    def is_contiguous(self) -> bool:
        """Whether the elements are laid out in C order with no gaps."""
        return is_contiguous_geometry(self.shape, self.stride())

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def is_cpu(self) -> bool:
        return self.device.type == "cpu"

    @property
    def _version(self) -> int:
        return self._version_box[0]

    @property
    def data(self) -> Tensor:
        """This tensor's values, detached from autograd (shares memory).

        Unlike ``detach()``, edits through ``.data`` are hidden from autograd's in-place
        check (a version counter of its own, as in torch): ``p.data.mul_(0.5)`` after a
        forward that saved ``p`` still lets backward run, with the new values.
        """
        return Tensor._wrap(self._data, self.device)

    @data.setter
    def data(self, value: Tensor) -> None:
        if value.shape != self.shape or value.dtype is not self.dtype \
                or value.device is not self.device:
            # torch allows a full swap; so do we, keeping autograd identity.
            self.shape, self.dtype, self.device = value.shape, value.dtype, value.device
            self._backend = value._backend
        self._data = value._data
        self._geom = value._geom

    # -------------------------------------------------------------- autograd
    @property
    def grad(self) -> Tensor | None:
        """The gradient accumulated by ``backward`` (None until then)."""
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got "
                                f"{type(value).__name__}")
            if value.shape != self.shape:
                raise RuntimeError(f"attempting to assign a gradient of size "
                                   f"{list(value.shape)} to a tensor of size {list(self.shape)}")
            if value.dtype is not self.dtype:
                raise RuntimeError(f"attempting to assign a gradient with dtype {value.dtype} "
                                   f"to a tensor with dtype {self.dtype}")
            if value.device is not self.device:
                raise RuntimeError(f"attempting to assign a gradient on {value.device} to a "
                                   f"tensor on {self.device}")
        self._grad = value

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set whether autograd records ops on this leaf tensor."""
        if not self.is_leaf and not requires_grad:
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables. If you want to use "
                "a computed variable in a subgraph that doesn't require differentiation use "
                "var_no_grad = var.detach().")
        if requires_grad and not self.dtype.is_floating_point:
            raise RuntimeError(
                f"only Tensors of floating point dtype can require gradients, got {self.dtype}")
        self.requires_grad = requires_grad
        return self

    def detach(self) -> Tensor:
        """A tensor sharing this one's memory, cut off from the graph."""
        t = Tensor._wrap(self._data, self.device, base=self)
        t._base = None  # shares the version counter, but is no view for autograd (as torch)
        return t

    def detach_(self) -> Tensor:
        """Cut this tensor off from the graph in place."""
        self.grad_fn = None
        self.requires_grad = False
        return self

    def retain_grad(self) -> None:
        """Keep ``.grad`` for this non-leaf tensor after backward."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.is_leaf or self._retains_grad:
            return
        self._retains_grad = True
        import weakref

        ref = weakref.ref(self)

        def keep(grad):
            t = ref()
            if t is not None:
                t.grad = grad.detach().clone() if t.grad is None else t.grad + grad
            return None

        self.grad_fn.hooks_at(self._out_idx).append(keep)

    def register_hook(self, hook):
        """Call ``hook(grad)`` when this tensor's gradient is computed; a non-None return
        replaces the gradient. Returns a handle with ``remove()``."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        node, idx = grad_edge(self)
        hooks = node.hooks_at(idx)
        hooks.insert(0, hook) if self._retains_grad else hooks.append(hook)
        return _RemovableHandle(hooks, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """Call ``hook(tensor)`` after backward has accumulated into this leaf's ``.grad``
        (what DistributedDataParallel starts its bucket all-reduce from). Returns a handle
        with ``remove()``."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf "
                               "tensors")
        node, _ = grad_edge(self)
        node._post_accumulate_hooks.append(hook)
        return _RemovableHandle(node._post_accumulate_hooks, hook)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad``.

        Args:
            gradient: d(loss)/d(self); required unless ``self`` has one element.
            retain_graph: keep saved tensors for another backward (default: create_graph).
            create_graph: record the backward pass itself (for higher-order gradients).
            inputs: only accumulate into these tensors.
        """
        engine.run_backward(self, gradient, retain_graph, create_graph,
                            inputs=inputs, accumulate=True)

    def _implicit_grad(self) -> Tensor:
        """The gradient ``backward()`` of a one-element tensor starts from: ones of its
        shape, dtype and device (made directly: this runs once per training step)."""
        backend = self._backend
        return new_tensor(backend.full(self.shape, 1, self.dtype, self.device.index),
                          self.device, backend, self.shape, self.dtype)

    # ------------------------------------------------------------ host access
    def item(self):
        """The value of a one-element tensor as a Python number."""
        if self.numel() != 1:
            raise RuntimeError(
                f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
        return self._backend.item(self._data)

    def numpy(self, *, force: bool = False) -> np.ndarray:
        """A numpy array of the values (shares memory for CPU tensors, like torch)."""
        if self.requires_grad and not force:
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() "
                "instead.")
        if self.device is not CPU and not force:
            raise TypeError(
                f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to "
                "copy the tensor to host memory first.")
        if self.dtype is D.bfloat16:
            raise TypeError("Got unsupported ScalarType BFloat16: numpy has no bfloat16")
        return self._backend.to_numpy(self._data)

    def _host_numpy(self) -> np.ndarray:
        """Values as numpy on the host, for printing and tolist (bf16 widened to float32)."""
        t = self.detach()
        if t.dtype is D.bfloat16:
            t = t.to(D.float32)
        return t._backend.to_numpy(t._data)

    def tolist(self):
        """The values as (nested) Python lists."""
        return self._host_numpy().tolist()

    def __array__(self, dtype=None, copy=None):
        arr = self._host_numpy()
        return arr if dtype is None else arr.astype(dtype)

    def __dlpack__(self, stream=None, **kwargs):
        if self.requires_grad:
            raise RuntimeError("Can't export tensors that require gradient, use tensor.detach()")
        return self._backend.to_dlpack(self._data, stream)

    def __dlpack_device__(self):
        return self._backend.dlpack_device(self._data)

    # --------------------------------------------------------- python protocol
    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise RuntimeError(
                f"Boolean value of Tensor with {self.numel()} values is ambiguous")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.category != 1 or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an "
                            "index")
        return int(self.item())

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return tensor_repr(self)

    def __format__(self, spec: str) -> str:
        # f"{loss:.4f}": a 0-d tensor formats as its number, as in torch
        if self.ndim == 0 and type(self) is Tensor:
            return self.item().__format__(spec)
        return object.__format__(self, spec)

    def __deepcopy__(self, memo: dict) -> Tensor:
        """A new leaf with cloned data, requires_grad and a deep-copied ``.grad`` (torch's
        rules: only graph leaves can be deep-copied)."""
        if not self.is_leaf:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the "
                "deepcopy protocol at the moment. If you were attempting to deepcopy a module, "
                "this may be because of a torch.nn.utils.weight_norm usage, see "
                "https://github.com/pytorch/pytorch/pull/103001")
        if id(self) in memo:
            return memo[id(self)]
        import copy

        with no_grad():
            data = self.clone()
        new = data if type(self) is Tensor else Tensor._make_subclass(type(self), data)
        new.requires_grad = self.requires_grad
        memo[id(self)] = new
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return new

    def __reduce_ex__(self, protocol):
        raise TypeError("genesis tensors are not picklable: use genesis.save")


_new = object.__new__
# A Tensor with no field set yet, for the makers below (and x[a:b]'s host path, which sets
# the fields inline): the class call (``type.__call__``) bound to Tensor, which skips
# _TensorType.__call__. It costs what ``C()`` costs for a class with no ``__init__``: 55-100 ns
# less than ``object.__new__(Tensor)`` where measured (docs/benchmarks.md), on every result.
blank_tensor = type.__call__.__get__(Tensor)


def new_tensor(data, device, backend, shape: Size, dtype: D.DType) -> Tensor:
    """A new Tensor (no view) of the array ``data``, all of whose metadata the caller knows:
    ``Tensor._wrap`` with nothing to look up, for the host path of the tiny ops."""
    t = blank_tensor()
    t._data = data
    t._backend = backend
    t.shape = shape
    t.dtype = dtype
    t.device = device
    t._version_box = [0]
    t._base = None
    t._geom = None
    t.requires_grad = False
    t.grad_fn = None
    return t


def view_tensor(x: Tensor, data, shape: Size, geom: tuple) -> Tensor:
    """A view of ``x`` (plain Tensor, no graph) whose array ``data`` the backend made with
    ``geom = (strides, offset)``: the result of every view op's host path, geometry kept."""
    t = blank_tensor()
    t._data = data
    t._backend = x._backend
    t.shape = shape
    t.dtype = x.dtype
    t.device = x.device
    t._version_box = x._version_box
    base = x._base
    t._base = x if base is None else base
    t._geom = geom
    t.requires_grad = False
    t.grad_fn = None
    return t


def geometry(t: Tensor) -> tuple:
    """``(strides, storage offset)`` of ``t``'s array, read from the backend once per tensor
    (an array's geometry never changes; views are made knowing theirs)."""
    geom = t._geom
    if geom is None:
        backend, data = t._backend, t._data
        geom = t._geom = (tuple(backend.strides_of(data)), backend.storage_offset_of(data))
    return geom


_TENSOR_TYPES.add(Tensor)
# Host reads and detach are ops of the registry: a dispatch mode sees them (the compiler
# breaks its graph at a host read, and follows a detached tensor as a view of its input).
for _name in ("item", "tolist", "numpy", "detach"):
    setattr(Tensor, _name, registered_op(_name)(getattr(Tensor, _name)))
__all__ = ["Size", "Tensor", "blank_tensor", "geometry", "interned_size", "is_contiguous_geometry",
           "new_tensor", "view_tensor"]
