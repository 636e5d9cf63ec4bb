"""Triton random kernels (Philox4x32-10): ranges, moments, reproducibility from the seed,
independent successive calls, strided targets, randperm. Statistical checks use bounds
far outside sampling noise for the sizes drawn (several standard errors)."""

import pytest
import torch
from kernel_arrays import GENESIS, to_dev, to_torch

from genesis import dtypes as D

pytestmark = pytest.mark.cuda


def _gen(seed=1234):
    from genesis_cuda.generator import PhiloxGenerator

    return PhiloxGenerator(0, seed)


def _empty(shape, dtype):
    from genesis_cuda.array import empty

    return empty(shape, GENESIS[dtype], 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_uniform_range_and_moments(dtype):
    from genesis_cuda.kernels import random

    a = _empty((200_000,), dtype)
    random.uniform_(a, -2.0, 3.0, _gen())
    x = to_torch(a).double()
    assert x.min() >= -2.0 and x.max() < 3.0
    assert abs(x.mean() - 0.5) < 0.02 and abs(x.var() - 25 / 12) < 0.05


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_normal_moments(dtype):
    from genesis_cuda.kernels import random

    a = _empty((200_000,), dtype)
    random.normal_(a, 1.5, 2.0, _gen())
    x = to_torch(a).double()
    assert torch.isfinite(x).all()
    assert abs(x.mean() - 1.5) < 0.03 and abs(x.std() - 2.0) < 0.03
    z = (x - 1.5) / 2.0
    assert abs((z.abs() < 1).double().mean() - 0.6827) < 0.01  # shape, not only moments


@pytest.mark.parametrize("dtype,low,high", [(torch.int64, -3, 5), (torch.int32, 0, 1000),
                                            (torch.uint8, 0, 256), (torch.bool, 0, 2),
                                            (torch.float32, -10, 10),
                                            (torch.int64, -(2**62), 2**62)])
def test_random_integers(dtype, low, high):
    from genesis_cuda.kernels import random

    a = _empty((100_000,), dtype)
    random.random_(a, low, high, _gen())
    x = to_torch(a)
    xi = x.long() if dtype is not torch.float32 else x.double()
    assert xi.min() >= low and xi.max() < high
    if high - low <= 1000:
        assert len(torch.unique(xi)) == high - low  # every value shows up
    else:
        assert abs(xi.double().mean()) / (2**62) < 0.02


def test_reproducible_and_independent():
    from genesis_cuda.kernels import random

    g = _gen(7)
    a, b = _empty((1000,), torch.float32), _empty((1000,), torch.float32)
    random.uniform_(a, 0.0, 1.0, g)
    random.uniform_(b, 0.0, 1.0, g)
    ta, tb = to_torch(a), to_torch(b)
    assert not torch.equal(ta, tb)  # successive calls draw fresh counters
    g.manual_seed(7)
    c = _empty((1000,), torch.float32)
    random.uniform_(c, 0.0, 1.0, g)
    assert torch.equal(to_torch(c), ta)
    d = _empty((1000,), torch.float32)
    random.uniform_(d, 0.0, 1.0, _gen(8))
    assert not torch.equal(to_torch(d), ta)
    assert abs(torch.corrcoef(torch.stack([ta, tb]))[0, 1]) < 0.15


def test_strided_target_writes_only_its_view():
    from genesis_cuda import array
    from genesis_cuda.kernels import random

    base = to_dev(torch.zeros(64, 64, device="cuda"))
    view = array.as_strided(base, (32, 64), (128, 1), 0)  # every other row
    random.normal_(view, 0.0, 1.0, _gen())
    full = to_torch(base)
    assert (full[1::2] == 0).all() and (full[::2] != 0).float().mean() > 0.99
    # Same values as a contiguous draw from the same state: counters follow logical order.
    c = _empty((32, 64), torch.float32)
    random.normal_(c, 0.0, 1.0, _gen())
    assert torch.equal(to_torch(c), full[::2])


def test_empty_target():
    from genesis_cuda.kernels import random

    g = _gen()
    random.uniform_(_empty((0, 3), torch.float32), 0.0, 1.0, g)
    assert g.offset == 0


@pytest.mark.parametrize("n", [0, 1, 10, 5000, 100_000])
def test_randperm(n):
    from genesis_cuda.kernels import random

    g = _gen(3)
    p = to_torch(random.randperm(n, D.int64, 0, g))
    assert torch.equal(torch.sort(p).values, torch.arange(n))
    if n > 10:
        assert not torch.equal(p, torch.arange(n))
        g.manual_seed(3)
        assert torch.equal(to_torch(random.randperm(n, D.int64, 0, g)), p)


def test_randperm_dtype():
    from genesis_cuda.kernels import random

    p = to_torch(random.randperm(100, D.int32, 0, _gen()))
    assert p.dtype == torch.int32 and sorted(p.tolist()) == list(range(100))
