"""genesis_cuda's SwiGLU, residual add + RMSNorm and rotary kernels against torch.

References are float32 (float64 for float64) math rounded once to the inputs' dtype, which
is what the kernels compute; compared at that dtype's default tolerances. Runs under the
Triton interpreter on the CPU too (``TRITON_INTERPRET=1``), at small sizes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as TF

from genesis import dtypes as D

pytestmark = pytest.mark.cuda
pytest.importorskip("triton")

from kernel_arrays import TORCH, check, dev, host, make  # noqa: E402

from genesis_cuda.kernels import add_rms_norm as arn  # noqa: E402
from genesis_cuda.kernels import norms  # noqa: E402
from genesis_cuda.kernels import rotary as rot  # noqa: E402
from genesis_cuda.kernels import swiglu as sw  # noqa: E402

FLOATS = [D.float32, D.bfloat16, D.float16]


def _acc(t):
    return t.double() if t.dtype is torch.float64 else t.float()


@pytest.mark.parametrize("dtype", FLOATS + [D.float64], ids=str)
def test_swiglu(dtype):
    for shape in [(7, 33), (2, 3, 300), (0, 5)]:
        g, u, d = (make(shape, dtype, seed=i) for i in range(3))
        ref_g, ref_u = _acc(g).requires_grad_(), _acc(u).requires_grad_()
        ref = TF.silu(ref_g) * ref_u
        check(sw.swiglu(dev(g), dev(u)), ref.detach().to(g.dtype))
        if ref.numel():
            ref.backward(_acc(d))
        dg, du = sw.swiglu_backward(dev(d), dev(g), dev(u))
        check(dg, ref_g.grad.to(g.dtype) if ref.numel() else torch.zeros_like(g))
        check(du, ref_u.grad.to(g.dtype) if ref.numel() else torch.zeros_like(g))
    t = make((8, 6), dtype, seed=4)
    check(sw.swiglu(dev(t.t()), dev(t.t())), (TF.silu(_acc(t.t())) * _acc(t.t())).to(t.dtype))


@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16], ids=str)
def test_swiglu_reads_the_halves_of_one_projection_in_place(dtype):
    """gate and up as the two halves of a fused gate/up output (row-strided views)."""
    for shape in [(5, 2 * 70), (2, 3, 2 * 32), (1, 1, 2 * 16)]:
        t = make(shape, dtype, seed=7)
        half = shape[-1] // 2
        g, u = t[..., :half], t[..., half:]
        if shape[0] * shape[-2] > 1:  # (one row: any stride does)
            assert sw._row_stride(dev(g)) == shape[-1]
        check(sw.swiglu(dev(g), dev(u)), (TF.silu(_acc(g)) * _acc(u)).to(t.dtype))
    t = make((4, 6, 8), dtype, seed=8)  # leading dims that do not merge: copied first
    g = t.transpose(0, 1)
    assert sw._row_stride(dev(g)) is None
    check(sw.swiglu(dev(g), dev(g)), (TF.silu(_acc(g)) * _acc(g)).to(t.dtype))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("with_weight", [True, False])
def test_add_rms_norm(dtype, with_weight):
    for shape in [(5, 64), (3, 4, 100), (1, 1)]:
        x, r = make(shape, dtype, seed=1), make(shape, dtype, seed=2)
        w = make(shape[-1:], dtype, seed=3) if with_weight else None
        h, y, rstd = arn.add_rms_norm(dev(x), dev(r), None if w is None else dev(w), 1e-6)
        ref_h = (x.float() + r.float()).to(x.dtype)
        check(h, ref_h)
        ref_y = TF.rms_norm(ref_h.float(), shape[-1:], None if w is None else w.float(), 1e-6)
        check(y, ref_y.to(x.dtype))
        got_rstd = host(rstd)
        assert tuple(got_rstd.shape) == tuple(shape[:-1]) + (1,)
        # the backward is rms_norm_backward on h: it needs rms_norm's own rstd of h
        _, want_rstd = norms.rms_norm(h, None if w is None else dev(w), 1e-6)
        torch.testing.assert_close(got_rstd, host(want_rstd))


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("inverse", [False, True])
def test_rotary(dtype, inverse):
    b, hq, hk, s, d = 2, 3, 1, 70, 16
    q = make((b, s, hq, d), dtype, seed=1).transpose(1, 2)  # (B, H, S, D) strided, as in models
    k = make((b, hk, s, d), dtype, seed=2)
    ang = make((s, d // 2), D.float32, seed=3)
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos().to(TORCH[dtype]), emb.sin().to(TORCH[dtype])
    cos_b, sin_b = cos.expand(b, s, d), sin.expand(b, s, d)  # zero batch stride
    qo, ko = rot.rotary(dev(q), dev(k), dev(cos_b), dev(sin_b), inverse)
    c, sn = cos.float(), sin.float()
    for x, got in ((q, qo), (k, ko)):
        xf = x.float()
        want = xf * c - _rotate_half(xf * sn) if inverse else xf * c + _rotate_half(xf) * sn
        check(got, want.to(x.dtype))
