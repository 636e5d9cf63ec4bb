"""Attach the op functions to ``Tensor`` as methods and Python operators.

Kept apart from ``tensor.py`` so the class file holds only the tensor's own state; every
method here is the function of the same name in ``genesis.ops`` with ``self`` first.
"""

from __future__ import annotations

from genesis import creation, legacy_types, ops, sampling
from genesis import op_declarations as decl
from genesis.ops import (
    conversion,
    declared_reductions,
    elementwise,
    indexing,
    inplace,
    joining,
    strided,
    views,
)
from genesis.tensor import Tensor

_SAME_NAME = (
    # elementwise (the declared ops are attached from genesis.op_declarations)
    "addcdiv", "addcmul", "allclose", "clamp", "clamp_max", "clamp_min", "clip", "equal",
    "erfinv", "isclose", "lerp", "reciprocal", "square",
    # reductions (the declared ones are attached from genesis.op_declarations)
    "count_nonzero", "cumsum", "logsumexp", "max", "mean", "min", "norm", "std", "var",
    # linalg, joining, sorting, indexing, fused
    "bmm", "dot", "matmul", "mm", "outer", "chunk", "flip", "fliplr", "flipud",
    "repeat_interleave", "roll", "split", "tensor_split", "tile", "tril", "triu", "argsort",
    "kthvalue", "msort", "sort", "topk", "gather", "index_add", "index_select",
    "bincount", "masked_fill", "masked_select", "nonzero", "argwhere", "scatter", "scatter_add",
    "softmax", "log_softmax",
    # views
    "as_strided", "broadcast_to", "contiguous", "expand", "flatten", "movedim", "moveaxis",
    "narrow", "permute", "ravel", "reshape", "select", "squeeze", "swapaxes", "swapdims",
    "t", "transpose", "unbind", "unflatten", "unsqueeze", "view",
    # conversion
    "clone", "to", "type_as",
)


_OPERANDS = (Tensor, int, float, bool)


def _new_like(factory):
    """``t.new_<factory>(...)``: ``factory(...)`` with ``t``'s dtype and device as defaults."""

    def method(self, *args, dtype=None, device=None, requires_grad=False):
        return factory(*args, dtype=dtype or self.dtype, device=device or self.device,
                       requires_grad=requires_grad)

    method.__name__ = f"new_{factory.__name__}"
    return method


def _install_declared() -> None:
    """Methods, in-place variants and operators of the ops in ``genesis.op_declarations``
    (the elementwise ops and the reductions)."""
    for op in decl.UNARY + decl.BINARY:
        fn = elementwise.FUNCTIONS[op.name]
        if op.method:
            for name in (op.name, *op.aliases):
                setattr(Tensor, name, fn)
        if op.inplace:
            for name in (op.name, *op.aliases):
                setattr(Tensor, name + "_", inplace.DECLARED_INPLACE[name + "_"])
        if op.operator is not None:
            apply = elementwise.DECLARED[op.name].apply  # (no alpha= on this path)
            setattr(Tensor, f"__{op.operator}__", apply)
            setattr(Tensor, f"__r{op.operator}__", lambda a, b, f=apply: f(b, a))
            if op.inplace:
                setattr(Tensor, f"__i{op.operator}__", inplace.DECLARED_INPLACE[op.name + "_"])
    for op in decl.REDUCTIONS:
        if op.method:
            setattr(Tensor, op.name, declared_reductions.FUNCTIONS[op.name])


_eq, _ne = elementwise.FUNCTIONS["eq"], elementwise.FUNCTIONS["ne"]


def _install() -> None:
    for name in _SAME_NAME:
        setattr(Tensor, name, getattr(ops, name))
    Tensor.repeat = joining.repeat
    Tensor.expand_as = views.expand_as
    Tensor.unfold = strided.unfold
    # what autograd reaches through the tensor (autograd sits below the ops)
    Tensor._rebase_view_history = strided.rebase_view_history
    Tensor.where = lambda self, condition, other: ops.where(condition, self, other)
    Tensor.view_as = lambda self, other: ops.view(self, other.shape)
    Tensor.reshape_as = lambda self, other: ops.reshape(self, other.shape)
    Tensor.cpu = conversion.cpu
    Tensor.cuda = conversion.cuda
    Tensor.type = legacy_types.tensor_type
    Tensor.pin_memory = legacy_types.pin_memory
    Tensor.is_pinned = legacy_types.is_pinned
    for name, fn in conversion.DTYPE_SHORTHANDS.items():
        setattr(Tensor, name, fn)

    # in-place
    for name in ("copy_", "fill_", "zero_", "clamp_", "masked_fill_", "index_put_", "scatter_",
                 "scatter_add_", "index_add_", "erfinv_"):
        setattr(Tensor, name, getattr(inplace, name))
    Tensor.clip_ = inplace.clamp_
    Tensor.addcmul_ = inplace.addcmul_
    Tensor.addcdiv_ = inplace.addcdiv_
    Tensor.lerp_ = inplace.lerp_
    Tensor.uniform_ = sampling.uniform_
    Tensor.normal_ = sampling.normal_
    Tensor.random_ = sampling.random_
    Tensor.multinomial = sampling.multinomial
    Tensor.index_put = lambda self, indices, values, accumulate=False: inplace.index_put_(
        self.clone(), indices, values, accumulate)

    # new_* factories keep the tensor's dtype and device unless told otherwise
    Tensor.new_zeros = _new_like(creation.zeros)
    Tensor.new_ones = _new_like(creation.ones)
    Tensor.new_empty = _new_like(creation.empty)
    Tensor.new_full = _new_like(creation.full)
    Tensor.new_tensor = _new_like(creation.tensor)

    # properties
    Tensor.T = property(lambda self: ops.permute(self, tuple(reversed(range(self.ndim)))))
    Tensor.mT = property(lambda self: ops.transpose(self, -2, -1))
    Tensor.H = Tensor.T

    # indexing
    Tensor.__getitem__ = indexing.tensor_getitem
    Tensor.__setitem__ = inplace.setitem

    # operators
    _install_declared()
    Tensor.__matmul__ = ops.matmul
    Tensor.__rmatmul__ = lambda a, b: ops.matmul(b, a)
    Tensor.__neg__ = ops.neg
    Tensor.__pos__ = lambda a: a
    Tensor.__abs__ = ops.abs
    Tensor.__invert__ = lambda a: ops.logical_not(a) if a.dtype.name == "bool" \
        else ops.bitwise_not(a)
    # `x == None` / `x == "a"` are False (True for !=) in torch, never an error: Python's
    # fallback after NotImplemented gives exactly that (and keeps `x in [..., None]` working).
    Tensor.__eq__ = lambda a, b: _eq(a, b) if isinstance(b, _OPERANDS) \
        else NotImplemented
    Tensor.__ne__ = lambda a, b: _ne(a, b) if isinstance(b, _OPERANDS) \
        else NotImplemented
    Tensor.__lt__ = ops.lt
    Tensor.__le__ = ops.le
    Tensor.__gt__ = ops.gt
    Tensor.__ge__ = ops.ge

_install()
