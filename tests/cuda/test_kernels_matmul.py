"""Triton matmul vs torch CUDA (cuBLAS).

Tolerances: torch's defaults for each dtype (``torch.testing.assert_close``: fp64 1e-7,
fp32 rtol 1.3e-6 / atol 1e-5, fp16 rtol 1e-3 / atol 1e-5, bf16 rtol 1.6e-2 / atol 1e-5).
They hold because inputs are scaled by ``1/sqrt(K)`` so outputs are O(1): both sides
accumulate in fp32 (fp64 for fp64) in different orders, a difference of ~1e-7 absolute,
far under atol; half outputs round to the nearest fp16/bf16, where a flip of the last bit
is within rtol. Our fp32 default is full fp32 (``FP32_PRECISION = "ieee"``), like torch's
default ``allow_tf32 = False``.
"""

import math

import pytest
import torch
from kernel_arrays import to_dev, to_torch

pytestmark = pytest.mark.cuda


FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def _operands(batch, M, K, N, dtype, a_t=False, b_t=False):
    scale = 1 / math.sqrt(max(K, 1))
    a = torch.randn(*batch, M, K, device="cuda") * scale
    b = torch.randn(*batch, K, N, device="cuda")
    if a_t:  # same values, column-major storage
        a = a.transpose(-1, -2).contiguous().transpose(-1, -2)
    if b_t:
        b = b.transpose(-1, -2).contiguous().transpose(-1, -2)
    return a.to(dtype), b.to(dtype)


def _check(a, b):
    from genesis_cuda.kernels.matmul import matmul

    out = to_torch(matmul(to_dev(a), to_dev(b)))
    expect = torch.matmul(a, b).cpu()
    assert out.shape == expect.shape and out.dtype == expect.dtype
    torch.testing.assert_close(out, expect)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (17, 33, 65), (64, 64, 64), (128, 256, 64),
                                   (200, 136, 72), (3, 512, 5)])
def test_matmul_shapes(dtype, M, K, N):
    _check(*_operands((), M, K, N, dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("a_t,b_t", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_transposed_operands(dtype, a_t, b_t):
    # Small products take the pointer kernel, larger half ones the TMA kernels (2-d, and
    # batched with per-matrix device descriptors); sizes off the tile grid test the edges.
    _check(*_operands((), 96, 160, 136, dtype, a_t, b_t))
    _check(*_operands((3,), 64, 80, 48, dtype, a_t, b_t))
    _check(*_operands((), 384, 264, 200, dtype, a_t, b_t))
    _check(*_operands((3,), 264, 200, 136, dtype, a_t, b_t))


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_batched(dtype):
    _check(*_operands((4,), 33, 70, 19, dtype))
    _check(*_operands((2, 3), 64, 128, 64, dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_strided_views(dtype):
    a, b = _operands((6,), 40, 64, 48, dtype)
    a = a[::2]                              # batch stride doubled
    b = torch.randn(3, 64, 96, device="cuda").to(dtype)[..., ::2]  # column stride 2
    _check(a, b)
    # broadcast batch (stride 0) and batch dims that do not merge
    a2 = torch.randn(1, 16, 32, device="cuda").to(dtype).expand(5, 16, 32)
    b2 = torch.randn(5, 32, 24, device="cuda").to(dtype)
    _check(a2, b2)
    a3 = torch.randn(4, 3, 16, 32, device="cuda").to(dtype).permute(1, 0, 2, 3)
    b3 = torch.randn(3, 4, 32, 8, device="cuda").to(dtype)[:, :, :, :]
    _check(a3, b3)
    a4 = torch.randn(2, 3, 5, 16, 32, device="cuda").to(dtype).permute(2, 0, 1, 3, 4)
    b4 = torch.randn(5, 2, 3, 32, 8, device="cuda").to(dtype)
    _check(a4, b4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_empty(dtype):
    from genesis_cuda.kernels.matmul import matmul

    for (sa, sb) in [((0, 5), (5, 3)), ((4, 0), (0, 3)), ((4, 5), (5, 0)), ((0, 2, 3), (0, 3, 4))]:
        a = torch.randn(sa, device="cuda").to(dtype)
        b = torch.randn(sb, device="cuda").to(dtype)
        out = to_torch(matmul(to_dev(a), to_dev(b)))
        assert torch.equal(out, torch.matmul(a, b).cpu())  # K == 0 gives zeros


def test_matmul_tuned_large_bf16():
    # Big enough to go through the config timing path once (bf16, TMA kernel).
    _check(*_operands((), 1024, 1024, 1024, torch.bfloat16))


@pytest.mark.parametrize("dtype,shape", [(torch.bfloat16, (1536, 1152, 1280)),
                                         (torch.float32, (640, 1088, 832))])
def test_matmul_candidates_are_compiled_together_before_timing(monkeypatch, dtype, shape):
    """A new bucket's candidates are compiled side by side (``parallel_compile``) before the
    first is timed: the timing loop's own compilations are all Triton cache hits."""
    from triton import knobs

    from genesis_cuda.kernels import matmul_tuning

    reports, during = [], []

    def spy(calls):
        reports.append(real(calls))
        monkeypatch.setattr(knobs.compilation, "listener", listener)  # the timing loop's
        return reports[-1]

    def listener(src, metadata, metadata_group, times, cache_hit):
        if src.fn.module.endswith("matmul_kernels"):
            during.append(cache_hit)

    real = matmul_tuning.precompile_calls
    monkeypatch.setattr(matmul_tuning, "precompile_calls", spy)
    M, K, N = shape  # (sizes no other test uses: a bucket not tuned yet in this process)
    _check(*_operands((), M, K, N, dtype))
    assert len(reports) == 1 and not reports[0].errors
    assert all(during), during


def test_matmul_fp32_precision_options():
    from genesis_cuda.kernels import matmul as mm

    a, b = _operands((), 256, 512, 192, torch.float32)
    ref = torch.matmul(a.double(), b.double()).cpu()
    old = mm.FP32_PRECISION
    try:
        for prec, bound in [("ieee", 1e-6), ("tf32x3", 1e-5), ("tf32", 5e-3)]:
            mm.FP32_PRECISION = prec
            out = to_torch(mm.matmul(to_dev(a), to_dev(b))).double()
            err = ((out - ref).norm() / ref.norm()).item()
            assert err < bound, (prec, err)
    finally:
        mm.FP32_PRECISION = old


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_fused_bias(dtype, with_bias):
    from genesis_cuda.kernels.matmul import linear

    K = 96
    x = (torch.randn(4, 7, K, device="cuda") / math.sqrt(K)).to(dtype)
    w = torch.randn(80, K, device="cuda").to(dtype)
    b = torch.randn(80, device="cuda").to(dtype) if with_bias else None
    def expect(xv, wv):
        # The bias is added before rounding (one rounding, as a fused epilogue); torch's
        # F.linear on 3-d half inputs rounds the product first, so the reference is the
        # float64 result rounded once to the dtype.
        bb = None if b is None else b.double()
        return torch.nn.functional.linear(xv.double(), wv.double(), bb).to(dtype).cpu()

    for xv in (x, x.transpose(0, 1)):  # leading dims that do not merge: copied first
        out = to_torch(linear(to_dev(xv), to_dev(w), None if b is None else to_dev(b)))
        torch.testing.assert_close(out, expect(xv, w))
    ws = torch.randn(80, 2 * K, device="cuda").to(dtype)[:, ::2]  # strided weight view
    out = to_torch(linear(to_dev(x), to_dev(ws), None if b is None else to_dev(b)))
    torch.testing.assert_close(out, expect(x, ws))
    xl = (torch.randn(3, 130, 256, device="cuda") / 16).to(dtype)  # TMA-sized, fused bias
    wl = torch.randn(264, 256, device="cuda").to(dtype)
    bl = torch.randn(264, device="cuda").to(dtype) if with_bias else None
    b = bl
    out = to_torch(linear(to_dev(xl), to_dev(wl), None if bl is None else to_dev(bl)))
    torch.testing.assert_close(out, expect(xl, wl))


def test_linear_empty():
    from genesis_cuda.kernels.matmul import linear

    b = torch.randn(5, device="cuda")
    out = to_torch(linear(to_dev(torch.randn(3, 0, device="cuda")),
                          to_dev(torch.randn(5, 0, device="cuda")), to_dev(b)))
    assert torch.equal(out, b.expand(3, 5).cpu())
    out = linear(to_dev(torch.randn(0, 4, device="cuda")), to_dev(torch.randn(5, 4, device="cuda")),
                 None)
    assert out.shape == (0, 5)
