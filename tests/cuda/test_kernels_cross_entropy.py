"""genesis_cuda's cross-entropy kernels against torch and the contract's composite.

Runs under the Triton interpreter on the CPU too (``TRITON_INTERPRET=1``), at small sizes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as TF

from genesis import dtypes as D

pytestmark = pytest.mark.cuda
pytest.importorskip("triton")

from kernel_arrays import DEV, TORCH, dev, host, make  # noqa: E402

from genesis_cuda.kernels import cross_entropy as ce  # noqa: E402

# (rows, classes): one block, a ragged last block, several blocks (BLOCK shrunk below)
SHAPES = [(5, 7), (3, 300), (4, 1000)]


@pytest.fixture(autouse=True)
def _small_blocks(monkeypatch):
    monkeypatch.setattr(ce, "BLOCK", 128)  # several blocks per row at small sizes


def _target(m, c, seed):
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, c, (m,), generator=g)
    t[1 % m] = -100
    return t.to(DEV)


@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16, D.float16, D.float64], ids=str)
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_forward_backward(dtype, smoothing):
    for m, c in SHAPES:
        z = make((m, c), dtype, seed=c)
        t = _target(m, c, c)
        ref_z = z.double().requires_grad_()
        ref = TF.cross_entropy(ref_z, t, reduction="none", label_smoothing=smoothing)
        loss, lse = ce.cross_entropy(dev(z), dev(t), -100, smoothing)
        want = D.float64 if dtype is D.float64 else D.float32
        got_loss, got_lse = host(loss), host(lse)
        assert got_loss.dtype is TORCH[want]
        torch.testing.assert_close(got_loss.double(), ref.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got_lse.double(), torch.logsumexp(z.double(), 1),
                                   rtol=1e-5, atol=1e-5)
        g = torch.rand(m, dtype=TORCH[want], device=DEV)
        ref.backward(g.double())
        gz = host(ce.cross_entropy_backward(dev(g), dev(z), dev(t), lse, -100, smoothing))
        assert gz.dtype is z.dtype
        # the float64 gradient rounded once to the logits' dtype: that dtype's tolerance
        torch.testing.assert_close(gz, ref_z.grad.to(z.dtype))


def test_cross_entropy_strided_inputs():
    z = make((6, 400), D.bfloat16, seed=3)[::2, 10:]  # strided rows
    t = _target(6, 390, 4)[::2]  # strided target
    loss, lse = ce.cross_entropy(dev(z), dev(t), -100, 0.0)
    ref = TF.cross_entropy(z.float(), t, reduction="none")
    torch.testing.assert_close(host(loss), ref, rtol=1e-5, atol=1e-5)
    gz = ce.cross_entropy_backward(dev(torch.ones(3, device=DEV)), dev(z), dev(t), lse,
                                   -100, 0.0)
    zr = z.float().requires_grad_()
    TF.cross_entropy(zr, t, reduction="sum").backward()
    torch.testing.assert_close(host(gz), zr.grad.bfloat16())
