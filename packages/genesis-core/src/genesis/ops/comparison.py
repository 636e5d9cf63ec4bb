"""Comparisons of whole tensors. The elementwise comparisons, logical and bitwise ops are
declared in ``genesis.op_declarations`` and made in ``elementwise``."""

from __future__ import annotations

from genesis.ops.elementwise import FUNCTIONS
from genesis.tensor import Tensor

_eq = FUNCTIONS["eq"]


def equal(input: Tensor, other: Tensor) -> bool:
    """True when both tensors have the same shape and all elements are equal."""
    return input.shape == other.shape and bool(_eq(input, other).all())
