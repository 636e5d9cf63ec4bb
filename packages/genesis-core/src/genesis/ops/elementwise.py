"""Elementwise ops: the public functions of the declared ops (made in
``declared_elementwise``, from ``genesis.op_declarations``), the hand-written ones with more
arguments (``round(decimals=)``, ``div(rounding_mode=)``), where, clamp and the composites
built on them (lerp, addcmul ...); erfinv is in ``special``.
"""

from __future__ import annotations

from genesis import dtypes as D
from genesis import op_declarations as decl
from genesis.autograd.function import Function
from genesis.ops import declared_elementwise as declared
from genesis.ops.common import (
    broadcast_shapes,
    check_same_device,
    expand_array,
    sum_to_shape,
    wrap,
)
from genesis.ops.declared_elementwise import scalar_for
from genesis.tensor import Tensor

DECLARED = declared.DECLARED
_div, _round, floor_divide = DECLARED["div"], DECLARED["round"], DECLARED["floor_divide"]


def round(input: Tensor, decimals: int = 0) -> Tensor:  # noqa: A001 - torch's name
    """Round to the nearest integer (half to even), or to ``decimals`` places.

    Args:
        input: the input tensor.
        decimals: the number of decimal places (negative: tens, hundreds ...).

    Returns:
        A new tensor of ``input``'s shape and dtype.
    """
    if decimals == 0:
        return _round(input)
    if input.dtype in (D.float16, D.bfloat16):  # float math, one rounding: torch's kernel
        return round(input.to(D.float32), decimals).to(input.dtype)
    scale = 10.0 ** decimals
    return _round(input * scale) / scale


def div(input, other, *, rounding_mode: str | None = None) -> Tensor:
    """True division (integers give floats), or ``'trunc'``/``'floor'`` rounding.

    Args:
        input: the dividend (a tensor or a number).
        other: the divisor (a tensor or a number).
        rounding_mode: None (true division), ``'trunc'`` or ``'floor'``.

    Returns:
        A new tensor of the broadcast shape.

    Integer rounding divisions are exact (no float round trip). An integer zero divisor
    raises ``RuntimeError: ZeroDivisionError`` on the CPU; on CUDA it gives an unspecified
    value and no error (a check would cost a host synchronisation), as torch on each device.
    """
    if rounding_mode is None:
        return _div(input, other)
    if rounding_mode == "floor":
        return floor_divide(input, other)
    if rounding_mode == "trunc":
        if not D.result_type(input, other).is_floating_point:
            return _trunc_divide_integers(input, other)
        q = _div(input, other)
        return where(q < 0, q.ceil(), q.floor())
    raise ValueError(f"div expected rounding_mode None, 'trunc' or 'floor', got {rounding_mode!r}")


def _trunc_divide_integers(input, other) -> Tensor:
    """Integer division rounded toward zero, in integer arithmetic: the floor quotient, one
    up where it is negative and inexact (a float quotient loses digits beyond 2**24 or 2**53).
    """
    q = floor_divide(input, other)  # (raises for a zero divisor where the backend does)
    return q + ((q < 0) & (DECLARED["remainder"](input, other) != 0))


# The public functions: the declared ones, the hand-written wrappers in their place.
FUNCTIONS = {op.name: DECLARED[op.name] for op in decl.UNARY + decl.BINARY if op.public}
FUNCTIONS.update({f.__name__: f for f in (round, div)})
FUNCTIONS.update({alias: FUNCTIONS[op.name] for op in decl.UNARY + decl.BINARY
                  for alias in op.aliases})
_sub = FUNCTIONS["sub"]


def rsub(input, other, *, alpha=1) -> Tensor:
    """``other - alpha * input``.

    Args:
        input: the subtrahend (a tensor or a number).
        other: the minuend (a tensor or a number).
        alpha: a number multiplying ``input``.

    Returns:
        A new tensor of the broadcast shape.
    """
    return _sub(other, input, alpha=alpha)


# -------------------------------------------------------------- where, clamp
class Where(Function):
    @staticmethod
    def forward(ctx, cond, a, b):
        check_same_device("where", cond, *(v for v in (a, b) if isinstance(v, Tensor)))
        if cond.dtype is not D.bool_:
            raise TypeError(f"where expected condition to be a bool tensor, got {cond.dtype}")
        dtype = D.result_type(a, b)
        shapes = [cond.shape] + [v.shape for v in (a, b) if isinstance(v, Tensor)]
        shape = broadcast_shapes(*shapes)
        backend, device = cond._backend, cond.device
        args = []
        for v in (a, b):
            if isinstance(v, Tensor):
                v = v if v.dtype is dtype else v.to(dtype)
                args.append(expand_array(v, shape))
            else:
                args.append(scalar_for(v, dtype))
        if not isinstance(a, Tensor) and not isinstance(b, Tensor):
            args[0] = backend.full(shape, args[0], dtype, device.index)
        out = wrap(backend.where(expand_array(cond, shape), args[0], args[1]), device)
        ctx.save_for_backward(cond)
        ctx.shapes = tuple(v.shape if isinstance(v, Tensor) else None for v in (a, b))
        ctx.dtypes = tuple(v.dtype if isinstance(v, Tensor) else None for v in (a, b))
        return out

    @staticmethod
    def backward(ctx, g):
        (cond,) = ctx.saved_tensors
        grads = [None, None]
        for i, keep in ((0, True), (1, False)):
            if ctx.needs_input_grad[i + 1]:
                picked = where(cond, g, 0.0) if keep else where(cond, 0.0, g)
                gi = sum_to_shape(picked, ctx.shapes[i])
                grads[i] = gi if gi.dtype is ctx.dtypes[i] else gi.to(ctx.dtypes[i])
        return None, grads[0], grads[1]


def where(condition: Tensor, input=None, other=None):
    """``input`` where ``condition`` else ``other`` (broadcast); one argument: nonzero.

    Args:
        condition: a bool tensor.
        input: values where ``condition`` is True (tensor or number).
        other: values where it is False (tensor or number).

    Returns:
        A new tensor of the broadcast shape; with ``condition`` alone,
        ``nonzero(condition, as_tuple=True)``.
    """
    if input is None and other is None:
        return condition.nonzero(as_tuple=True)
    return Where.apply(condition, input, other)


def _clamp_bound(value, dtype: D.DType):
    """A clamp bound as a scalar of ``dtype``'s kind; an integer bound beyond an integer
    dtype's range saturates, so clamp compares in exact arithmetic on every backend (as
    torch 2.15; torch 2.13 wrapped a uint8 bound of -1 to 255, and refused it for int8)."""
    v = scalar_for(value, dtype)
    return v if dtype.is_floating_point else D.saturate(v, dtype)


class Clamp(Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        # torch promotes with the bounds (int tensor, 1.5 -> float; bool tensor, 0 -> int64)
        dtype = x.dtype if x.dtype.is_floating_point else \
            D.result_type(x, *(v for v in (lo, hi) if v is not None))
        data = x._data if dtype is x.dtype else x._backend.cast(x._data, dtype)
        lo_s = None if lo is None else _clamp_bound(lo, dtype)
        hi_s = None if hi is None else _clamp_bound(hi, dtype)
        ctx.save_for_backward(x)
        ctx.bounds = (lo_s, hi_s)
        return wrap(x._backend.clamp(data, lo_s, hi_s), x.device)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        lo, hi = ctx.bounds
        mask = None
        if lo is not None:
            mask = x >= lo
        if hi is not None:
            upper = x <= hi
            mask = upper if mask is None else mask & upper
        return where(mask, g, 0.0), None, None


def clamp(input: Tensor, min=None, max=None) -> Tensor:  # noqa: A002 - torch's names
    """Limit values to ``[min, max]`` (either may be None; tensor bounds broadcast).

    Args:
        input: the input tensor.
        min: the lower bound, a number, a tensor or None.
        max: the upper bound, a number, a tensor or None.

    Returns:
        A new tensor; its gradient flows where ``input`` was not clamped.
    """
    if min is None and max is None:
        raise RuntimeError("clamp: at least one of 'min' or 'max' must not be None")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        out = input
        if min is not None:
            out = out.maximum(min)
        if max is not None:
            out = out.minimum(max)
        return out
    return Clamp.apply(input, min, max)


clip = clamp


def clamp_min(input: Tensor, min) -> Tensor:  # noqa: A002
    """Elementwise ``max(input, min)``: ``clamp(input, min=min)``.

    Args:
        input: the tensor to clamp.
        min: the lower bound, a number or a tensor broadcastable with ``input``.

    Returns:
        A new tensor; its gradient flows where ``input`` was not clamped.
    """
    return clamp(input, min=min)


def clamp_max(input: Tensor, max) -> Tensor:  # noqa: A002
    """Elementwise ``min(input, max)``: ``clamp(input, max=max)``.

    Args:
        input: the tensor to clamp.
        max: the upper bound, a number or a tensor broadcastable with ``input``.

    Returns:
        A new tensor; its gradient flows where ``input`` was not clamped.
    """
    return clamp(input, max=max)


def lerp(input: Tensor, end: Tensor, weight) -> Tensor:
    """``input + weight * (end - input)``.

    Args:
        input: the input tensor.
        end: the tensor to interpolate towards.
        weight: a number or a tensor; 0 gives ``input``, 1 ``end``.

    Returns:
        A new tensor of the broadcast shape.
    """
    if input.dtype in (D.float16, D.bfloat16):  # one rounding, as torch's kernel
        w = weight.to(D.float32) if isinstance(weight, Tensor) else weight
        return lerp(input.to(D.float32), end.to(D.float32), w).to(input.dtype)
    return input + weight * (end - input)


def addcmul(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value=1) -> Tensor:
    """``input + value * tensor1 * tensor2``.

    Args:
        input: the input tensor.
        tensor1: the first factor.
        tensor2: the second factor.
        value: a number multiplying the product.

    Returns:
        A new tensor of the broadcast shape of the three tensors.
    """
    return input + (tensor1 * tensor2) * value if value != 1 else input + tensor1 * tensor2


def addcdiv(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value=1) -> Tensor:
    """``input + value * tensor1 / tensor2``.

    Args:
        input: the input tensor.
        tensor1: the numerator.
        tensor2: the denominator.
        value: a number multiplying the quotient.

    Returns:
        A new tensor of the broadcast shape of the three tensors.
    """
    return input + (tensor1 / tensor2) * value if value != 1 else input + tensor1 / tensor2


def square(input: Tensor) -> Tensor:
    """``input * input``.

    Args:
        input: the input tensor.

    Returns:
        A new tensor of ``input``'s shape.
    """
    return input * input


def reciprocal(input: Tensor) -> Tensor:
    """``1 / input`` (integers give floats).

    Args:
        input: the input tensor.

    Returns:
        A new floating tensor of ``input``'s shape.
    """
    return _div(1.0, input)
