"""The host path of the declared elementwise ops, and the kernels they call.

Most calls of an elementwise op meet the plainest case: tensors of one dtype, shape and
device, or a tensor and a Python float; no autocast cast for the op (autocast off, or the
operands already in the op's autocast dtype) and no profiler listening. That case skips
``Function.apply``, promotion and broadcasting: one kernel call and a wrap, and the graph
node made directly when an input requires grad (``save_binary`` saves what the Function's
own forward would). Every other call takes the op's full path in ``elementwise.py``
(``slow`` below), which states the rules.
"""

from __future__ import annotations

from genesis import dtypes as D
from genesis import op_declarations as decl
from genesis.autocast import _anywhere as _autocast_anywhere
from genesis.autocast import _state as _autocast
from genesis.autograd.function import _TENSOR_TYPES, Node
from genesis.autograd.function import _op_observers as _observers
from genesis.autograd.function import _record as record
from genesis.autograd.grad_mode import _state as _grad
from genesis.tensor import Tensor, new_tensor

_kernels: dict = {}  # (backend, arity, op) -> kernel callable, filled on first use


def kernel(backend, arity: int, op: str):
    """The backend's cached kernel callable for the declared op ``op`` of ``arity`` inputs."""
    k = _kernels.get((backend, arity, op))
    if k is None:
        k = backend.unary_kernel(op) if arity == 1 else backend.binary_kernel(op)
        _kernels[(backend, arity, op)] = k
    return k


class KernelTable:
    """backend -> that backend's kernel for one op (``table``), filled by ``fetch`` on a miss
    with ``make(backend)``."""

    def __init__(self, make):
        self.table: dict = {}
        self.make = make

    def fetch(self, backend):
        k = self.table[backend] = self.make(backend)
        return k


def unary_host_path(op: decl.Op, slow, cls):
    """The public function of a declared unary op (``cls``: its Function, or None when not
    differentiable): the host path above, else ``slow``."""
    kernels = KernelTable(lambda backend: kernel(backend, 1, op.name))
    check, category = op.check, op.autocast
    table, fetch = kernels.table, kernels.fetch
    floats, to_bool = op.ints == "float", op.ints == "bool"

    def fn(input: Tensor) -> Tensor:
        if (type(input) in _TENSOR_TYPES and not _observers
                and (not floats or input.dtype.is_floating_point)
                and (category is None or not (_autocast_anywhere.on and _autocast.enabled)
                     or _autocast.keeps(category, input))):
            if check is not None:
                check(input)
            backend = input._backend
            y = new_tensor((table.get(backend) or fetch(backend))(input._data), input.device,
                           backend, input.shape, D.bool_ if to_bool else input.dtype)
            if cls is not None and input.requires_grad and _grad.enabled:
                ctx = cls._backward_cls()  # what Function.apply records, with forward done above
                ctx.save_for_backward(input if cls.save_x else None, y if cls.save_y else None)
                record(ctx, (input,), y)
            return y
        return slow(input)

    return fn


def binary_host_path(op: decl.Op, slow, cls):
    """``apply(a, b)`` of a declared binary op (``cls``: its Function, or None when not
    differentiable): the host path above, else ``slow``."""
    kernels = KernelTable(lambda backend: kernel(backend, 2, op.name))
    check, category = op.check, op.autocast
    table, fetch = kernels.table, kernels.fetch
    floats, to_bool = op.ints == "float", op.ints == "bool"

    def apply(input, other):  # (torch's parameter names: it is the public function too)
        a, b = input, other
        if type(a) in _TENSOR_TYPES and not _observers:
            dtype = a.dtype
            if type(b) in _TENSOR_TYPES:
                if (b.dtype is not dtype or b.device is not a.device
                        or (b.shape is not a.shape and b.shape != a.shape)
                        or (floats and not dtype.is_floating_point)):
                    return slow(a, b)
                y, b_grad = b._data, b.requires_grad
            elif type(b) is float and dtype.is_floating_point:  # keeps a floating dtype
                y, b_grad = b, False
            else:
                return slow(a, b)
            if category is not None and _autocast_anywhere.on and _autocast.enabled and not (
                    _autocast.keeps(category, a)
                    and (y is b or _autocast.keeps(category, b))):  # (y is b: a float)
                return slow(a, b)
            if check is not None:
                check(a, b)
            backend = a._backend
            z = new_tensor((table.get(backend) or fetch(backend))(a._data, y), a.device,
                           backend, a.shape, D.bool_ if to_bool else dtype)
            if cls is not None and (a.requires_grad or b_grad) and _grad.enabled:
                ctx = cls._backward_cls()  # what Function.apply records, with forward done above
                save_binary(cls, ctx, a, b, z)
                record(ctx, (a, b), z)
            return z
        return slow(a, b)

    apply.__name__ = apply.__qualname__ = op.name
    return apply


_SAVES_NOTHING = (None, None, None)


def save_binary(cls, ctx: Node, a, b, z) -> None:
    """Save what the wanted gradients read (as torch): editing anything else in place later
    does not break backward."""
    a_t, b_t = type(a) in _TENSOR_TYPES, type(b) in _TENSOR_TYPES
    save_a, save_b, save_z = cls.saves[(a_t and a.requires_grad) * 2
                                       + (b_t and b.requires_grad)]
    if save_a or save_b or save_z:
        ctx.save_for_backward(a if save_a and a_t else None, b if save_b and b_t else None,
                              z if save_z else None)
    else:  # (add, sub: what save_for_backward of three Nones records, without the call)
        ctx._saved = _SAVES_NOTHING
    ctx.a_scalar = None if a_t else a
    ctx.b_scalar = None if b_t else b
    ctx.metas = ((a.shape, a.dtype) if a_t else None, (b.shape, b.dtype) if b_t else None)
