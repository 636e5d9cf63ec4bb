"""Shapes: ``genesis.Size`` (a tuple of ints) and the shape helpers every layer shares."""

from __future__ import annotations

import math


class Size(tuple):
    """A tensor shape: a tuple of ints that prints as ``genesis.Size([2, 3])``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"genesis.Size({list(self)})"

    def numel(self) -> int:
        return math.prod(self)


_SIZES: dict = {}  # shape tuple -> its interned Size (a training run meets few shapes)


def interned_size(shape) -> Size:
    """``Size(shape)`` for a tuple of ints, made once per distinct shape."""
    s = _SIZES.get(shape)
    if s is None:
        if len(_SIZES) > 4096:  # many distinct shapes (dynamic lengths): start over
            _SIZES.clear()
        s = _SIZES[shape] = Size(shape)
    return s


def _wrap_dim(dim: int, ndim: int) -> int:
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim + n if dim < 0 else dim


def is_contiguous_geometry(shape, strides) -> bool:
    """Whether ``shape``/``strides`` describe C order with no gaps (size-1 dims ignored)."""
    if 0 in shape:
        return True  # no elements: contiguous whatever the strides, as torch
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size == 1:
            continue
        if size == 0:
            return True
        if stride != expected:
            return False
        expected *= size
    return True
