"""Comparisons of whole tensors: equal, isclose and allclose. The elementwise comparisons,
logical and bitwise ops are declared in ``genesis.op_declarations`` and made in
``elementwise``."""

from __future__ import annotations

from genesis import dtypes as D
from genesis.autograd.grad_mode import no_grad
from genesis.ops.elementwise import FUNCTIONS
from genesis.tensor import Tensor

eq, le, isnan, isfinite = (FUNCTIONS[n] for n in ("eq", "le", "isnan", "isfinite"))
logical_and, logical_or = FUNCTIONS["logical_and"], FUNCTIONS["logical_or"]
mul, sub = FUNCTIONS["mul"], FUNCTIONS["sub"]


def equal(input: Tensor, other: Tensor) -> bool:
    """True when both tensors have the same shape and all elements are equal.

    Args:
        input: the input tensor.
        other: the second tensor.

    Returns:
        A Python bool.
    """
    return input.shape == other.shape and bool(eq(input, other).all())


def isclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Tensor:
    """Elementwise ``|input - other| <= atol + rtol * |other|`` (or equal), as a bool tensor.

    Infinities are close only to themselves; NaNs are close to each other only with
    ``equal_nan``. Both tensors must have the same dtype; they broadcast.

    Args:
        input: a tensor (floating, integer or bool).
        other: a tensor of ``input``'s dtype.
        rtol: the relative tolerance, >= 0.
        atol: the absolute tolerance, >= 0.
        equal_nan: whether two NaNs count as close.

    Returns:
        A bool tensor of the broadcast shape.

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

    Args:
        input: the input tensor.
        other: the second tensor.
        rtol: the relative tolerance, >= 0.
        atol: the absolute tolerance, >= 0.
        equal_nan: whether two NaNs count as close.

    Returns:
        A Python bool.

    Example:
        >>> genesis.allclose(genesis.tensor([1.0, 2.0]), genesis.tensor([1.0, 2.0 + 1e-6]))
        True
    """
    return bool(isclose(input, other, rtol, atol, equal_nan).all())
