"""Elementwise ops: the declared unary and binary ops (``genesis.op_declarations``) made
into autograd Functions and public functions, plus where, clamp and the composites built on
them (lerp, addcmul ...). Shape rules — broadcasting, type promotion, device checks — are
stated here once for every elementwise op; erfinv is in ``special``.
"""

from __future__ import annotations

from genesis import dtypes as D
from genesis import op_declarations as decl
from genesis.autograd.function import _NO_GRAD_CTX, Function
from genesis.device import CPU
from genesis.ops.common import (
    argument_picker,
    broadcast_shapes,
    broadcast_size,
    check_same_device,
    expand_array,
    float_dtype_for,
    sum_to_shape,
    wrap,
)
from genesis.ops.elementwise_host_path import (
    binary_host_path,
    kernel,
    save_binary,
    unary_host_path,
)
from genesis.tensor import Tensor


def _scalar_for(value, dtype: D.DType):
    """A Python scalar converted to the kind of ``dtype`` (kernels get matching scalars)."""
    if dtype.is_floating_point:
        return float(value)
    if dtype is D.bool_:
        return bool(value)
    return int(value)


def _operands(op: str, a, b, dtype: D.DType | None = None):
    """Promote and broadcast ``a``, ``b``: returns ``(backend, device, x, y, dtype, shape)``.

    ``x`` is always an array; ``y`` is an array or a Python scalar; ``shape`` is the
    result's ``Size``.
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
        shape = a.shape
        if shape != b.shape:
            shape = broadcast_size(a.shape, b.shape)
            if a.shape != shape:
                x = expand_array(wrap(x, a.device), shape)
            if b.shape != shape:
                y = expand_array(wrap(y, b.device), shape)
        return backend, a.device, x, y, dtype, shape
    if a_t:
        if not isinstance(b, (int, float, bool)):
            raise TypeError(f"{op}(): unsupported operand type {type(b).__name__}")
        if dtype is None:  # a Python number never raises a floating tensor's dtype
            dtype = a.dtype if a.dtype.is_floating_point else D.result_type(a, b)
        backend = a._backend
        x = a._data if a.dtype is dtype else backend.cast(a._data, dtype)
        return backend, a.device, x, _scalar_for(b, dtype), dtype, a.shape
    if not isinstance(a, (int, float, bool)):
        raise TypeError(f"{op}(): unsupported operand type {type(a).__name__}")
    # scalar on the left: make it a 0-d array and broadcast it
    if dtype is None:
        dtype = D.result_type(a, b)
    backend = b._backend
    x0 = wrap(backend.full((), _scalar_for(a, dtype), dtype, b.device.index), b.device)
    y = b._data if b.dtype is dtype else backend.cast(b._data, dtype)
    return backend, b.device, expand_array(x0, b.shape), y, dtype, b.shape


def _move_cpu_scalar(op: str, a: Tensor, b: Tensor):
    """torch lets a 0-d CPU tensor meet a tensor on another device; so do we."""
    if a.device is CPU and a.ndim == 0:
        return a.item(), b
    if b.device is CPU and b.ndim == 0:
        return a, b.item()
    check_same_device(op, a, b)
    return a, b


def result_dtype(op: decl.Op, a, b) -> D.DType | None:
    """The dtype a binary op computes in (None: plain promotion, left to ``_operands``)."""
    if op.ints != "float":
        return None
    dtype = D.result_type(a, b)
    return dtype if dtype.is_floating_point else D.get_default_dtype()


def _formula(op: decl.Op, i: int, names: tuple):
    """``(formula, pick)`` for input ``i``'s gradient of ``op``, where ``pick(values)``
    selects the formula's arguments (``g`` first, then what it reads) from ``values``, laid
    out as ``names``; None when that input has no gradient."""
    f = op.grads[i] if i < len(op.grads) else None
    if f is None:
        return None
    return f, argument_picker(names, ("g",) + op.reads(i))


# --------------------------------------------------------------------- unary
class _Unary(Function):
    """``y = f(x)`` for one declared unary op (``decl``); made by ``_unary_function``."""

    decl: decl.Op
    save_x = save_y = False
    grad: tuple  # (formula, picker of its arguments from (g, x, y)): see _formula

    @classmethod
    def forward(cls, ctx, x):
        op = cls.decl
        dtype = float_dtype_for(x.dtype) if op.ints == "float" else x.dtype
        data = x._data if dtype is x.dtype else x._backend.cast(x._data, dtype)
        y = wrap(kernel(x._backend, 1, op.name)(data), x.device, None, x.shape, dtype)
        if ctx is not _NO_GRAD_CTX:  # (recording)
            ctx.save_for_backward(x if cls.save_x else None, y if cls.save_y else None)
        return y

    @classmethod
    def backward(cls, ctx, g):
        x, y = ctx.saved_tensors
        f, pick = cls.grad
        return f(*pick((g, x, y)))


_RESULT_DTYPE = {  # by ``Op.ints``: what the docstrings say of the result's dtype
    "float": "the (promoted) input dtype; integer and bool inputs give the default float dtype",
    "keep": "the (promoted) input dtype",
    "bool": "bool",
}
_AUTOCAST = {"fp32": " Under ``genesis.autocast`` it computes in float32.", None: ""}


def _function_doc(op: decl.Op, summary: str, args: str) -> str:
    """The docstring of a declared op's public function, from its row of op_declarations."""
    shape = "``input``'s shape" if op.arity == 1 else "the broadcast shape"
    grad = "differentiable" if op.differentiable else "not differentiable"
    args = "\n".join(f"    {line}" for line in args.splitlines())
    return (f"{summary}\n\nThe op is {grad}.{_AUTOCAST[op.autocast]}\n\nArgs:\n{args}\n\n"
            f"Returns:\n    A new tensor of {shape}; its dtype is {_RESULT_DTYPE[op.ints]}.\n")


def _unary_function(op: decl.Op):
    """The public function of a declared unary op (an autograd Function if differentiable)."""
    if op.differentiable:
        reads = op.reads(0)
        cls = type(op.name.capitalize(), (_Unary,), {
            "decl": op, "autocast": op.autocast, "save_x": "x" in reads, "save_y": "y" in reads,
            "grad": _formula(op, 0, ("g", "x", "y")),
            "__doc__": f"Autograd Function of ``{op.name}`` (declared in op_declarations)."})

        fn = unary_host_path(op, cls.apply, cls)
        fn.function, fn.apply = cls, fn
    else:
        def apply(input: Tensor) -> Tensor:
            if op.check is not None:
                op.check(input)
            return wrap(kernel(input._backend, 1, op.name)(input._data), input.device, None,
                        input.shape, D.bool_ if op.ints == "bool" else input.dtype)

        fn = unary_host_path(op, apply, None)
        fn.function, fn.apply = None, fn

    fn.__name__ = fn.__qualname__ = op.name
    fn.__doc__ = _function_doc(op, f"Elementwise ``{op.name}`` of ``input`` (as "
                                   f"``torch.{op.name}``).", "input: a tensor.")
    return fn


# -------------------------------------------------------------------- binary
class _Binary(Function):
    """``z = f(a, b)`` with broadcasting and promotion for one declared binary op."""

    decl: decl.Op
    reads: tuple = ((), ())  # per input: the names its gradient formula reads
    # whether a, b, z are saved, by (a wants grad) * 2 + (b wants grad): see _saves
    saves: tuple = ((False, False, False),) * 4
    grads: tuple = (None, None)  # per input: (formula, picker from (g, a, b, z)) or None

    @classmethod
    def forward(cls, ctx, a, b):
        op = cls.decl
        if op.check is not None:
            op.check(a, b)
        backend, device, x, y, dtype, shape = _operands(op.name, a, b, result_dtype(op, a, b))
        z = wrap(kernel(backend, 2, op.name)(x, y), device, None, shape, dtype)
        if ctx is not _NO_GRAD_CTX:  # (recording)
            save_binary(cls, ctx, a, b, z)
        return z

    @classmethod
    def backward(cls, ctx, g):
        a, b, z = ctx.saved_tensors
        vals = (g, a if a is not None else ctx.a_scalar, b if b is not None else ctx.b_scalar,
                z)
        needs, metas = ctx.needs_input_grad, ctx.metas
        ga = gb = None
        grad_a, grad_b = cls.grads
        if grad_a is not None and needs[0] and metas[0] is not None:
            ga = _fit(grad_a[0](*grad_a[1](vals)), metas[0])
        if grad_b is not None and needs[1] and metas[1] is not None:
            gb = _fit(grad_b[0](*grad_b[1](vals)), metas[1])
        return ga, gb


def _saves(op: decl.Op) -> tuple:
    """Per (a wants grad, b wants grad), as 2 * a + b: whether a, b and z are saved — what
    the wanted gradients read."""
    plans = []
    for a_wanted in (False, True):
        for b_wanted in (False, True):
            read = set(op.reads(0) if a_wanted else ()) | set(op.reads(1) if b_wanted else ())
            plans.append(("a" in read, "b" in read, "z" in read))
    return tuple(plans)


def _fit(g, meta):
    """Reduce a gradient to an input's ``(shape, dtype)``."""
    if g.shape != meta[0]:
        g = sum_to_shape(g, meta[0])
    if g.dtype is not meta[1]:
        g = g.to(meta[1])
    return g


def _binary_function(op: decl.Op):
    """The public function of a declared binary op (an autograd Function if differentiable)."""
    if op.differentiable:
        cls = type(op.name.capitalize(), (_Binary,), {
            "decl": op, "autocast": op.autocast, "reads": (op.reads(0), op.reads(1)),
            "saves": _saves(op),
            "grads": tuple(_formula(op, i, ("g", "a", "b", "z")) for i in (0, 1)),
            "__doc__": f"Autograd Function of ``{op.name}`` (declared in op_declarations)."})
        apply = cls.apply
    else:
        cls = None

        def apply(a, b):
            if op.check is not None:
                op.check(a, b)
            backend, device, x, y, dtype, shape = _operands(op.name, a, b,
                                                            result_dtype(op, a, b))
            out_dtype = D.bool_ if op.ints == "bool" else dtype
            return wrap(kernel(backend, 2, op.name)(x, y), device, None, shape, out_dtype)

    apply = binary_host_path(op, apply, cls)
    if op.alpha:
        def fn(input, other, *, alpha=1) -> Tensor:
            return apply(input, other if alpha == 1 else other * alpha)
    else:
        fn = apply

    fn.__name__ = fn.__qualname__ = op.name
    args = "input: a tensor.\nother: a tensor or a Python number, broadcastable with ``input``."
    if op.alpha:
        args += "\nalpha: a number multiplying ``other`` first."
    fn.__doc__ = _function_doc(op, f"Elementwise ``{op.name}`` with broadcasting and type "
                                   f"promotion (as ``torch.{op.name}``).", args)
    fn.function, fn.apply = cls, apply
    return fn


# ---------------------------------------------------- the declared ops, made
# name -> function, for every declared op (public=False ones included: the hand-written
# public functions below wrap them).
DECLARED = {op.name: _unary_function(op) for op in decl.UNARY}
DECLARED.update({op.name: _binary_function(op) for op in decl.BINARY})
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
    v = _scalar_for(value, dtype)
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
