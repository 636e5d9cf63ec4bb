"""``layout.plan``, the strided walk of the layout, indexing and random kernels, without a GPU:
the launches it plans visit every element of the shape in C order, at the address each
operand's strides give it, also when a geometry met before is planned from its cache with
other base pointers."""

from __future__ import annotations

import itertools
import random

import pytest

pytest.importorskip("triton")

from genesis_cuda.kernels import layout  # noqa: E402


def _reference(shape, operands):
    """Each element's address per operand, in C order."""
    return [tuple(ptr + sum(i * s for i, s in zip(idx, strides)) * itemsize
                  for ptr, itemsize, strides in operands)
            for idx in itertools.product(*(range(n) for n in shape))]


def _walked(shape, operands, keep_last=0):
    """The addresses the planned launches visit, in launch order then C order of shape6."""
    out = []
    for n, shape6, ops, _big in layout.plan(shape, operands, keep_last):
        visited = list(itertools.product(*(range(k) for k in shape6)))
        assert len(visited) == n
        out += [tuple(ptr + sum(i * s for i, s in zip(idx, strides6)) * itemsize
                      for (ptr, strides6), (_, itemsize, _) in zip(ops, operands))
                for idx in visited]
    return out


def _case(rng, ndim):
    shape = tuple(rng.choice([1, 2, 3]) for _ in range(ndim))
    operands = [(rng.randrange(1 << 20) * 16, rng.choice([1, 2, 4, 8]),
                 tuple(rng.choice([0, 1, 2, 3, 6, -1]) for _ in range(ndim)))
                for _ in range(rng.randint(1, 3))]
    return shape, operands


@pytest.mark.parametrize("ndim", [0, 1, 3, 6, 8])  # 8: more dims than a launch addresses
def test_planned_launches_visit_every_element_at_its_address(ndim):
    rng = random.Random(ndim)
    for _ in range(40):
        shape, operands = _case(rng, ndim)
        expected = _reference(shape, operands)
        assert _walked(shape, operands) == expected  # planned
        assert _walked(shape, operands) == expected  # from the cache


def test_a_cached_plan_takes_the_new_base_pointers():
    shape, strides = (2, 3, 2, 3, 2, 3, 2, 3), (432, 144, 72, 24, 12, 4, 2, 1)[::-1]
    first = [(1 << 20, 4, strides), (2 << 20, 2, strides)]
    moved = [(5 << 20, 4, strides), (9 << 20, 2, strides)]
    _walked(shape, first)
    assert _walked(shape, moved) == _reference(shape, moved)


def test_kept_trailing_dims_are_not_merged():
    """tril/triu keep their last two dims (the kernel needs their coordinates)."""
    shape, operands = (2, 3, 4), [(1 << 20, 4, (12, 4, 1)), (2 << 20, 4, (12, 4, 1))]
    (n, shape6, _, _), = layout.plan(shape, operands, keep_last=2)
    assert shape6[-2:] == [3, 4] and n == 24
    assert _walked(shape, operands, keep_last=2) == _reference(shape, operands)
