"""Every fused op, through its public function, against torch on each device of ``device``.

On ``toy`` (a backend with no fused kernels registered) each op runs its row's composite
(``genesis.fused_op.call_fused``); on ``cpu`` softmax and attention run torch's kernels and the
rest their composites; on ``cuda`` the Triton kernels. The same tests check all three.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as TF
from device_params import to_genesis, to_torch
from torch.testing import assert_close

import genesis
import genesis.nn.functional as F
from genesis.fused_declarations import FUSED_OPS as CORE_FUSED_OPS
from genesis.nn.fused_declarations import FUSED_OPS as NN_FUSED_OPS


def _rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _check(device, torch_fn, genesis_fn, *inputs, seed=100):
    """Outputs of ``genesis_fn`` vs ``torch_fn`` (each a tensor or a tuple), then the inputs'
    gradients for one random output gradient."""
    t_in = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    g_in = [to_genesis(x, device, x.is_floating_point()) for x in inputs]
    t_out, g_out = torch_fn(*t_in), genesis_fn(*g_in)
    t_out = t_out if isinstance(t_out, tuple) else (t_out,)
    g_out = g_out if isinstance(g_out, tuple) else (g_out,)
    cots = [_rand(*t.shape, seed=seed + i) for i, t in enumerate(t_out)]
    for t, g in zip(t_out, g_out):
        assert_close(to_torch(g), t.detach())
    torch.autograd.backward(list(t_out), cots)
    genesis.autograd.backward(list(g_out), [to_genesis(c, device) for c in cots])
    for t, g in zip(t_in, g_in):
        if t.requires_grad:
            assert_close(to_torch(g.grad), t.grad)


def test_the_toy_backend_has_no_fused_kernel(device):
    if not device.startswith("toy"):
        pytest.skip("the toy device is the backend without kernels")
    backend = genesis.device(device).backend
    for row in CORE_FUSED_OPS + NN_FUSED_OPS:
        assert backend.kernel(row.name) is None and backend.kernel(row.backward_kernel) is None


# ------------------------------------------------------------------------ core's rows
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax(device, name):
    x = _rand(3, 5, 4)
    for dim in (0, 1, -1):
        _check(device, lambda t, d=dim: getattr(torch, name)(t, d),
               lambda g, d=dim: getattr(genesis, name)(g, d), x)


def test_layer_norm_and_rms_norm(device):
    x, w, b = _rand(4, 6, seed=1), _rand(6, seed=2), _rand(6, seed=3)
    _check(device, lambda *a: TF.layer_norm(a[0], (6,), a[1], a[2]),
           lambda *a: F.layer_norm(a[0], (6,), a[1], a[2]), x, w, b)
    _check(device, lambda x, w: TF.rms_norm(x, (6,), w, 1e-6),
           lambda x, w: F.rms_norm(x, (6,), w, 1e-6), x, w)


@pytest.mark.parametrize("norm", ["rms_norm", "layer_norm"])
def test_norm_gradients_under_create_graph_keep_the_inputs_dtypes(device, norm):
    # a bfloat16 input and float32 parameters (as under autocast): create_graph takes the
    # differentiable formula, which genesis.compile traces; it must give what the row's fused
    # backward gives, in the same dtypes (issue 30: rms_norm's gave x a float32 gradient)
    x = to_genesis(_rand(4, 6, seed=4), device).to(genesis.bfloat16).requires_grad_()
    params = [to_genesis(_rand(6, seed=5 + i), device, True) for i in range(2)]
    if norm == "rms_norm":
        params = params[:1]

    def grads(create_graph):
        y = getattr(F, norm)(x, (6,), *params)
        return genesis.autograd.grad(y.float().pow(2).sum(), [x, *params],
                                     create_graph=create_graph)

    plain, traced = grads(False), grads(True)
    assert [g.dtype for g in plain] == [genesis.bfloat16] + [genesis.float32] * len(params)
    genesis.testing.assert_close([g.detach() for g in traced], list(plain))


# -------------------------------------------------------------------------- nn's rows
def test_scaled_dot_product_attention(device):
    q, k, v = _rand(2, 4, 5, 8, seed=4), _rand(2, 2, 7, 8, seed=5), _rand(2, 2, 7, 8, seed=6)
    kw = {"is_causal": True, "enable_gqa": True}
    _check(device, lambda *a: TF.scaled_dot_product_attention(*a, **kw),
           lambda *a: F.scaled_dot_product_attention(*a, **kw), q, k, v)


def test_attention_decode(device):
    q, k_cache, v_cache = _rand(2, 4, 1, 8, seed=7), _rand(2, 2, 6, 8, seed=8), \
        _rand(2, 2, 6, 8, seed=9)
    lens = torch.tensor([6, 3])
    got = F.attention_decode(*(to_genesis(t, device) for t in (q, k_cache, v_cache, lens)))
    keys = k_cache.repeat_interleave(2, 1)  # (B, Hq, S, D)
    values = v_cache.repeat_interleave(2, 1)
    mask = (torch.arange(6) < lens[:, None])[:, None, None, :]  # (B, 1, 1, S)
    want = TF.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
    assert_close(to_torch(got), want)


def test_linear_cross_entropy(device):
    x, w = _rand(6, 5, seed=10), _rand(7, 5, seed=11)
    target = torch.tensor([0, 3, -100, 6, 1, 2])
    _check(device, lambda x, w, t: TF.cross_entropy(TF.linear(x, w), t, label_smoothing=0.1),
           lambda x, w, t: F.linear_cross_entropy(x, w, t, label_smoothing=0.1), x, w, target)


def test_swiglu_and_swiglu_linear(device):
    gate, up, w = _rand(3, 8, seed=12), _rand(3, 8, seed=13), _rand(4, 8, seed=14)
    _check(device, lambda g, u: TF.silu(g) * u, F.swiglu, gate, up)
    with genesis.no_grad():
        got = F.swiglu_linear(to_genesis(torch.cat([gate, up], -1), device),
                              to_genesis(w, device))
    assert_close(to_torch(got), TF.linear(TF.silu(gate) * up, w))


def test_add_rms_norm(device):
    x, r, w = _rand(3, 8, seed=15), _rand(3, 8, seed=16), _rand(8, seed=17)

    def reference(x, r, w):
        h = x + r
        return h, TF.rms_norm(h, (8,), w, 1e-6)

    _check(device, reference, lambda x, r, w: F.add_rms_norm(x, r, (8,), w, 1e-6), x, r, w)


def test_rotary(device):
    q, k = _rand(2, 4, 5, 8, seed=18), _rand(2, 2, 5, 8, seed=19)
    angles = _rand(5, 4, seed=20).repeat(1, 2)  # (S, D): each frequency for both halves
    cos, sin = angles.cos(), angles.sin()

    def reference(q, k):
        def rotate_half(x):
            return torch.cat([-x[..., 4:], x[..., :4]], -1)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    _check(device, reference, lambda q, k: F.apply_rotary_emb(
        q, k, to_genesis(cos, device), to_genesis(sin, device)), q, k)


@pytest.mark.parametrize("make", [
    lambda lib, ps: lib.optim.AdamW(ps, lr=0.1, weight_decay=0.1, amsgrad=True, foreach=True),
    lambda lib, ps: lib.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, foreach=True),
], ids=["adamw", "sgd"])
def test_optimizer_steps_and_clipping(device, make):
    values = [_rand(3, 4, seed=21), _rand(5, seed=22)]
    t_ps = [v.clone().requires_grad_() for v in values]
    g_ps = [to_genesis(v, device, True) for v in values]
    t_opt, g_opt = make(torch, t_ps), make(genesis, g_ps)
    for step in range(3):
        for i, (t, g) in enumerate(zip(t_ps, g_ps)):
            t.grad = _rand(*t.shape, seed=30 + 10 * step + i) * 3.0
            g.grad = to_genesis(t.grad, device)
        t_norm = torch.nn.utils.clip_grad_norm_(t_ps, 1.0, foreach=True)
        g_norm = genesis.nn.utils.clip_grad_norm_(g_ps, 1.0, foreach=True)
        assert_close(to_torch(g_norm), t_norm)
        inf_norm = genesis.nn.utils.get_total_norm([p.grad for p in g_ps], math.inf)
        assert_close(to_torch(inf_norm), torch.stack([p.grad.abs().max() for p in t_ps]).max())
        t_opt.step()
        g_opt.step()
    for t, g in zip(t_ps, g_ps):
        assert_close(to_torch(g), t.detach())


def test_grad_scaler_unscale(device):
    grads = [_rand(3, 4, seed=40), _rand(5, seed=41)]
    kind = genesis.device(device).type
    for bad in (None, math.inf):
        if bad is not None:
            grads[1][2] = bad
        params = [to_genesis(torch.zeros_like(g), device, True) for g in grads]
        for p, g in zip(params, grads):
            p.grad = to_genesis(g * 8.0, device)
        scaler = genesis.amp.GradScaler(kind, init_scale=8.0)
        opt = genesis.optim.SGD(params, lr=1.0)
        scaler.unscale_(opt)  # the amp_unscale_ row: unscale and flag inf/NaN on the device
        for p, g in zip(params, grads):
            assert_close(to_torch(p.grad), g)
        scaler.step(opt)  # skipped where the flag is set
        for p, g in zip(params, grads):
            assert_close(to_torch(p), torch.zeros_like(g) if bad else -g)
