"""In-place ops (``add_``, ``copy_``, ``x[i] = v`` ...).

Without autograd they write straight into the tensor's memory (kernels take ``out=``).
When the graph must be recorded, the op is computed out of place on a snapshot and its
result written back; the tensor's history (and its base's, for a view) is then rerouted
through that op, and the version counter is bumped so stale saved tensors are caught.
"""

from __future__ import annotations

from genesis import creation
from genesis import dtypes as D
from genesis import op_declarations as decl
from genesis.autograd.function import check_inplace
from genesis.autograd.grad_mode import _state as _grad_state
from genesis.dispatch import OpHandle, intercept, register, registered_op
from genesis.dispatch import _modes as _intercepting
from genesis.ops import dim_indexing as DI
from genesis.ops import elementwise as E
from genesis.ops import indexing as I
from genesis.ops.common import KernelTable, broadcast_shapes, check_same_device, expand_array
from genesis.ops.special import erfinv
from genesis.ops.strided import Slice, rebase_view_history
from genesis.tensor import Tensor


def _records(t: Tensor, others) -> bool:
    if not _grad_state.enabled:
        return False
    if t.requires_grad or (t._base is not None and t._base.requires_grad):
        return True
    return any(isinstance(o, Tensor) and o.requires_grad for o in others)


def _write_back(t: Tensor, result: Tensor) -> None:
    """Copy ``result``'s values into ``t`` and take over its history."""
    if result.shape != t.shape:
        raise RuntimeError(
            f"output with shape {list(t.shape)} doesn't match the broadcast shape "
            f"{list(result.shape)}")
    if not D.can_cast(result.dtype, t.dtype):
        raise RuntimeError(f"result type {result.dtype} can't be cast to the desired output "
                           f"type {t.dtype}")
    t._backend.copy_(t._data, result._data)
    t._version_box[0] += 1
    if result.requires_grad:
        t.requires_grad, t.grad_fn = True, result.grad_fn
        t._out_idx = result._out_idx if result.grad_fn is not None else 0  # (set with grad_fn)
        if t._base is not None:
            rebase_view_history(t._base, t)


def apply_inplace(t: Tensor, compute, *others) -> Tensor:
    """Run ``compute(t_snapshot)`` (an out-of-place, differentiable expression) in place."""
    check_inplace(t)
    if _records(t, others):
        before = t.clone() if t.requires_grad else t.detach().clone()
        _write_back(t, compute(before))
    else:
        _write_back(t, compute(t))
    return t


def _binary_inplace(op: decl.Op):
    """``t.op_(other)`` for a declared binary op: one call of the backend's in-place kernel
    unless autograd must record it."""
    fn = E.FUNCTIONS[op.name]
    kernels = KernelTable(lambda backend: backend.inplace_kernel(op.name))
    table = kernels.table
    floats, check = op.ints == "float", op.check
    out_of_place = E.DECLARED[op.name].function.kernels

    def method(self: Tensor, other, **kwargs) -> Tensor:
        if _intercepting:
            return intercept(handle, (self, other), kwargs)
        if (type(self) is Tensor and check is None and not kwargs
                and not ((self.requires_grad or (
                    self._base is not None and self._base.requires_grad))
                    and _grad_state.enabled)):
            # the host path (as elementwise's): same dtype, shape and device, or a Python
            # float; nothing to record. One in-place kernel call.
            dtype = self.dtype
            if type(other) is Tensor:
                plain = (other.dtype is dtype and other.device is self.device
                         and (other.shape is self.shape or other.shape == self.shape)
                         and (not floats or dtype.is_floating_point)
                         and not (other.requires_grad and _grad_state.enabled))
                y = other._data
            else:
                plain, y = type(other) is float and dtype.is_floating_point, other
            if plain:
                backend = self._backend
                try:
                    kernel = table[backend]
                except KeyError:  # (this backend's first call of the op)
                    kernel = kernels.fill(backend)
                kernel(self._data, y)
                self._version_box[0] += 1
                return self
        if check is not None:
            check(self, other)
        if _records(self, (other,)):
            return apply_inplace(self, lambda s: fn(s, other, **kwargs), other)
        alpha = kwargs.pop("alpha", 1)
        if kwargs:
            raise TypeError(f"{op.name}_() got unexpected keyword arguments {sorted(kwargs)}")
        if alpha != 1:
            other = other * alpha
        backend, device, x, y, dtype, shape = E.declared.operands(
            op.name, self, other, E.declared.result_dtype(op, self, other))
        if not D.can_cast(dtype, self.dtype):
            raise RuntimeError(f"result type {dtype} can't be cast to the desired output type "
                               f"{self.dtype}")
        if shape != self.shape:
            broadcast_shapes(self.shape, shape)  # raises with both shapes if incompatible
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the "
                               f"broadcast shape {list(shape)}")
        run = out_of_place[backend]
        if dtype is self.dtype:
            run(x, y, out=self._data)
        else:
            backend.copy_(self._data, run(x, y))
        self._version_box[0] += 1
        return self

    method.__name__ = method.__qualname__ = op.name + "_"
    method.__doc__ = f"In-place ``{op.name}``."
    handle = register(OpHandle(op.name + "_", method))
    return method


def _unary_inplace(fn):
    def method(self: Tensor) -> Tensor:
        if _intercepting:
            return intercept(handle, (self,), {})
        return apply_inplace(self, fn)

    method.__name__ = method.__qualname__ = fn.__name__ + "_"
    method.__doc__ = f"In-place ``{fn.__name__}``."
    handle = register(OpHandle(fn.__name__ + "_", method))
    return method


# The in-place variants of the declared ops (``add_``, ``exp_`` ...), and erfinv's.
DECLARED_INPLACE = {op.name + "_": _unary_inplace(E.FUNCTIONS[op.name])
                    for op in decl.UNARY if op.inplace}
DECLARED_INPLACE.update({op.name + "_": _binary_inplace(op) for op in decl.BINARY if op.inplace})
DECLARED_INPLACE.update({alias + "_": DECLARED_INPLACE[op.name + "_"]
                         for op in decl.UNARY + decl.BINARY if op.inplace
                         for alias in op.aliases})
erfinv_ = _unary_inplace(erfinv)
add_ = DECLARED_INPLACE["add_"]


@registered_op("addcmul_")
def addcmul_(t: Tensor, tensor1: Tensor, tensor2: Tensor, *, value=1) -> Tensor:
    """In place ``t += value * tensor1 * tensor2``."""
    return add_(t, tensor1 * tensor2, alpha=value)


@registered_op("addcdiv_")
def addcdiv_(t: Tensor, tensor1: Tensor, tensor2: Tensor, *, value=1) -> Tensor:
    """In place ``t += value * tensor1 / tensor2``."""
    return add_(t, tensor1 / tensor2, alpha=value)


@registered_op("lerp_")
def lerp_(t: Tensor, end: Tensor, weight) -> Tensor:
    """In place ``t += weight * (end - t)``."""
    return add_(t, end - t, alpha=weight) if not isinstance(weight, Tensor) \
        else add_(t, (end - t) * weight)


@registered_op("copy_")
def copy_(t: Tensor, src, non_blocking: bool = False) -> Tensor:
    """Copy ``src`` (broadcast, cast, from any device) into ``t``."""
    if not isinstance(src, Tensor):
        raise TypeError(f"copy_(): argument 'src' must be Tensor, not {type(src).__name__}")
    if src.device is not t.device:
        src = src.to(t.device)
    if _records(t, (src,)):
        check_inplace(t)
        return apply_inplace(t, lambda s: _copy_result(s, src), src)
    check_inplace(t)
    shape = broadcast_shapes(t.shape, src.shape)
    if shape != t.shape:
        raise RuntimeError(f"copy_: source of shape {tuple(src.shape)} does not broadcast to "
                           f"destination shape {tuple(t.shape)}")
    t._backend.copy_(t._data, expand_array(src, t.shape))
    t._version_box[0] += 1
    return t


def _copy_result(dst: Tensor, src: Tensor) -> Tensor:
    """What ``dst.copy_(src)`` holds, as a differentiable expression of ``src``."""
    out = src.expand(dst.shape) if src.shape != dst.shape else src
    out = out.to(dst.dtype) if out.dtype is not dst.dtype else out
    return out + dst * 0 if dst.requires_grad else out.clone()


@registered_op("fill_")
def fill_(t: Tensor, value) -> Tensor:
    """Set every element to ``value`` (a number or a 0-d tensor)."""
    if isinstance(value, Tensor):
        if value.ndim:
            raise RuntimeError("fill_ only supports 0-dimension value tensor but got tensor "
                               f"with {value.ndim} dimensions.")
        if value.requires_grad and _grad_state.enabled:
            return apply_inplace(t, lambda s: value.to(t.dtype).expand(t.shape) + s * 0, value)
        value = value.item()
    check_inplace(t)
    if _records(t, ()):
        return apply_inplace(t, lambda s: s * 0 + value)
    t._backend.copy_(t._data, t._backend.full(t.shape, E.scalar_for(value, t.dtype), t.dtype,
                                              t.device.index))
    t._version_box[0] += 1
    return t


@registered_op("zero_")
def zero_(t: Tensor) -> Tensor:
    """Set every element to zero."""
    return fill_(t, 0)


@registered_op("clamp_")
def clamp_(t: Tensor, min=None, max=None) -> Tensor:  # noqa: A002
    return apply_inplace(t, lambda s: E.clamp(s, min, max))


@registered_op("masked_fill_")
def masked_fill_(t: Tensor, mask: Tensor, value) -> Tensor:
    return apply_inplace(t, lambda s: I.masked_fill(s, mask, value), value)


@registered_op("index_put_")
def index_put_(t: Tensor, indices: tuple, values, accumulate: bool = False) -> Tensor:
    """``t[indices] = values`` (or ``+=``), indices a tuple of index tensors or None."""
    if not isinstance(values, Tensor):
        values = creation.tensor(values, dtype=t.dtype, device=t.device)
    check_same_device("index_put_", t, values)
    if values.dtype is not t.dtype:
        values = values.to(t.dtype)
    flat = []
    for i in indices:  # a bool mask stands for the coordinates of its True elements, as torch
        if isinstance(i, Tensor) and i.dtype is D.bool_:
            flat.extend(i.nonzero(as_tuple=True))
        else:
            flat.append(i)
    indices = tuple(flat) + (None,) * (t.ndim - len(flat))
    if _records(t, (values,)):
        return apply_inplace(t, lambda s: I.IndexPut.apply(s, indices, values, accumulate),
                             values)
    # nothing to record: one kernel straight into t's memory (no snapshot, no write-back)
    if accumulate and any(i is None for i in indices):
        values = values.expand(I._indexed_shape(t, indices))
        indices = tuple(I.full_indices(t.shape, list(indices)))
    arrays = [None if i is None else i._data for i in indices]
    t._backend.index_put_(t._data, arrays, values._data, accumulate)
    t._version_box[0] += 1
    return t


@registered_op("scatter_")
def scatter_(t: Tensor, dim, index, src=None, *, value=None, reduce=None) -> Tensor:
    return apply_inplace(t, lambda s: DI.scatter(s, dim, index, src, value=value, reduce=reduce),
                         src)


@registered_op("scatter_add_")
def scatter_add_(t: Tensor, dim, index, src) -> Tensor:
    return apply_inplace(t, lambda s: DI.scatter_add(s, dim, index, src), src)


@registered_op("index_add_")
def index_add_(t: Tensor, dim, index, source, *, alpha=1) -> Tensor:
    return apply_inplace(t, lambda s: DI.index_add(s, dim, index, source, alpha=alpha), source)


@registered_op("setitem")
def setitem(x: Tensor, key, value) -> None:
    """``x[key] = value`` in place (value broadcasts; autograd-aware)."""
    if type(key) in (int, slice) or key is None:  # not bool: x[True] adds a dim
        basic, advanced = I._basic_key(x, (key,)), {}
    else:
        basic, advanced = I._split_key(x, key)
    view = Slice.apply(x, basic) if basic else x
    if not advanced:
        if isinstance(value, Tensor):
            copy_(view, value.expand(view.shape) if value.shape != view.shape else value)
        else:
            fill_(view, value)
        return
    index_put_(view, tuple(I._prepare_advanced(view, advanced)), value)
