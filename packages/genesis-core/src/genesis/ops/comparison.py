"""Comparisons, logical and bitwise ops, the isnan/isinf/isfinite tests and isclose/allclose:
elementwise ops with broadcasting and promotion (shared with ``elementwise``) and no gradient."""

from __future__ import annotations

from genesis import dtypes as D
from genesis.autograd.grad_mode import no_grad
from genesis.ops.common import wrap
from genesis.ops.elementwise import _binary_kernel, _operands, _unary_kernel, mul, sub
from genesis.tensor import Tensor


def _predicate(op: str):
    def fn(input: Tensor) -> Tensor:
        return wrap(_unary_kernel(input._backend, op)(input._data), input.device)

    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = f"Elementwise ``{op}`` test, as a bool tensor."
    return fn


isnan = _predicate("isnan")
isinf = _predicate("isinf")
isfinite = _predicate("isfinite")


def logical_not(input: Tensor) -> Tensor:
    """Elementwise logical NOT (bool result)."""
    return wrap(_unary_kernel(input._backend, "logical_not")(input._data), input.device)


def bitwise_not(input: Tensor) -> Tensor:
    """Elementwise bitwise NOT of an integer or bool tensor."""
    if input.dtype.is_floating_point:
        raise TypeError(f"bitwise_not is not defined for {input.dtype}")
    return wrap(_unary_kernel(input._backend, "bitwise_not")(input._data), input.device)


def _nondiff_binary(op: str, doc: str, bool_only: bool = False, integral: bool = False):
    def fn(input, other) -> Tensor:
        if integral:
            for v in (input, other):
                if isinstance(v, Tensor) and v.dtype.is_floating_point or isinstance(v, float):
                    raise TypeError(f"{op} is only defined for integer and bool tensors")
        backend, device, x, y, _ = _operands(op, input, other)
        return wrap(_binary_kernel(backend, op)(x, y), device)

    fn.__name__ = fn.__qualname__ = op
    fn.__doc__ = doc
    return fn


eq = _nondiff_binary("eq", "Elementwise ``==`` (bool result).")
ne = _nondiff_binary("ne", "Elementwise ``!=`` (bool result).")
lt = _nondiff_binary("lt", "Elementwise ``<`` (bool result).")
le = _nondiff_binary("le", "Elementwise ``<=`` (bool result).")
gt = _nondiff_binary("gt", "Elementwise ``>`` (bool result).")
ge = _nondiff_binary("ge", "Elementwise ``>=`` (bool result).")
greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne
logical_and = _nondiff_binary("logical_and", "Elementwise logical AND (bool result).")
logical_or = _nondiff_binary("logical_or", "Elementwise logical OR (bool result).")
logical_xor = _nondiff_binary("logical_xor", "Elementwise logical XOR (bool result).")
bitwise_and = _nondiff_binary("bitwise_and", "Elementwise AND of ints/bools.", integral=True)
bitwise_or = _nondiff_binary("bitwise_or", "Elementwise OR of ints/bools.", integral=True)
bitwise_xor = _nondiff_binary("bitwise_xor", "Elementwise XOR of ints/bools.", integral=True)


def equal(input: Tensor, other: Tensor) -> bool:
    """True when both tensors have the same shape and all elements are equal."""
    return input.shape == other.shape and bool(eq(input, other).all())


def isclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Tensor:
    """Elementwise ``|input - other| <= atol + rtol * |other|`` (or equal), as a bool tensor.

    Infinities are close only to themselves; NaNs are close to each other only with
    ``equal_nan``. Both tensors must have the same dtype; they broadcast.

    Args:
        input, other: tensors of one dtype (floating, integer or bool).
        rtol, atol: relative and absolute tolerances, both >= 0.
        equal_nan: whether two NaNs count as close.

    Example:
        >>> genesis.isclose(genesis.tensor([1.0, 2.0]), genesis.tensor([1.0 + 1e-7, 2.1]))
        tensor([ True, False])
    """
    if input.dtype is not other.dtype:
        raise RuntimeError(f"isclose(): {input.dtype} did not match {other.dtype}")
    if rtol < 0:
        raise RuntimeError(f"rtol must be greater than or equal to zero, but got {rtol}")
    if atol < 0:
        raise RuntimeError(f"atol must be greater than or equal to zero, but got {atol}")
    with no_grad():
        close = eq(input, other)
        if equal_nan and input.dtype.is_floating_point:
            close = logical_or(close, logical_and(isnan(input), isnan(other)))
        if rtol == 0 and atol == 0:
            return close
        if not input.dtype.is_floating_point:  # as torch: no wrap-around, no overflow
            input, other = input.to(D.get_default_dtype()), other.to(D.get_default_dtype())
        allowed = mul(other, rtol).abs() + atol
        actual = sub(input, other).abs()
        return logical_or(close, logical_and(isfinite(actual), le(actual, allowed)))


def allclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:
    """Whether every element pair is close (see ``isclose``); a Python bool.

    Example:
        >>> genesis.allclose(genesis.tensor([1.0, 2.0]), genesis.tensor([1.0, 2.0 + 1e-6]))
        True
    """
    return bool(isclose(input, other, rtol, atol, equal_nan).all())
