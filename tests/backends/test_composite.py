"""The contract's composite defaults against the CPU backend's torch kernels, on the inputs
where a composite is easiest to get wrong: integer extremes, NaN, bool and uint8, empty and
0-d arrays, non-contiguous views, repeated indices.

``Backend.<method>(cpu, ...)`` runs the default (written with the required core) on CPU
arrays; ``cpu.<method>(...)`` runs torch's kernel. The op table covers the common cases on
the toy device; these are the corners.
"""

from __future__ import annotations

import math

import pytest
import torch

from genesis import dtypes as D
from genesis.backends.base import Backend
from genesis.backends.cpu import CPUBackend, to_torch_dtype

cpu = CPUBackend()
INTS = (D.uint8, D.int8, D.int16, D.int32, D.int64)


def extremes(dtype) -> torch.Tensor:
    """A (3, 4) array holding the dtype's min and max, repeats and (floats) NaN and inf."""
    t = to_torch_dtype(dtype)
    if dtype is D.bool_:
        return torch.tensor([[True, False, True, True], [False, False, False, False],
                             [True, True, True, True]])
    if dtype.is_floating_point:
        info = torch.finfo(t)
        rows = [[1.0, -2.0, info.max, -info.max], [0.0, -0.0, math.inf, -math.inf],
                [3.0, math.nan, 3.0, -1.0]]
    else:
        info = torch.iinfo(t)
        rows = [[info.min, info.max, 0, 1], [info.max, info.max, info.min, info.min],
                [2, 2, 2, 1]]
    return torch.tensor(rows, dtype=t)


def same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape, (a, b)
    torch.testing.assert_close(a, b, equal_nan=True, rtol=0, atol=0)


DTYPES = (D.bool_,) + INTS + (D.float32, D.float64, D.float16, D.bfloat16)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dims", [(0,), (1,), (0, 1), ()])
def test_amin_all_any_match_torch_at_the_dtype_extremes(dtype, dims):
    for a in (extremes(dtype), extremes(dtype).t()):
        dims_t = tuple(dims)
        if dims_t:
            same(Backend.amin(cpu, a, dims_t, False), cpu.amin(a, dims_t, False))
        for name in ("all", "any"):
            got = getattr(Backend, name)(cpu, a, dims_t, True)
            want = getattr(cpu, name)(a, dims_t, True)
            same(got, want.to(torch.bool))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", [0, 1])
def test_argmax_argmin_pick_the_first_extreme_and_nan(dtype, dim):
    if dtype is D.bool_:
        pytest.skip("torch has no bool argmax/argmin to compare with")
    a = extremes(dtype)
    for keepdim in (False, True):
        same(Backend.argmax(cpu, a, dim, keepdim), cpu.argmax(a, dim, keepdim))
        same(Backend.argmin(cpu, a, dim, keepdim), cpu.argmin(a, dim, keepdim))


@pytest.mark.parametrize("dtype", INTS + (D.bool_,), ids=str)
def test_prod_and_cumsum_wrap_like_torch(dtype):
    a = extremes(dtype)
    out = D.int64 if dtype is D.bool_ else dtype
    for dims in [(0,), (1,), (0, 1), ()]:
        same(Backend.prod(cpu, a, dims, False, out), cpu.prod(a, dims, False, out))
    for dim in (0, 1):
        same(Backend.cumsum(cpu, a, dim, out), cpu.cumsum(a, dim, out))


def test_prod_of_empty_and_odd_lengths():
    a = torch.arange(1, 8, dtype=torch.float64).reshape(7, 1).expand(7, 5)  # 7 rows: odd
    same(Backend.prod(cpu, a, (0,), True, D.float64), cpu.prod(a, (0,), True, D.float64))
    empty = torch.empty((0, 3))
    same(Backend.prod(cpu, empty, (0,), False, D.float32), torch.ones(3))
    same(Backend.prod(cpu, empty, (1,), False, D.float32), torch.ones(0))


def test_indexing_composites_with_repeats_and_views():
    a = torch.arange(24, dtype=torch.float32).reshape(4, 6)[:, ::2]  # (4, 3), strided
    idx = torch.tensor([2, 0, 2, 3])
    same(Backend.index_select(cpu, a, 0, idx), cpu.index_select(a, 0, idx))
    src = torch.ones((4, 3))
    same(Backend.index_add(cpu, a, 0, idx, src), cpu.index_add(a, 0, idx, src))
    into, expect = a.clone(), cpu.index_add(a, 0, idx, src)
    assert Backend.index_add_(cpu, into, 0, idx, src) is into  # the contract's default
    same(into, expect)
    into = a.clone()
    assert cpu.index_add_(into, 0, idx, src) is into
    same(into, expect)
    gidx = torch.tensor([[0, 2], [1, 1], [2, 0], [0, 0]])
    same(Backend.gather(cpu, a, 1, gidx), cpu.gather(a, 1, gidx))
    same(Backend.scatter(cpu, a, 1, gidx, 5.0, "add"), cpu.scatter(a, 1, gidx, 5.0, "add"))
    sidx = torch.tensor([[0, 2], [1, 0], [2, 1], [1, 2]])
    same(Backend.scatter(cpu, a, 1, sidx, src, None), cpu.scatter(a, 1, sidx, src, None))
    same(Backend.nonzero(cpu, a - 4), cpu.nonzero(a - 4))
    same(Backend.nonzero(cpu, torch.tensor(0.0)), cpu.nonzero(torch.tensor(0.0)))


def test_layout_and_creation_composites():
    a = torch.arange(12, dtype=torch.int16).reshape(3, 4).t()  # (4, 3), transposed
    same(Backend.flip(cpu, a, (0, 1)), cpu.flip(a, (0, 1)))
    for k in (-1, 0, 2):
        same(Backend.tril(cpu, a, k), cpu.tril(a, k))
        same(Backend.triu(cpu, a, k), cpu.triu(a, k))
    parts = [a, torch.empty((0, 3), dtype=torch.int16), a[:1]]
    same(Backend.cat(cpu, parts, 0), cpu.cat(parts, 0))
    same(Backend.clamp(cpu, a, 2, 9), cpu.clamp(a, 2, 9))
    same(Backend.full(cpu, (2, 3), -7, D.int64, None), cpu.full((2, 3), -7, D.int64, None))
    same(Backend.full(cpu, (2,), 0.1, D.bfloat16, None), cpu.full((2,), 0.1, D.bfloat16, None))
    for args in [(0, 10, 3, D.int64), (1.0, 2.0, 0.1, D.float32), (5, -1, -2, D.int8),
                 (0.5, 4.0, 1.5, D.float16), (0, 0, 1, D.float64)]:
        same(Backend.arange(cpu, *args, None), cpu.arange(*args, None))
    half = torch.tensor(2.5, dtype=torch.bfloat16)
    assert Backend.item(cpu, half) == 2.5 and Backend.item(cpu, torch.tensor(True)) is True
    same(Backend.contiguous(cpu, a), a.contiguous())
    assert Backend.cast(cpu, a, D.int16) is a


def test_topk_composite_matches_torch_without_ties():
    a = torch.randperm(30, generator=torch.Generator().manual_seed(1)).float().reshape(5, 6)
    for largest in (True, False):
        v, i = Backend.topk(cpu, a, 3, 1, largest, True)
        tv, ti = cpu.topk(a, 3, 1, largest, True)
        same(v, tv)
        same(i, ti)


def test_random_composites_are_seeded_and_distributed():
    gen = torch.Generator().manual_seed(0)
    x = Backend.normal_(cpu, torch.empty(40000, dtype=torch.float64), 3.0, 2.0, gen)
    assert abs(x.mean().item() - 3.0) < 0.05 and abs(x.std().item() - 2.0) < 0.05
    # the share within one standard deviation of a normal: 68.27%
    assert abs(((x - 3.0).abs() < 2.0).double().mean().item() - 0.6827) < 0.01
    y = Backend.normal_(cpu, torch.empty(4, 5, dtype=torch.bfloat16).t(), 0.0, 1.0, gen)
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()
    p1 = Backend.randperm(cpu, 50, D.int32, None, torch.Generator().manual_seed(3))
    p2 = Backend.randperm(cpu, 50, D.int32, None, torch.Generator().manual_seed(3))
    same(p1, p2)
    assert p1.dtype == torch.int32 and sorted(p1.tolist()) == list(range(50))
    assert Backend.randperm(cpu, 0, D.int64, None, gen).shape == (0,)


@pytest.mark.parametrize("dtype", (D.int64, D.float32, D.bfloat16), ids=str)
def test_inplace_kernels_write_what_the_out_kernels_do(dtype):
    # the CPU backend's own in-place kernels (torch's x.add_(y) ...) against the default,
    # which calls binary_kernel with out=a; on a strided view, with an array and a scalar b
    from genesis.op_declarations import BINARY

    for op in (op for op in BINARY if op.inplace):
        if op.ints == "float" and not dtype.is_floating_point:
            continue
        for b in (extremes(dtype).t()[1:].abs().clamp(1, 7), 3):
            a_default = extremes(dtype).t()[1:].abs().clamp(1, 7)
            a_cpu = a_default.clone().t().contiguous().t()  # the same values, other strides
            Backend.inplace_kernel(cpu, op.name)(a_default, b)
            cpu.inplace_kernel(op.name)(a_cpu, b)
            same(a_cpu, a_default)
            same(a_default, cpu.binary_kernel(op.name)(extremes(dtype).t()[1:].abs().clamp(1, 7),
                                                       b))
