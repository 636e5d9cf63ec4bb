"""Attach the op functions to ``Tensor`` as methods and Python operators.

Kept apart from ``tensor.py`` so the class file holds only the tensor's own state; every
method here is the function of the same name in ``genesis.ops`` with ``self`` first.
"""

from __future__ import annotations

from genesis import creation, ops
from genesis.ops import comparison, conversion, elementwise, indexing, inplace
from genesis.tensor import Tensor

_SAME_NAME = (
    # elementwise
    "abs", "add", "addcdiv", "addcmul", "allclose", "atan2", "bitwise_and", "bitwise_not",
    "bitwise_or", "bitwise_xor", "ceil", "clamp", "clamp_max", "clamp_min", "clip", "cos",
    "div", "divide", "eq", "equal", "erf", "erfinv", "isclose",
    "exp", "exp2", "expm1", "floor", "floor_divide", "ge", "greater", "greater_equal", "gt",
    "isfinite", "isinf", "isnan", "le", "lerp", "less", "less_equal", "log", "log1p", "log2",
    "logical_and", "logical_not", "logical_or", "logical_xor", "lt", "maximum", "minimum",
    "mul", "multiply", "ne", "neg", "not_equal", "pow", "reciprocal", "relu", "remainder",
    "round", "rsqrt", "sigmoid", "sign", "sin", "sqrt", "square", "sub", "subtract", "tanh",
    "true_divide",
    # reductions
    "all", "amax", "amin", "any", "argmax", "argmin", "count_nonzero", "cumsum",
    "logsumexp", "max", "mean", "min", "norm", "prod", "std", "sum", "var",
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


def _install() -> None:
    for name in _SAME_NAME:
        setattr(Tensor, name, getattr(ops, name))
    from genesis.ops.joining import repeat
    from genesis.ops.views import expand_as, unfold

    Tensor.repeat = repeat
    Tensor.expand_as = expand_as
    Tensor.unfold = unfold
    Tensor.view_as = lambda self, other: ops.view(self, other.shape)
    Tensor.reshape_as = lambda self, other: ops.reshape(self, other.shape)
    Tensor.cpu = conversion.cpu
    Tensor.cuda = conversion.cuda
    for name, fn in conversion.DTYPE_SHORTHANDS.items():
        setattr(Tensor, name, fn)

    # in-place
    for name in ("add_", "sub_", "mul_", "div_", "pow_", "remainder_", "copy_", "fill_",
                 "zero_", "clamp_", "masked_fill_", "index_put_", "scatter_", "scatter_add_",
                 "index_add_"):
        setattr(Tensor, name, getattr(inplace, name))
    for name, fn in inplace.UNARY_INPLACE.items():
        setattr(Tensor, name, fn)
    Tensor.clip_ = inplace.clamp_
    Tensor.addcmul_ = inplace.addcmul_
    Tensor.addcdiv_ = inplace.addcdiv_
    Tensor.lerp_ = inplace.lerp_
    Tensor.uniform_ = creation.uniform_
    Tensor.normal_ = creation.normal_
    Tensor.random_ = creation.random_
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
    Tensor.__getitem__ = indexing.getitem
    Tensor.__setitem__ = indexing.setitem

    # operators
    Tensor.__add__ = Tensor.__radd__ = lambda a, b: elementwise.Add.apply(a, b)
    Tensor.__sub__ = lambda a, b: elementwise.Sub.apply(a, b)
    Tensor.__rsub__ = lambda a, b: elementwise.Sub.apply(b, a)
    Tensor.__mul__ = Tensor.__rmul__ = lambda a, b: elementwise.Mul.apply(a, b)
    Tensor.__truediv__ = lambda a, b: elementwise.Div.apply(a, b)
    Tensor.__rtruediv__ = lambda a, b: elementwise.Div.apply(b, a)
    Tensor.__floordiv__ = lambda a, b: elementwise.floor_divide(a, b)
    Tensor.__rfloordiv__ = lambda a, b: elementwise.floor_divide(b, a)
    Tensor.__mod__ = lambda a, b: elementwise.remainder(a, b)
    Tensor.__rmod__ = lambda a, b: elementwise.remainder(b, a)
    Tensor.__pow__ = lambda a, b: elementwise.Pow.apply(a, b)
    Tensor.__rpow__ = lambda a, b: elementwise.Pow.apply(b, a)
    Tensor.__matmul__ = ops.matmul
    Tensor.__rmatmul__ = lambda a, b: ops.matmul(b, a)
    Tensor.__neg__ = ops.neg
    Tensor.__pos__ = lambda a: a
    Tensor.__abs__ = ops.abs
    Tensor.__invert__ = lambda a: comparison.logical_not(a) if a.dtype.name == "bool" \
        else comparison.bitwise_not(a)
    Tensor.__and__ = Tensor.__rand__ = comparison.bitwise_and
    Tensor.__or__ = Tensor.__ror__ = comparison.bitwise_or
    Tensor.__xor__ = Tensor.__rxor__ = comparison.bitwise_xor
    # `x == None` / `x == "a"` are False (True for !=) in torch, never an error: Python's
    # fallback after NotImplemented gives exactly that (and keeps `x in [..., None]` working).
    Tensor.__eq__ = lambda a, b: comparison.eq(a, b) if isinstance(b, _OPERANDS) \
        else NotImplemented
    Tensor.__ne__ = lambda a, b: comparison.ne(a, b) if isinstance(b, _OPERANDS) \
        else NotImplemented
    Tensor.__lt__ = comparison.lt
    Tensor.__le__ = comparison.le
    Tensor.__gt__ = comparison.gt
    Tensor.__ge__ = comparison.ge
    Tensor.__iadd__ = inplace.add_
    Tensor.__isub__ = inplace.sub_
    Tensor.__imul__ = inplace.mul_
    Tensor.__itruediv__ = inplace.div_
    Tensor.__ipow__ = inplace.pow_
    Tensor.__imod__ = inplace.remainder_


_install()
