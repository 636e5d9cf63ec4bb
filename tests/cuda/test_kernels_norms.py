"""Differential tests of genesis_cuda's softmax and norm kernels against torch CUDA.

Inputs are torch tensors of any stride pattern seen through ``kernel_arrays.dev`` (no
copy); runs under the Triton interpreter on the CPU too (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import pytest
import torch

from genesis import dtypes as D

pytestmark = pytest.mark.cuda
pytest.importorskip("triton")  # the kernels are Triton code; CI machines may lack it

from kernel_arrays import TORCH, check, dev, host, make  # noqa: E402

from genesis_cuda.kernels import norms  # noqa: E402
from genesis_cuda.kernels import softmax as sm  # noqa: E402

FLOATS = [D.float32, D.float16, D.bfloat16, D.float64]
SHAPES = [(7, 33), (4, 1000), (3, 5, 64), (2, 4096), (1, 20000), (5, 1), (0, 8)]


def _ref_softmax(t, dim, log):
    fn = torch.log_softmax if log else torch.softmax
    if t.dtype in (torch.float16, torch.bfloat16):
        return fn(t.float(), dim).to(t.dtype)
    return fn(t, dim)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("log", [False, True])
def test_softmax(dtype, log):
    for shape in SHAPES:
        t = make(shape, dtype, seed=len(shape) + shape[-1])
        check(sm.softmax(dev(t), len(shape) - 1, log), _ref_softmax(t, -1, log))
    t = make((6, 50, 7), dtype, seed=1)
    for dim in range(3):
        check(sm.softmax(dev(t), dim, log), _ref_softmax(t, dim, log))
        check(sm.softmax(dev(t.transpose(0, 2)), dim, log), _ref_softmax(t.transpose(0, 2),
                                                                        dim, log))
    z = make((), dtype, seed=2)
    check(sm.softmax(dev(z), 0, log), _ref_softmax(z, 0, log))
    row = make((64, 300), dtype, seed=3)[::2, 5:]  # strided rows
    check(sm.softmax(dev(row), 1, log), _ref_softmax(row, 1, log))


def _ref_softmax_backward(y, g, dim, log):
    """torch's own kernel at the input precision (float32 and up), float64 math for half types
    (the cancellation in g - sum(g*y) makes a float64 reference differ from any float32
    computation by more than the float32 tolerance)."""
    if y.dtype in (torch.float32, torch.float64):
        fn = torch._log_softmax_backward_data if log else torch._softmax_backward_data
        return fn(g, y, dim, y.dtype)
    y64, g64 = y.double(), g.double()
    if log:
        ref = g64 - torch.exp(y64) * g64.sum(dim, keepdim=True)
    else:
        ref = y64 * (g64 - (g64 * y64).sum(dim, keepdim=True))
    return ref.to(y.dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_backward(dtype, log):
    for shape in SHAPES + [(6, 50, 7)]:
        x = make(shape, D.float64, seed=4).requires_grad_(True)
        y = (torch.log_softmax if log else torch.softmax)(x, -1)
        g = make(shape, D.float64, seed=5)
        (gx,) = torch.autograd.grad(y, x, g) if x.numel() else (torch.zeros_like(x),)
        yd, gd = y.detach().to(TORCH[dtype]), g.to(TORCH[dtype])
        got = sm.softmax_backward(dev(yd), dev(gd), len(shape) - 1, log)
        check(got, _ref_softmax_backward(yd, gd, len(shape) - 1, log))
    g = make((5, 40, 6), dtype, seed=7)
    for dim in range(3):
        # y: real (log_)softmax outputs along dim (random y would make exp(y) amplify the
        # rounding of sum(g) far beyond what the op ever sees)
        y = _ref_softmax(make((5, 40, 6), dtype, seed=6), dim, log)
        check(sm.softmax_backward(dev(y), dev(g), dim, log),
              _ref_softmax_backward(y, g, dim, log))


# ------------------------------------------------------------------ norms
def _ref_layer_norm(x, w, b, eps):
    x64 = x.double()
    mean = x64.mean(-1, keepdim=True)
    var = ((x64 - mean) ** 2).mean(-1, keepdim=True)
    rstd = 1.0 / torch.sqrt(var + eps)
    y = (x64 - mean) * rstd
    if w is not None:
        y = y * w.double()
    if b is not None:
        y = y + b.double()
    return y.to(x.dtype), mean.float(), rstd.float()


def _ref_rms_norm(x, w, eps):
    x64 = x.double()
    rstd = 1.0 / torch.sqrt((x64 * x64).mean(-1, keepdim=True) + eps)
    y = x64 * rstd
    if w is not None:
        y = y * w.double()
    return y.to(x.dtype), rstd.float()


F32_TOL = dict(rtol=1.3e-6, atol=1e-5)


def check_norm(got, ref):
    """Norms compute in float32 for every input dtype (as the contract's composite does), so
    float64 results get float32's tolerance."""
    if ref.dtype == torch.float64:
        torch.testing.assert_close(host(got), ref, **F32_TOL)
    else:
        check(got, ref)


NORM_SHAPES = [(4, 7), (3, 5, 96), (16, 1000), (2, 4096), (3, 20000), (0, 16)]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_forward(dtype, affine):
    for shape in NORM_SHAPES:
        x = make(shape, dtype, seed=8)
        w = make(shape[-1:], dtype, seed=9) if affine else None
        b = make(shape[-1:], dtype, seed=10) if affine else None
        y, mean, rstd = norms.layer_norm(dev(x), w if w is None else dev(w),
                                         b if b is None else dev(b), 1e-5)
        ry, rmean, rrstd = _ref_layer_norm(x, w, b, 1e-5)
        check_norm(y, ry)
        check(mean, rmean)
        check(rstd, rrstd)
        assert mean.shape == tuple(shape[:-1]) + (1,)
    xt = make((64, 48), dtype, seed=11).t()  # non-row layout: goes through a copy
    y, mean, rstd = norms.layer_norm(dev(xt), None, None, 1e-6)
    check_norm(y, _ref_layer_norm(xt, None, None, 1e-6)[0])


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm_forward(dtype, affine):
    for shape in NORM_SHAPES:
        x = make(shape, dtype, seed=12)
        w = make(shape[-1:], dtype, seed=13) if affine else None
        y, rstd = norms.rms_norm(dev(x), w if w is None else dev(w), 1e-6)
        ry, rrstd = _ref_rms_norm(x, w, 1e-6)
        check_norm(y, ry)
        check(rstd, rrstd)


def _grads(kind, x, w, b, g, eps):
    x64 = x.double().requires_grad_(True)
    w64 = w.double().requires_grad_(True) if w is not None else None
    b64 = b.double().requires_grad_(True) if b is not None else None
    if kind == "layer":
        y = torch.nn.functional.layer_norm(x64, x.shape[-1:], w64, b64, eps)
    else:
        y = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + eps)
        if w64 is not None:
            y = y * w64
    ins = [t for t in (x64, w64, b64) if t is not None]
    if x.numel() == 0:
        return [torch.zeros_like(t) for t in ins]
    return torch.autograd.grad(y, ins, g.double())


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_norm_backward(kind, dtype, affine):
    for shape in NORM_SHAPES:
        x = make(shape, dtype, seed=14)
        g = make(shape, dtype, seed=15)
        w = make(shape[-1:], dtype, seed=16) if affine else None
        b = make(shape[-1:], dtype, seed=17) if (affine and kind == "layer") else None
        if kind == "layer":
            _, mean, rstd = _ref_layer_norm(x, w, b, 1e-5)
            gx, gw, gb = norms.layer_norm_backward(dev(g), dev(x), w if w is None else dev(w),
                                                   dev(mean), dev(rstd))
        else:
            _, rstd = _ref_rms_norm(x, w, 1e-5)
            gx, gw = norms.rms_norm_backward(dev(g), dev(x), w if w is None else dev(w),
                                             dev(rstd))
            gb = None
        ref = _grads(kind, x, w, b, g, 1e-5)
        # reference in float64 from the same rounded inputs; grad_w sums over many rows
        tol = {torch.float16: 2e-2, torch.bfloat16: 5e-2, torch.float64: 1e-5}.get(x.dtype)
        got = host(gx)
        torch.testing.assert_close(got, ref[0].to(x.dtype), rtol=tol, atol=tol)
        if affine:
            torch.testing.assert_close(host(gw), ref[1].to(w.dtype), rtol=tol or 1e-4,
                                       atol=tol or 1e-4)
            if kind == "layer":
                torch.testing.assert_close(host(gb), ref[2].to(w.dtype), rtol=tol or 1e-4,
                                           atol=tol or 1e-4)
        else:
            assert gw is None and gb is None
