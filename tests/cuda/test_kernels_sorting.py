"""Triton sort/topk vs torch CUDA: dtypes, dims, NaN (sorted as the largest), ties
(stable: equal keys keep their order, so indices match torch's stable sort exactly),
strided inputs, long rows (chunk sort + merge passes), empty arrays. Exact comparisons.
"""

import pytest
import torch
from kernel_arrays import to_dev, to_torch

from genesis import dtypes as D

pytestmark = pytest.mark.cuda


def _check_sort(x, dim, descending):
    from genesis_cuda.kernels import sorting

    v, i = sorting.sort(to_dev(x), dim, descending, True)
    ev, ei = torch.sort(x, dim=dim, descending=descending, stable=True)
    v, i = to_torch(v), to_torch(i)
    assert torch.equal(i, ei.cpu())
    ev = ev.cpu()
    if v.is_floating_point():
        assert torch.equal(v.isnan(), ev.isnan())
        assert torch.equal(torch.nan_to_num(v), torch.nan_to_num(ev))
    else:
        assert torch.equal(v, ev)


def _data(shape, dtype, ties=False):
    if dtype is torch.bool:
        return torch.rand(shape, device="cuda") > 0.5
    if ties or not dtype.is_floating_point:
        lo, hi = (0, 6) if dtype is torch.uint8 else (-5, 5)
        return torch.randint(lo, hi, shape, device="cuda").to(dtype)
    return torch.randn(shape, device="cuda").to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64,
                                   torch.int64, torch.int32, torch.int16, torch.int8,
                                   torch.uint8, torch.bool])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_dtypes_with_ties(dtype, descending):
    x = _data((6, 37), dtype, ties=True)
    _check_sort(x, 1, descending)
    _check_sort(x, 0, descending)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_nan_and_signed_zero(descending):
    x = torch.randn(5, 20, device="cuda")
    x[0, 3] = x[0, 9] = float("nan")
    x[1, :6] = 0.0
    x[1, 2] = x[1, 4] = -0.0  # -0.0 == 0.0: ties, kept in input order
    x[2, 1] = float("inf")
    x[2, 7] = float("-inf")
    _check_sort(x, 1, descending)
    _check_sort(x.double(), 1, descending)
    _check_sort(x.half(), 1, descending)


@pytest.mark.parametrize("n", [1, 2, 3, 64, 100, 1000, 4096])
def test_sort_row_lengths(n):
    _check_sort(torch.randn(3, n, device="cuda"), 1, False)
    _check_sort(_data((2, n), torch.int64, ties=True), 1, True)


@pytest.mark.parametrize("n", [4097, 10000, 70000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_sort_long_rows_merge_path(n, dtype):
    x = _data((2, n), dtype, ties=dtype is not torch.float32)
    _check_sort(x, 1, False)
    _check_sort(x, 1, True)


def test_sort_strided_and_inner_dims():
    x = torch.randn(4, 5, 6, device="cuda").permute(2, 0, 1)  # (6, 4, 5) non-contiguous
    for dim in range(3):
        _check_sort(x, dim, False)
    _check_sort(torch.randn(3, 5000, 2, device="cuda"), 1, True)  # long strided rows


def test_sort_empty_and_0d():
    from genesis_cuda.kernels import sorting

    e = torch.empty(3, 0, device="cuda")
    v, i = sorting.sort(to_dev(e), 1, False, True)
    assert v.shape == (3, 0) and i.shape == (3, 0) and i.dtype is D.int64
    s = torch.tensor(1.5, device="cuda")
    v, i = sorting.sort(to_dev(s), 0, False, True)
    assert to_torch(v).item() == 1.5 and to_torch(i).item() == 0


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k", [1, 5, 50])
def test_topk(largest, k):
    from genesis_cuda.kernels import sorting

    x = torch.randn(4, 50, device="cuda")  # distinct values: indices are determined
    v, i = sorting.topk(to_dev(x), k, 1, largest, True)
    ev, ei = torch.topk(x, k, 1, largest=largest, sorted=True)
    assert torch.equal(to_torch(v), ev.cpu()) and torch.equal(to_torch(i), ei.cpu())
    xt = x.t()  # along dim 0 of a transposed view
    v, i = sorting.topk(to_dev(xt), k, 0, largest, False)
    ev, ei = torch.topk(xt, k, 0, largest=largest, sorted=True)
    assert torch.equal(to_torch(v), ev.cpu()) and torch.equal(to_torch(i), ei.cpu())


def test_topk_long_row_and_nan():
    from genesis_cuda.kernels import sorting

    x = torch.randn(2, 20000, device="cuda")
    x[1, 123] = float("nan")
    v, i = sorting.topk(to_dev(x), 10, 1, True, True)
    ev, ei = torch.topk(x, 10, 1)
    v = to_torch(v)
    assert torch.equal(torch.nan_to_num(v), torch.nan_to_num(ev).cpu())
    assert torch.equal(to_torch(i), ei.cpu())
