"""swiglu, add_rms_norm and apply_rotary_emb against torch's unfused expressions: values and
gradients, float32 at default tolerances and bf16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as TF
from device_params import cpu, to_genesis, to_torch, torch_device
from torch.testing import assert_close

import genesis
import genesis.nn.functional as F

DTYPES = [torch.float32, torch.bfloat16]


def _rand(shape, dtype, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _check(device, torch_fn, genesis_fn, inputs, grads_of=None):
    """Outputs (a tuple) and the input gradients of ``genesis_fn`` vs ``torch_fn``."""
    td = torch_device(device)
    grads_of = range(len(inputs)) if grads_of is None else grads_of
    t_in = [x.to(td).requires_grad_(i in grads_of) for i, x in enumerate(inputs)]
    g_in = [to_genesis(x, device, i in grads_of) for i, x in enumerate(inputs)]
    t_out, g_out = torch_fn(*t_in), genesis_fn(*g_in)
    cots = []
    for i, (t, g) in enumerate(zip(t_out, g_out)):
        assert g.dtype is to_genesis(t[:0].detach().cpu()).dtype
        # half types: torch rounds every intermediate, genesis only the result; compare at
        # the dtype's default tolerance after rounding the float32 torch value once
        assert_close(to_torch(g), cpu(t))
        cots.append(_rand(t.shape, t.dtype, 10 + i))
    torch.autograd.backward(list(t_out), [c.to(td) for c in cots])
    genesis.autograd.backward(list(g_out), [to_genesis(c, device) for c in cots])
    for i in grads_of:
        assert_close(to_torch(g_in[i].grad), cpu(t_in[i].grad))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_swiglu(device, dtype):
    gate, up = _rand((3, 5, 64), torch.float32, 0), _rand((3, 5, 64), torch.float32, 1)

    def ref(g, u):  # float32 math rounded once, as the fused op (torch's own for float32)
        return ((TF.silu(g.float()) * u.float()).to(dtype),)

    _check(device, ref, lambda g, u: (F.swiglu(g, u),), [gate.to(dtype), up.to(dtype)])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("with_weight", [True, False])
def test_add_rms_norm(device, dtype, with_weight):
    x, r = _rand((2, 7, 32), torch.float32, 0), _rand((2, 7, 32), torch.float32, 1)
    w = _rand((32,), torch.float32, 2)
    inputs = [x.to(dtype), r.to(dtype)] + ([w.to(dtype)] if with_weight else [])

    def ref(x, r, *w):
        h = x + r
        y = TF.rms_norm(h.float(), (32,), w[0].float() if w else None, 1e-6)
        return h, y.to(dtype)

    def got(x, r, *w):
        return F.add_rms_norm(x, r, (32,), w[0] if w else None, 1e-6)

    _check(device, ref, got, inputs)


def test_add_rms_norm_outputs_come_from_its_node():
    """Over one normalised dim the outputs are the fused node's own (no view nodes around
    it: the kernels take (*, N) as it is); over two dims they are views of its (*, N)."""
    x, r = genesis.randn(2, 3, 8, requires_grad=True), genesis.randn(2, 3, 8)
    h, y = F.add_rms_norm(x, r, (8,))
    assert h.grad_fn.name() == y.grad_fn.name() == "AddRMSNormBackward"
    h2, y2 = F.add_rms_norm(x, r, (3, 8), eps=1e-6)
    assert y2.grad_fn.name() == "ViewBackward" and tuple(y2.shape) == (2, 3, 8)
    tx, tr = (torch.tensor(t.tolist()) for t in (x, r))
    assert_close(to_torch(h2), tx + tr)
    assert_close(to_torch(y2), TF.rms_norm(tx + tr, (3, 8), None, 1e-6))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("batched_angles", [False, True])
def test_apply_rotary_emb(device, dtype, batched_angles):
    b, hq, hk, s, d = 2, 4, 2, 5, 16
    q, k = _rand((b, hq, s, d), dtype, 0), _rand((b, hk, s, d), dtype, 1)
    ang = _rand((b, s, d // 2) if batched_angles else (s, d // 2), torch.float32, 2)
    emb = torch.cat([ang, ang], dim=-1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)

    def rotate_half(x):
        return torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)

    def ref(q, k, c, sn):  # Hugging Face's apply_rotary_pos_emb in float32, rounded once
        c, sn = c.float().unsqueeze(-3), sn.float().unsqueeze(-3)
        q32, k32 = q.float(), k.float()
        return ((q32 * c + rotate_half(q32) * sn).to(dtype),
                (k32 * c + rotate_half(k32) * sn).to(dtype))

    _check(device, ref, F.apply_rotary_emb, [q, k, cos, sin], grads_of=(0, 1))


def test_apply_rotary_emb_differentiates_angles_and_checks_shapes():
    q, k = genesis.randn(1, 2, 3, 4, requires_grad=True), genesis.randn(1, 1, 3, 4)
    cos = genesis.randn(3, 4, requires_grad=True)
    qo, _ = F.apply_rotary_emb(q, k, cos, genesis.randn(3, 4))
    qo.sum().backward()
    assert cos.grad is not None and q.grad is not None
    with pytest.raises(RuntimeError, match=r"expected cos of size \[3, 4\]"):
        F.apply_rotary_emb(q, k, genesis.randn(3, 5), genesis.randn(3, 4))
    with pytest.raises(RuntimeError, match="head dim must be even"):
        F.apply_rotary_emb(genesis.randn(1, 1, 3, 3), genesis.randn(1, 1, 3, 3),
                           genesis.randn(3, 3), genesis.randn(3, 3))
    with pytest.raises(RuntimeError, match="same shape"):
        F.swiglu(genesis.randn(2, 3), genesis.randn(3, 2))
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.add_rms_norm(genesis.randn(2, 3), genesis.randn(2, 3), (4,))
