"""linear_cross_entropy and the fused cross-entropy rows against torch: values and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as TF
from device_params import cpu, to_genesis, to_torch, torch_device
from torch.testing import assert_close

import genesis
import genesis.cuda  # noqa: F401 - is_available() for the device check
import genesis.nn.functional as F
from genesis.nn.functional.fused_loss import cross_entropy_rows


def _bf16_grad_close(got, ref):
    """bf16 gradients at torch's bf16 rtol, with an absolute floor of 2 bf16 ulps of the
    largest entry: an entry of grad_input / grad_weight is a sum over the vocabulary (or the
    tokens) of rounded terms that nearly cancel, and torch rounds its logits' gradient to
    bf16 from bf16 log-probabilities while genesis rounds it once from float32, so entries
    near zero differ by a few ulps of the row's scale."""
    got, ref = got.float(), ref.float()
    assert_close(got, ref, rtol=1.6e-2, atol=float(ref.abs().max()) * 2**-7)


def _inputs(n, h, v, dtype=torch.float32, bias=True, ignore=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, h, generator=g).to(dtype)
    w = (torch.randn(v, h, generator=g) / h**0.5).to(dtype)
    b = torch.randn(v, generator=g).to(dtype) if bias else None
    t = torch.randint(0, v, (n,), generator=g)
    if ignore is not None:
        t[torch.rand(n, generator=g) < 0.3] = ignore
        t[0] = 1
    return x, w, b, t


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("chunk", [None, 1, 7])
def test_linear_cross_entropy_matches_torch(device, reduction, smoothing, chunk):
    x, w, b, t = _inputs(23, 16, 37, ignore=-100)
    td = torch_device(device)
    tx, tw, tb = (a.to(td).requires_grad_() for a in (x, w, b))
    ref = TF.cross_entropy(TF.linear(tx, tw, tb), t.to(td), reduction=reduction,
                           label_smoothing=smoothing)
    gx, gw, gb = (to_genesis(a, device, True) for a in (x, w, b))
    got = F.linear_cross_entropy(gx, gw, to_genesis(t, device), gb, reduction=reduction,
                                 label_smoothing=smoothing, chunk_size=chunk)
    assert got.dtype is genesis.float32 and tuple(got.shape) == tuple(ref.shape)
    assert_close(to_torch(got), cpu(ref))
    cot = torch.randn(ref.shape, generator=torch.Generator().manual_seed(3))
    ref.backward(cot.to(td))
    got.backward(to_genesis(cot, device))
    for g_, t_ in ((gx, tx), (gw, tw), (gb, tb)):
        assert_close(to_torch(g_.grad), cpu(t_.grad))


def test_linear_cross_entropy_options(device):
    # no bias, another ignore_index, token dims (2, 9) flattened, only some inputs need grad
    x, w, _, t = _inputs(18, 8, 11, bias=False, ignore=3)
    x3, t3 = x.reshape(2, 9, 8), t.reshape(2, 9)
    td = torch_device(device)
    tx, tw = x3.to(td).requires_grad_(), w.to(td)
    ref = TF.cross_entropy(TF.linear(tx, tw).transpose(1, 2), t3.to(td), ignore_index=3,
                           reduction="none")
    gx, gw = to_genesis(x3, device, True), to_genesis(w, device)
    got = F.linear_cross_entropy(gx, gw, to_genesis(t3, device), ignore_index=3,
                                 reduction="none", chunk_size=4)
    assert tuple(got.shape) == (2, 9)
    assert_close(to_torch(got), cpu(ref))
    ref.sum().backward()
    got.sum().backward()
    assert_close(to_torch(gx.grad), cpu(tx.grad))
    assert gw.grad is None


def test_linear_cross_entropy_all_ignored_and_empty(device):
    x, w, b, t = _inputs(5, 4, 6)
    t[:] = -100
    gx = to_genesis(x, device, True)
    got = F.linear_cross_entropy(gx, to_genesis(w, device), to_genesis(t, device),
                                 to_genesis(b, device), chunk_size=2)
    assert torch.isnan(to_torch(got))  # 0 / 0, as torch
    got.backward()
    assert_close(to_torch(gx.grad), torch.zeros(5, 4))
    empty = F.linear_cross_entropy(genesis.zeros(0, 4, device=device), to_genesis(w, device),
                                   genesis.zeros(0, dtype=genesis.int64, device=device),
                                   reduction="sum")
    assert float(empty.item()) == 0.0


def test_linear_cross_entropy_bf16(device):
    x, w, b, t = _inputs(40, 32, 300, dtype=torch.bfloat16, ignore=-100)
    td = torch_device(device)
    tx, tw, tb = (a.to(td).requires_grad_() for a in (x, w, b))
    ref = TF.cross_entropy(TF.linear(tx, tw, tb), t.to(td), label_smoothing=0.05)
    gx, gw, gb = (to_genesis(a, device, True) for a in (x, w, b))
    got = F.linear_cross_entropy(gx, gw, to_genesis(t, device), gb, label_smoothing=0.05,
                                 chunk_size=16)
    assert got.dtype is genesis.bfloat16
    assert_close(to_torch(got), cpu(ref))
    ref.backward()
    got.backward()
    for g_, t_ in ((gx, tx), (gw, tw), (gb, tb)):
        assert g_.grad.dtype is genesis.bfloat16
        _bf16_grad_close(to_torch(g_.grad), cpu(t_.grad))


def test_linear_cross_entropy_autocast_gives_float32_loss(device):
    x, w, _, t = _inputs(12, 8, 20)
    gx, gw = to_genesis(x, device, True), to_genesis(w, device, True)
    with genesis.autocast(genesis.device(device).type, dtype=genesis.bfloat16):
        got = F.linear_cross_entropy(gx, gw, to_genesis(t, device), chunk_size=5)
    assert got.dtype is genesis.float32
    # reference: torch's autocast semantics written out (bf16 matmul, float32 loss)
    ref = TF.cross_entropy(TF.linear(x.bfloat16(), w.bfloat16()).float(), t)
    assert_close(to_torch(got), ref, rtol=1.6e-2, atol=1e-5)  # bf16 matmuls
    got.backward()
    assert gx.grad.dtype is genesis.float32 and gw.grad.dtype is genesis.float32


def test_linear_cross_entropy_errors():
    x, w = genesis.randn(4, 8), genesis.randn(10, 8)
    t = genesis.randint(0, 10, (4,))
    with pytest.raises(RuntimeError, match=r"input of size \[4, 7\] and weight of size"):
        F.linear_cross_entropy(genesis.randn(4, 7), w, t)
    with pytest.raises(ValueError, match=r"expected target of size \[4\]"):
        F.linear_cross_entropy(x, w, genesis.randint(0, 10, (5,)))
    with pytest.raises(TypeError, match="float32"):
        F.linear_cross_entropy(x, w, t.float())
    with pytest.raises(RuntimeError, match=r"bias of size \[10\]"):
        F.linear_cross_entropy(x, w, t, genesis.randn(9))
    with pytest.raises(ValueError, match="reduction"):
        F.linear_cross_entropy(x, w, t, reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        F.linear_cross_entropy(x, w, t, label_smoothing=1.5)
    with pytest.raises(ValueError, match="chunk_size"):
        F.linear_cross_entropy(x, w, t, chunk_size=0)


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_rows_matches_torch(device, smoothing):
    g = torch.Generator().manual_seed(1)
    z = torch.randn(9, 13, generator=g, dtype=torch.float64)
    t = torch.randint(0, 13, (9,), generator=g)
    t[2] = -1
    tz = z.clone().requires_grad_()
    ref = TF.cross_entropy(tz, t, ignore_index=-1, reduction="none", label_smoothing=smoothing)
    gz = to_genesis(z, device, True)
    got = cross_entropy_rows(gz, to_genesis(t, device), -1, smoothing)
    assert got.dtype is genesis.float64
    assert_close(to_torch(got), ref)
    cot = torch.randn(9, generator=g, dtype=torch.float64)
    ref.backward(cot)
    got.backward(to_genesis(cot, device))
    assert_close(to_torch(gz.grad), tz.grad)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_half_logits_take_fused_rows(device, dtype, reduction):
    g = torch.Generator().manual_seed(2)
    z = (torch.randn(17, 500, generator=g) * 3).to(dtype)
    t = torch.randint(0, 500, (17,), generator=g)
    t[4] = -100
    td = torch_device(device)
    tz = z.to(td).requires_grad_()
    ref = TF.cross_entropy(tz.float(), t.to(td), reduction=reduction, label_smoothing=0.1)
    gz = to_genesis(z, device, True)
    got = F.cross_entropy(gz, to_genesis(t, device), reduction=reduction, label_smoothing=0.1)
    assert got.dtype is {torch.bfloat16: genesis.bfloat16, torch.float16: genesis.float16}[dtype]
    assert got.grad_fn is not None
    # reference in float32 from the same half logits: only the final rounding differs
    # (compared as half tensors: torch's default tolerances for that dtype)
    assert_close(to_torch(got), cpu(ref).to(dtype))
    cot = torch.rand(ref.shape, generator=g).to(dtype)
    ref.backward(cot.float().to(td))
    got.backward(to_genesis(cot, device))
    assert gz.grad.dtype is got.dtype
    assert_close(to_torch(gz.grad), cpu(tz.grad).to(dtype))
    with genesis.autocast(genesis.device(device).type, dtype=genesis.bfloat16):
        auto = F.cross_entropy(gz, to_genesis(t, device), reduction=reduction,
                               label_smoothing=0.1)
    assert auto.dtype is genesis.float32
    assert_close(to_torch(auto), cpu(ref))


def test_cross_entropy_rows_checks_devices():
    logits = genesis.randn(3, 5, dtype=genesis.bfloat16)
    target = genesis.tensor([0, 1, 2])
    assert cross_entropy_rows(logits, target).shape == (3,)
    if genesis.cuda.is_available():
        with pytest.raises(RuntimeError, match="same device"):
            cross_entropy_rows(logits, target.to("cuda"))
