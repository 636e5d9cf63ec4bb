"""Elementwise ops: unary math, binary arithmetic with broadcasting and type promotion,
where and clamp. One Function per differentiable op, with its forward and backward side by
side. Comparisons and logical ops are in ``comparison``, erfinv in ``special``.
"""

from __future__ import annotations

import math

from genesis import dtypes as D
from genesis.autograd.function import Function
from genesis.device import CPU
from genesis.ops.common import (
    broadcast_shapes,
    check_same_device,
    expand_array,
    float_dtype_for,
    sum_to_shape,
    wrap,
)
from genesis.tensor import Tensor

_kernels: dict = {}  # (backend, kind, op) -> kernel callable, filled on first use


def _unary_kernel(backend, op):
    key = (backend, "u", op)
    k = _kernels.get(key)
    if k is None:
        k = _kernels[key] = backend.unary_kernel(op)
    return k


def _binary_kernel(backend, op):
    key = (backend, "b", op)
    k = _kernels.get(key)
    if k is None:
        k = _kernels[key] = backend.binary_kernel(op)
    return k


# --------------------------------------------------------------------- unary
class _Unary(Function):
    """``y = f(x)`` for one backend unary kernel; subclasses give ``op`` and ``grad``."""

    op = ""
    float_op = True  # integer inputs are computed in the default float dtype
    saves = "xy"  # what grad() reads: only those count as saved for in-place checks

    @classmethod
    def forward(cls, ctx, x):
        dtype = float_dtype_for(x.dtype) if cls.float_op else x.dtype
        data = x._data if dtype is x.dtype else x._backend.cast(x._data, dtype)
        y = wrap(_unary_kernel(x._backend, cls.op)(data), x.device)
        saves = cls.saves
        ctx.save_for_backward(x if "x" in saves else None, y if "y" in saves else None)
        return y

    @classmethod
    def backward(cls, ctx, g):
        x, y = ctx.saved_tensors
        return cls.grad(g, x, y)

    @staticmethod
    def grad(g, x, y):
        return g * 0.0  # piecewise-constant ops: zero gradient, as torch


# What each op's gradient reads (the same as torch saves): editing anything else in place
# after the op must not break backward.
_SAVES = {"neg": "", "abs": "x", "sign": "", "exp": "y", "exp2": "y", "log": "x", "log2": "x",
          "log1p": "x", "expm1": "y", "sqrt": "y", "rsqrt": "y", "sin": "x", "cos": "x",
          "tanh": "y", "sigmoid": "y", "relu": "y", "erf": "x", "floor": "", "ceil": "",
          "round": ""}


def _unary(name: str, grad=None, float_op: bool = True, autocast: str | None = None):
    attrs = {"op": name, "float_op": float_op, "autocast": autocast,
             "saves": _SAVES.get(name, "xy")}
    if grad is not None:
        attrs["grad"] = staticmethod(grad)
    cls = type(name.capitalize(), (_Unary,), attrs)

    def fn(input: Tensor) -> Tensor:
        return cls.apply(input)

    fn.__name__ = name
    fn.__doc__ = f"Elementwise ``{name}`` of ``input`` (same semantics as ``torch.{name}``)."
    return fn


_LN2 = math.log(2.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)

neg = _unary("neg", lambda g, x, y: -g, float_op=False)
abs = _unary("abs", lambda g, x, y: g * x.sign(), float_op=False)  # noqa: A001
sign = _unary("sign", float_op=False)
exp = _unary("exp", lambda g, x, y: g * y, autocast="fp32")
exp2 = _unary("exp2", lambda g, x, y: g * y * _LN2)
log = _unary("log", lambda g, x, y: g / x, autocast="fp32")
log2 = _unary("log2", lambda g, x, y: g / (x * _LN2), autocast="fp32")
log1p = _unary("log1p", lambda g, x, y: g / (x + 1), autocast="fp32")
expm1 = _unary("expm1", lambda g, x, y: g * (y + 1), autocast="fp32")
sqrt = _unary("sqrt", lambda g, x, y: g / (y * 2))
rsqrt = _unary("rsqrt", lambda g, x, y: g * y * y * y * -0.5, autocast="fp32")
sin = _unary("sin", lambda g, x, y: g * x.cos())
cos = _unary("cos", lambda g, x, y: -g * x.sin())
tanh = _unary("tanh", lambda g, x, y: g * (1 - y * y))
sigmoid = _unary("sigmoid", lambda g, x, y: g * y * (1 - y))
# (y <= 0 gets 0, anything else the gradient: a NaN input passes it on, as in torch)
relu = _unary("relu", lambda g, x, y: where(y <= 0, 0.0, g), float_op=False)
erf = _unary("erf", lambda g, x, y: g * _TWO_OVER_SQRT_PI * (-(x * x)).exp())
floor = _unary("floor", float_op=False)
ceil = _unary("ceil", float_op=False)
_round = _unary("round", float_op=False)


def round(input: Tensor, decimals: int = 0) -> Tensor:  # noqa: A001 - torch's name
    """Round to the nearest integer (half to even), or to ``decimals`` places."""
    if decimals == 0:
        return _round(input)
    if input.dtype in (D.float16, D.bfloat16):  # float math, one rounding: torch's kernel
        return round(input.to(D.float32), decimals).to(input.dtype)
    scale = 10.0 ** decimals
    return _round(input * scale) / scale


# -------------------------------------------------------------------- binary
def _scalar_for(value, dtype: D.DType):
    """A Python scalar converted to the kind of ``dtype`` (kernels get matching scalars)."""
    if dtype.is_floating_point:
        return float(value)
    if dtype is D.bool_:
        return bool(value)
    return int(value)


def _operands(op: str, a, b, dtype: D.DType | None = None):
    """Promote and broadcast ``a``, ``b``: returns ``(backend, device, x, y, dtype)``.

    ``x`` is always an array; ``y`` is an array or a Python scalar.
    """
    a_t = type(a) is Tensor or isinstance(a, Tensor)
    b_t = type(b) is Tensor or isinstance(b, Tensor)
    if a_t and b_t:
        if a.device is not b.device:
            if dtype is None:
                dtype = D.result_type(a, b)  # before a 0-d tensor becomes a scalar
            return _operands(op, *_move_cpu_scalar(op, a, b), dtype)
        if dtype is None:
            dtype = a.dtype if a.dtype is b.dtype else D.result_type(a, b)
        backend = a._backend
        x = a._data if a.dtype is dtype else backend.cast(a._data, dtype)
        y = b._data if b.dtype is dtype else backend.cast(b._data, dtype)
        if a.shape != b.shape:
            shape = broadcast_shapes(a.shape, b.shape)
            if a.shape != shape:
                x = expand_array(wrap(x, a.device), shape)
            if b.shape != shape:
                y = expand_array(wrap(y, b.device), shape)
        return backend, a.device, x, y, dtype
    if a_t:
        if not isinstance(b, (int, float, bool)):
            raise TypeError(f"{op}(): unsupported operand type {type(b).__name__}")
        if dtype is None:
            dtype = D.result_type(a, b)
        backend = a._backend
        x = a._data if a.dtype is dtype else backend.cast(a._data, dtype)
        return backend, a.device, x, _scalar_for(b, dtype), dtype
    if not isinstance(a, (int, float, bool)):
        raise TypeError(f"{op}(): unsupported operand type {type(a).__name__}")
    # scalar on the left: make it a 0-d array and broadcast it
    if dtype is None:
        dtype = D.result_type(a, b)
    backend = b._backend
    x0 = wrap(backend.full((), _scalar_for(a, dtype), dtype, b.device.index), b.device)
    y = b._data if b.dtype is dtype else backend.cast(b._data, dtype)
    return backend, b.device, expand_array(x0, b.shape), y, dtype


def _move_cpu_scalar(op: str, a: Tensor, b: Tensor):
    """torch lets a 0-d CPU tensor meet a tensor on another device; so do we."""
    if a.device is CPU and a.ndim == 0:
        return a.item(), b
    if b.device is CPU and b.ndim == 0:
        return a, b.item()
    check_same_device(op, a, b)
    return a, b


class _Binary(Function):
    """``z = f(a, b)`` with broadcasting and promotion; subclasses give ``op`` and grads."""

    op = ""
    true_div = False
    # What grads() reads (as torch saves): the rest may be edited in place after the op.
    saves_inputs = True
    saves_output = False

    @classmethod
    def forward(cls, ctx, a, b):
        dtype = None
        if cls.true_div:
            dtype = D.result_type(a, b)
            if not dtype.is_floating_point:
                dtype = D.get_default_dtype()
        backend, device, x, y, dtype = _operands(cls.op, a, b, dtype)
        z = wrap(_binary_kernel(backend, cls.op)(x, y), device)
        a_t, b_t = isinstance(a, Tensor), isinstance(b, Tensor)
        keep_a, keep_b, keep_z = cls.keeps(a if a_t else None, b if b_t else None)
        ctx.save_for_backward(a if a_t and keep_a else None, b if b_t and keep_b else None,
                              z if keep_z else None)
        ctx.a_scalar = None if a_t else a
        ctx.b_scalar = None if b_t else b
        ctx.metas = ((a.shape, a.dtype) if a_t else None, (b.shape, b.dtype) if b_t else None)
        return z

    @classmethod
    def keeps(cls, a, b) -> tuple:
        """Whether to save ``(a, b, output)``: only what the wanted gradients read (as torch),
        so that editing anything else in place later does not break backward."""
        return cls.saves_inputs, cls.saves_inputs, cls.saves_output

    @classmethod
    def backward(cls, ctx, g):
        a, b, z = ctx.saved_tensors
        av = a if a is not None else ctx.a_scalar
        bv = b if b is not None else ctx.b_scalar
        ga, gb = cls.grads(g, av, bv, z, ctx.needs_input_grad)
        return _fit(ga, ctx.metas[0]), _fit(gb, ctx.metas[1])


def _fit(g, meta):
    """Reduce a gradient to an input's ``(shape, dtype)`` (``None``: a scalar input)."""
    if g is None or meta is None:
        return None
    g = sum_to_shape(g, meta[0])
    if g.dtype is not meta[1]:
        g = g.to(meta[1])
    return g


class Add(_Binary):
    op = "add"
    saves_inputs = False

    @staticmethod
    def grads(g, a, b, z, needs):
        return g, g


def check_sub_operands(a, b) -> None:
    """torch refuses any bool operand of sub (not only two bool tensors, as the kernel does)."""
    if a is True or a is False or b is True or b is False \
            or getattr(a, "dtype", None) is D.bool_ or getattr(b, "dtype", None) is D.bool_:
        raise RuntimeError(
            "Subtraction, the `-` operator, with a bool tensor is not supported. If you are "
            "trying to invert a mask, use the `~` or `logical_not()` operator instead.")


class Sub(_Binary):
    op = "sub"
    saves_inputs = False

    @classmethod
    def forward(cls, ctx, a, b):
        check_sub_operands(a, b)
        return super().forward(ctx, a, b)

    @staticmethod
    def grads(g, a, b, z, needs):
        return g, (-g if needs[1] else None)


def _wants_grad(t) -> bool:
    return t is not None and t.requires_grad


class Mul(_Binary):
    op = "mul"

    @classmethod
    def keeps(cls, a, b):
        return _wants_grad(b), _wants_grad(a), False  # d/da reads b, d/db reads a

    @staticmethod
    def grads(g, a, b, z, needs):
        return (g * b if needs[0] else None), (g * a if needs[1] else None)


class Div(_Binary):
    op = "div"
    true_div = True
    saves_output = True

    @classmethod
    def keeps(cls, a, b):
        return False, True, _wants_grad(b)  # d/da = 1/b; d/db = -z/b

    @staticmethod
    def grads(g, a, b, z, needs):
        ga = g / b if needs[0] else None
        gb = -g * z / b if needs[1] else None
        return ga, gb


class Pow(_Binary):
    op = "pow"
    saves_output = True

    @classmethod
    def keeps(cls, a, b):
        return True, True, _wants_grad(b)  # d/da reads a, b; d/db reads z, a, b
    autocast = "fp32"

    @staticmethod
    def grads(g, a, b, z, needs):
        ga = gb = None
        if needs[0]:
            if isinstance(b, Tensor):
                ga = g * b * a ** (b - 1)
            else:
                ga = g * 0.0 if b == 0 else g * b * a ** (b - 1)
        if needs[1]:
            if isinstance(a, Tensor):
                zero_base = (a == 0) & (b >= 0)
                gb = where(zero_base, 0.0, g * z * a.log())
            else:
                gb = g * z * (math.log(a) if a > 0 else float("nan") if a < 0 else 0.0)
        return ga, gb


class Maximum(_Binary):
    op = "maximum"

    @staticmethod
    def grads(g, a, b, z, needs):
        # torch: ties split the gradient evenly; the smaller input gets none; a NaN in either
        # (no order) passes the full gradient to both
        half = where(a == b, g * 0.5, g)
        return where(a < b, 0.0, half), where(a > b, 0.0, half)


class Minimum(_Binary):
    op = "minimum"

    @staticmethod
    def grads(g, a, b, z, needs):
        half = where(a == b, g * 0.5, g)  # as Maximum, mirrored
        return where(a > b, 0.0, half), where(a < b, 0.0, half)


class Atan2(_Binary):
    op = "atan2"
    true_div = True  # integer inputs compute in the default float dtype, as torch

    @staticmethod
    def grads(g, a, b, z, needs):
        denom = a * a + b * b
        return g * b / denom, -g * a / denom


class Remainder(_Binary):
    op = "remainder"

    @staticmethod
    def grads(g, a, b, z, needs):
        gb = -g * floor_divide(a, b) if needs[1] else None
        return g, gb


def add(input, other, *, alpha=1) -> Tensor:
    """``input + alpha * other`` with broadcasting and type promotion."""
    if alpha != 1:
        other = other * alpha
    return Add.apply(input, other)


def sub(input, other, *, alpha=1) -> Tensor:
    """``input - alpha * other`` with broadcasting and type promotion."""
    if alpha != 1:
        other = other * alpha
    return Sub.apply(input, other)


def rsub(input, other, *, alpha=1) -> Tensor:
    """``other - alpha * input``."""
    return sub(other, input, alpha=alpha)


def mul(input, other) -> Tensor:
    """Elementwise product with broadcasting and type promotion."""
    return Mul.apply(input, other)


def div(input, other, *, rounding_mode: str | None = None) -> Tensor:
    """True division (integers give floats), or ``'trunc'``/``'floor'`` rounding."""
    if rounding_mode is None:
        return Div.apply(input, other)
    if rounding_mode == "floor":
        return floor_divide(input, other)
    if rounding_mode == "trunc":
        q = Div.apply(input, other)
        q = where(q < 0, q.ceil(), q.floor())
        dtype = D.result_type(input, other)
        return q if dtype.is_floating_point else q.to(dtype)
    raise ValueError(f"div expected rounding_mode None, 'trunc' or 'floor', got {rounding_mode!r}")


true_divide = divide = div
multiply = mul
subtract = sub


def pow(input, exponent) -> Tensor:  # noqa: A001 - torch's name
    """``input ** exponent`` elementwise."""
    return Pow.apply(input, exponent)


def maximum(input: Tensor, other: Tensor) -> Tensor:
    """Elementwise maximum (NaN propagates)."""
    return Maximum.apply(input, other)


def minimum(input: Tensor, other: Tensor) -> Tensor:
    """Elementwise minimum (NaN propagates)."""
    return Minimum.apply(input, other)


def atan2(input: Tensor, other: Tensor) -> Tensor:
    """Elementwise ``atan(input / other)`` with the quadrant from both signs."""
    return Atan2.apply(input, other)


def remainder(input, other) -> Tensor:
    """Python-style modulus (sign of the divisor)."""
    return Remainder.apply(input, other)


def floor_divide(input, other) -> Tensor:
    """``floor(input / other)`` (not differentiable)."""
    backend, device, x, y, _ = _operands("floor_divide", input, other)
    return wrap(_binary_kernel(backend, "floor_divide")(x, y), device)


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
                args.append(_scalar_for(v, dtype))
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
    """``input`` where ``condition`` else ``other`` (broadcast); one argument: nonzero."""
    if input is None and other is None:
        from genesis.ops.indexing import nonzero

        return nonzero(condition, as_tuple=True)
    return Where.apply(condition, input, other)


class Clamp(Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        # torch promotes with the bounds (int tensor, 1.5 -> float; bool tensor, 0 -> int64)
        dtype = x.dtype if x.dtype.is_floating_point else \
            D.result_type(x, *(v for v in (lo, hi) if v is not None))
        data = x._data if dtype is x.dtype else x._backend.cast(x._data, dtype)
        lo_s = None if lo is None else _scalar_for(lo, dtype)
        hi_s = None if hi is None else _scalar_for(hi, dtype)
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
    """Limit values to ``[min, max]`` (either may be None; tensor bounds broadcast)."""
    if min is None and max is None:
        raise RuntimeError("clamp: at least one of 'min' or 'max' must not be None")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        out = input
        if min is not None:
            out = maximum(out, min)
        if max is not None:
            out = minimum(out, max)
        return out
    return Clamp.apply(input, min, max)


clip = clamp


def clamp_min(input: Tensor, min) -> Tensor:  # noqa: A002
    return clamp(input, min=min)


def clamp_max(input: Tensor, max) -> Tensor:  # noqa: A002
    return clamp(input, max=max)


def lerp(input: Tensor, end: Tensor, weight) -> Tensor:
    """``input + weight * (end - input)``."""
    if input.dtype in (D.float16, D.bfloat16):  # one rounding, as torch's kernel
        w = weight.to(D.float32) if isinstance(weight, Tensor) else weight
        return lerp(input.to(D.float32), end.to(D.float32), w).to(input.dtype)
    return input + weight * (end - input)


def addcmul(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value=1) -> Tensor:
    """``input + value * tensor1 * tensor2``."""
    return input + (tensor1 * tensor2) * value if value != 1 else input + tensor1 * tensor2


def addcdiv(input: Tensor, tensor1: Tensor, tensor2: Tensor, *, value=1) -> Tensor:
    """``input + value * tensor1 / tensor2``."""
    return input + (tensor1 / tensor2) * value if value != 1 else input + tensor1 / tensor2


def square(input: Tensor) -> Tensor:
    """``input * input``."""
    return input * input


def reciprocal(input: Tensor) -> Tensor:
    """``1 / input`` (integers give floats)."""
    return Div.apply(1.0, input)
