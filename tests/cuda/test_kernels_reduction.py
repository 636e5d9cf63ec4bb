"""Differential tests of genesis_cuda's reduction kernels against torch CUDA.

Inputs are torch tensors of any stride pattern seen through ``kernel_arrays.dev`` (no
copy); runs under the Triton interpreter on the CPU too (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import pytest
import torch

from genesis import dtypes as D

pytestmark = pytest.mark.cuda
pytest.importorskip("triton")  # the kernels are Triton code; CI machines may lack it

from kernel_arrays import DEV, TORCH, check, dev, host, make  # noqa: E402

from genesis_cuda.kernels import arg_reduction as arg  # noqa: E402
from genesis_cuda.kernels import reduction as red  # noqa: E402

FLOATS = [D.float32, D.float16, D.bfloat16, D.float64]
INTS = [D.uint8, D.int8, D.int32, D.int64]


def _dims_cases(ndim):
    cases = [(ndim - 1,), (0,), tuple(range(ndim))]
    if ndim >= 3:
        cases += [(1,), (0, 2), (2, 0)]
    return cases


def _torch_reduce(op, t, dims, keepdim, dtype=None):
    if op == "sum":
        return torch.sum(t, dims, keepdim=keepdim, dtype=dtype)
    if op == "prod":
        out = t.to(dtype)
        for d in sorted(dims, reverse=True):
            out = torch.prod(out, d, keepdim=keepdim)
        return out
    if op == "amax":
        return torch.amax(t, dims, keepdim=keepdim)
    if op == "amin":
        return torch.amin(t, dims, keepdim=keepdim)
    if op == "all":
        return torch.all(t, dim=dims, keepdim=keepdim)
    return torch.any(t, dim=dims, keepdim=keepdim)


def _gen_reduce(op, a, dims, keepdim, dtype):
    if op in ("sum", "prod"):
        return getattr(red, op)(a, dims, keepdim, dtype)
    return getattr(red, op)(a, dims, keepdim)


def _sum_dtype(dtype):
    if dtype.is_floating_point:
        return dtype
    return D.int64


def _views(dtype, low=None):
    base = make((12, 33, 20), dtype, low=low, seed=3)
    return [
        ("contig", base),
        ("permuted", base.permute(2, 0, 1)),
        ("sliced", base[1::2, ::3, 2:]),
        ("expanded", make((20,), dtype, low=low, seed=4).expand(12, 33, 20)),
    ]


@pytest.mark.parametrize("dtype", FLOATS + INTS + [D.bool_], ids=str)
@pytest.mark.parametrize("op", ["sum", "amax", "amin", "all", "any"])
def test_reduce(op, dtype):
    float_sum = op == "sum" and dtype.is_floating_point
    # float sums: positive inputs and a float64 reference (summation order differs from torch)
    for _name, t in _views(dtype, low=0.0 if float_sum else None):
        for dims in _dims_cases(3):
            for keepdim in (False, True):
                sd = _sum_dtype(dtype)
                if float_sum:
                    ref = torch.sum(t.double(), dims, keepdim=keepdim).to(t.dtype)
                else:
                    ref = _torch_reduce(op, t, dims, keepdim, TORCH[sd])
                got = _gen_reduce(op, dev(t), dims, keepdim, sd)
                if op in ("all", "any") and ref.dtype == torch.uint8:  # contract: bool
                    ref = ref.bool()
                check(got, ref)


@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16, D.float64, D.int64], ids=str)
def test_prod(dtype):
    t = make((6, 7, 5), dtype, low=0.5 if dtype.is_floating_point else -3, high=4, seed=5)
    for dims in _dims_cases(3):
        for keepdim in (False, True):
            src = t.double() if dtype.is_floating_point else t  # torch rounds between dims
            ref = _torch_reduce("prod", src, dims, keepdim, src.dtype).to(t.dtype)
            check(red.prod(dev(t), dims, keepdim, dtype), ref)


def test_sum_half_accumulates_in_float32():
    t = torch.full((4096,), 0.1, dtype=torch.float16, device=DEV)
    check(red.sum(dev(t), (0,), False, D.float16), t.sum(0))
    check(red.sum(dev(t), (0,), False, D.float32), t.sum(0, dtype=torch.float32))


@pytest.mark.parametrize("shape,dims", [((300001,), (0,)), ((2048, 64), (0,)),
                                        ((64, 5000), (1,)), ((3000, 3, 70), (0, 2)),
                                        ((513, 1025), (0, 1))])
@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16], ids=str)
def test_reduce_large_split(shape, dims, dtype):
    t = make(shape, dtype, low=0.0, seed=6)  # positive: no cancellation in the reference
    ref = torch.sum(t.double(), dims).to(TORCH[dtype])
    got = host(red.sum(dev(t), dims, False, dtype))
    tol = 2e-2 if dtype is D.bfloat16 else 1e-5
    torch.testing.assert_close(got, ref, rtol=tol, atol=tol)
    check(red.amax(dev(t), dims, False), torch.amax(t, dims))
    check(red.amin(dev(t.t() if t.dim() == 2 else t), dims, False),
          torch.amin(t.t() if t.dim() == 2 else t, dims))


def test_reduce_many_dims():
    t = make((2, 3, 4, 5, 6, 7, 2, 3), D.float32, seed=7).permute(7, 1, 0, 6, 2, 5, 3, 4)
    for dims in [(0, 2, 4, 6), (1, 3, 5, 7), (0, 1, 2, 3, 4, 5), (7,)]:
        check(red.sum(dev(t), dims, False, D.float32), t.sum(dims))
        check(red.amax(dev(t), dims, True), torch.amax(t, dims, keepdim=True))


def test_reduce_edge_cases():
    z = make((), D.float32, seed=8)
    check(red.sum(dev(z), (), False, D.float32), z.clone())
    check(red.amax(dev(z), (), False), z.clone())
    check(red.sum(dev(z), (), False, D.float64), z.double())
    e = make((0, 4), D.float32)
    check(red.sum(dev(e), (0,), False, D.float32), e.sum(0))
    check(red.sum(dev(e), (1,), True, D.float32), e.sum(1, keepdim=True))
    check(red.prod(dev(e), (0,), False, D.float32), e.prod(0))
    check(red.all(dev(e), (0,), False), e.all(0))
    check(red.any(dev(e), (0, 1), False), e.any())
    t = make((5, 1, 3), D.float32, seed=9)
    check(red.sum(dev(t), (1,), False, D.float32), t.sum(1))
    check(red.sum(dev(t), (), True, D.float32), t.clone())
    with pytest.raises(RuntimeError):
        red.amax(dev(e), (0,), False)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_amax_nan(dtype):
    t = make((4, 50), dtype, seed=10)
    t[1, 7] = float("nan")
    t[3, 49] = float("nan")
    for dims in [(1,), (0,), (0, 1)]:
        check(red.amax(dev(t), dims, False), torch.amax(t, dims))
        check(red.amin(dev(t), dims, False), torch.amin(t, dims))


# ------------------------------------------------------------------ argmax / argmin
@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16, D.float64, D.int32, D.int64,
                                   D.uint8], ids=str)
def test_argmax_argmin(dtype):
    for _name, t in _views(dtype):
        for dim in range(3):
            for keepdim in (False, True):
                check(arg.argmax(dev(t), dim, keepdim), torch.argmax(t, dim, keepdim))
                check(arg.argmin(dev(t), dim, keepdim), torch.argmin(t, dim, keepdim))


def test_argmax_ties_nan_long():
    t = torch.zeros(3, 5000, device=DEV)
    t[0, 4000] = 1.0
    t[0, 4500] = 1.0
    t[1, 10] = float("nan")
    t[1, 3000] = float("nan")
    t[2] = -1.0
    for dim in (1,):
        check(arg.argmax(dev(t), dim, False), torch.argmax(t, dim))
        check(arg.argmin(dev(t), dim, False), torch.argmin(t, dim))
    big = make((100000,), D.float32, seed=11)
    check(arg.argmax(dev(big), 0, False), torch.argmax(big, 0))
    check(arg.argmax(dev(t.t()), 0, True), torch.argmax(t.t(), 0, keepdim=True))


@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16], ids=str)
def test_argmax_of_few_long_rows_splits_them(dtype):
    """Rows too few to fill the GPU are cut into chunks (two kernels): ties, NaNs and
    all-equal rows across chunk boundaries still give the first index, as torch."""
    splits, chunk = arg._arg_splits(2, 1, 9000, 2048, 0)
    assert splits > 1 and chunk % 2048 == 0
    t = torch.full((4, 9000), float("-inf"), device=DEV)
    t[0, [1000, 8000]] = 5.0  # a tie in two chunks
    t[1, [8500, 300]] = float("nan")
    t[1, 5] = 7.0
    t[3] = torch.arange(9000, device=DEV) % 7  # many ties, in every chunk
    t = t.to(TORCH[dtype])
    for op in (torch.argmax, torch.argmin):
        fn = arg.argmax if op is torch.argmax else arg.argmin
        check(fn(dev(t), 1, False), op(t, 1))  # row 2: all -inf


# ------------------------------------------------------------------ cumsum
@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16, D.float64, D.int32, D.int64,
                                   D.bool_], ids=str)
def test_cumsum(dtype):
    for _name, t in _views(dtype):
        for dim in range(3):
            out_dt = dtype if dtype.is_floating_point else D.int64
            got = host(red.cumsum(dev(t), dim, out_dt))
            if dtype is D.bfloat16:  # float32 accumulation: compare with float64 math
                ref = torch.cumsum(t.double(), dim).to(t.dtype)
                torch.testing.assert_close(got, ref, atol=1e-2, rtol=1.6e-2)
            else:
                check(got, torch.cumsum(t, dim, dtype=TORCH[out_dt]))


def test_cumsum_long_and_edge():
    t = make((20000,), D.float32, low=0.0, seed=12)
    got = host(red.cumsum(dev(t), 0, D.float32))
    torch.testing.assert_close(got, torch.cumsum(t.double(), 0).float(), rtol=1e-5, atol=1e-3)
    z = make((), D.float32, seed=13)
    check(red.cumsum(dev(z), 0, D.float32), torch.cumsum(z, 0))
    e = make((0, 3), D.float32)
    check(red.cumsum(dev(e), 1, D.float32), torch.cumsum(e, 1))
    m = make((2, 3, 4, 5, 6), D.float32, seed=14).permute(4, 0, 3, 1, 2)
    for dim in range(5):
        check(red.cumsum(dev(m), dim, D.float32), torch.cumsum(m, dim))
    check(red.cumsum(dev(m), 2, D.float64), torch.cumsum(m, 2, dtype=torch.float64))
