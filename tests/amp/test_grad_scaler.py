"""genesis.amp.GradScaler against torch.amp.GradScaler: scales, skipped steps, state."""

from __future__ import annotations

import math

import pytest
import torch
from device_params import cpu, to_torch, torch_device
from device_params import to_genesis as _to_genesis
from torch.testing import assert_close

import genesis
import genesis.cuda
import genesis.optim as goptim
from genesis.amp import GradScaler, OptState


def to_genesis(t: torch.Tensor, requires_grad: bool = False, device: str = "cpu"):
    return _to_genesis(t, device, requires_grad)


def kind(device: str) -> str:
    """The scaler's device type for ``device`` ("cpu", "cuda")."""
    return genesis.device(device).type


def raw(g) -> bytes:
    return g.detach().to("cpu").numpy().tobytes()


SHAPES = [(3, 4), (4,)]


def _run_pair(bad_steps: dict, n: int = 14, device: str = "cpu", **scaler_kw):
    """Run genesis (on ``device``) and torch (on ``torch_device(device)``) side by side;
    gradients are "scaled" by each scaler's scale.

    ``bad_steps`` maps a step to the value (inf, -inf or nan) planted in one gradient.
    Returns both per-step histories of (scale, params).
    """
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(s, generator=gen) for s in SHAPES]
    grads = [[torch.randn(s, generator=gen) for s in SHAPES] for _ in range(n)]
    td = torch_device(device)
    histories = []
    for lib in ("genesis", "torch"):
        if lib == "genesis":
            params = [to_genesis(w, requires_grad=True, device=device) for w in weights]
            opt = goptim.Adam(params, lr=0.01)
            scaler = GradScaler(kind(device), **scaler_kw)
        else:
            params = [w.clone().to(td).requires_grad_(True) for w in weights]
            opt = torch.optim.Adam(params, lr=0.01)
            scaler = torch.amp.GradScaler(kind(td), **scaler_kw)
        history = []
        for i, step_grads in enumerate(grads):
            scaler.scale(params[0].sum())  # torch creates its scale tensor lazily here
            scale = scaler.get_scale()
            for j, (p, g) in enumerate(zip(params, step_grads)):
                g = g * scale
                if i in bad_steps and j == i % len(params):
                    g[0] = bad_steps[i]
                p.grad = to_genesis(g, device=device) if lib == "genesis" else g.to(td)
            scaler.step(opt)
            scaler.update()
            history.append((scaler.get_scale(),
                            [to_torch(p) if lib == "genesis" else cpu(p).clone()
                             for p in params]))
        histories.append((history, scaler.state_dict()))
    return histories


@pytest.mark.parametrize("kw", [
    {"init_scale": 2.0**16, "growth_interval": 3},
    {"init_scale": 1024.0, "growth_factor": 3.0, "backoff_factor": 0.25, "growth_interval": 2},
    {"init_scale": 3.0, "growth_factor": 1.5, "backoff_factor": 0.7, "growth_interval": 1},
])
def test_trajectory_matches_torch(kw, device):
    bad = {1: math.inf, 2: math.nan, 6: -math.inf, 11: math.nan}
    (g_hist, g_state), (t_hist, t_state) = _run_pair(bad, device=device, **kw)
    for step, ((g_scale, g_params), (t_scale, t_params)) in enumerate(zip(g_hist, t_hist)):
        assert g_scale == t_scale, f"scale differs after step {step}"
        for a, b in zip(g_params, t_params):
            assert_close(a, b)
    assert g_state == t_state


def test_skipped_step_leaves_params_and_state_bitwise_unchanged(device):
    w = genesis.tensor([[1.0, -2.0], [0.5, 3.0]], requires_grad=True, device=device)
    b = genesis.tensor([0.25, -0.75], requires_grad=True, device=device)
    opt = goptim.AdamW([w, b], lr=0.1, weight_decay=0.1)
    scaler = GradScaler(kind(device), init_scale=8.0)
    w.grad, b.grad = genesis.ones(2, 2, device=device) * 8.0, genesis.ones(2, device=device) * 8.0
    scaler.step(opt)
    scaler.update()
    before = [raw(w), raw(b), raw(opt.state[w]["exp_avg"]), raw(opt.state[w]["exp_avg_sq"])]
    step_before = opt.state[w]["step"]
    for bad in (math.inf, -math.inf, math.nan):
        w.grad = genesis.ones(2, 2, device=device)
        b.grad = genesis.tensor([1.0, bad], device=device)
        assert scaler.step(opt) is None
        scaler.update()
        after = [raw(w), raw(b), raw(opt.state[w]["exp_avg"]), raw(opt.state[w]["exp_avg_sq"])]
        assert after == before
        assert opt.state[w]["step"] == step_before
    assert scaler.get_scale() == 1.0  # 8 -> 4 -> 2 -> 1


def test_growth_after_interval_clean_steps_and_reset_by_inf(device):
    p = genesis.zeros(2, requires_grad=True, device=device)
    opt = goptim.SGD([p], lr=0.1)
    scaler = GradScaler(kind(device), init_scale=4.0, growth_interval=3)
    seen = []
    for i in range(10):
        p.grad = (genesis.tensor([math.inf, 0.0], device=device) if i == 4
                  else genesis.ones(2, device=device))
        scaler.step(opt)
        scaler.update()
        seen.append(scaler.get_scale())
    assert seen == [4.0, 4.0, 8.0, 8.0, 4.0, 4.0, 4.0, 8.0, 8.0, 8.0]
    assert scaler.state_dict()["_growth_tracker"] == 2


def test_growth_never_overflows_float32():
    scaler = GradScaler("cpu", init_scale=2.0**127, growth_interval=1)
    p = genesis.zeros(1, requires_grad=True)
    opt = goptim.SGD([p], lr=0.0)
    p.grad = genesis.zeros(1)
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 2.0**127


def test_end_to_end_with_backward_matches_unscaled_training(device):
    torch_w = torch.tensor([0.5, -1.0, 2.0])
    x = genesis.tensor([1.0, 2.0, 3.0], device=device)
    runs = []
    for use_scaler in (False, True):
        w = to_genesis(torch_w, requires_grad=True, device=device)
        opt = goptim.SGD([w], lr=0.01)
        scaler = GradScaler(kind(device), init_scale=2.0**10, enabled=use_scaler)
        for _ in range(5):
            opt.zero_grad()
            loss = ((w * x).sum() - 1.0) ** 2
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        runs.append(to_torch(w))
    assert_close(runs[0], runs[1])  # power-of-two scale: unscaling is exact


def test_unscale_then_step_unscales_once(device):
    p = genesis.zeros(3, requires_grad=True, device=device)
    opt = goptim.SGD([p], lr=1.0)
    scaler = GradScaler(kind(device), init_scale=16.0)
    p.grad = genesis.tensor([16.0, 32.0, -48.0], device=device)
    scaler.unscale_(opt)
    assert p.grad.tolist() == [1.0, 2.0, -3.0]
    scaler.step(opt)
    assert p.tolist() == [-1.0, -2.0, 3.0]
    with pytest.raises(RuntimeError, match="already been called since the last update"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match="after step"):
        scaler.unscale_(opt)
    scaler.update()
    p.grad = genesis.ones(3, device=device)
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        scaler.unscale_(opt)


def test_update_without_step_and_closure_errors():
    scaler = GradScaler("cpu")
    with pytest.raises(AssertionError, match="No inf checks"):
        scaler.update()
    opt = goptim.SGD([genesis.zeros(1, requires_grad=True)], lr=0.1)
    with pytest.raises(RuntimeError, match="Closure"):
        scaler.step(opt, closure=lambda: 0.0)


def test_fp16_gradients_are_refused():
    p = genesis.zeros(2, dtype=genesis.float16, requires_grad=True)
    opt = goptim.SGD([p], lr=0.1)
    p.grad = genesis.ones(2, dtype=genesis.float16)
    with pytest.raises(ValueError, match="FP16 gradients"):
        GradScaler("cpu").step(opt)


def test_two_optimizers_skip_independently_and_back_off_once(device):
    a = genesis.zeros(2, requires_grad=True, device=device)
    b = genesis.zeros(2, requires_grad=True, device=device)
    opt_a, opt_b = goptim.SGD([a], lr=1.0), goptim.SGD([b], lr=1.0)
    scaler = GradScaler(kind(device), init_scale=2.0)
    a.grad = genesis.tensor([2.0, 4.0], device=device)
    b.grad = genesis.tensor([math.nan, 2.0], device=device)
    scaler.step(opt_a)
    scaler.step(opt_b)
    assert a.tolist() == [-1.0, -2.0]  # its own gradients were finite
    assert b.tolist() == [0.0, 0.0]  # skipped
    scaler.update()
    assert scaler.get_scale() == 1.0


def test_scale_handles_nested_outputs(device):
    scaler = GradScaler(kind(device), init_scale=4.0)
    x, y = genesis.ones(2, device=device), genesis.full((1,), 2.0, device=device)
    out = scaler.scale([x, (y, x)])
    assert isinstance(out, list) and isinstance(out[1], tuple)
    assert out[0].tolist() == [4.0, 4.0] and out[1][0].tolist() == [8.0]
    with pytest.raises(ValueError):
        scaler.scale(3.0)


def test_disabled_scaler_is_a_pass_through():
    p = genesis.zeros(2, requires_grad=True)
    opt = goptim.SGD([p], lr=1.0)
    scaler = GradScaler("cpu", enabled=False)
    loss = genesis.ones(1)
    assert scaler.scale(loss) is loss
    assert scaler.get_scale() == 1.0 and not scaler.is_enabled()
    p.grad = genesis.ones(2)
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    assert p.tolist() == [-1.0, -1.0]
    assert scaler.state_dict() == {}


def test_state_dict_round_trip_and_errors():
    scaler = GradScaler("cpu", init_scale=256.0, growth_factor=4.0, backoff_factor=0.125,
                        growth_interval=7)
    p = genesis.zeros(1, requires_grad=True)
    opt = goptim.SGD([p], lr=0.1)
    for _ in range(3):
        p.grad = genesis.ones(1)
        scaler.step(opt)
        scaler.update()
    sd = scaler.state_dict()
    torch_keys = set(torch.amp.GradScaler("cpu").state_dict())
    assert set(sd) == torch_keys
    other = GradScaler("cpu")
    other.load_state_dict(sd)
    assert other.state_dict() == sd
    assert other.get_scale() == 256.0 and other.get_growth_interval() == 7
    with pytest.raises(RuntimeError, match="empty"):
        other.load_state_dict({})
    GradScaler("cpu", enabled=False).load_state_dict(sd)  # ignored when disabled


def test_stages_reset_by_update():
    p = genesis.zeros(1, requires_grad=True)
    opt = goptim.SGD([p], lr=0.1)
    scaler = GradScaler("cpu")
    p.grad = genesis.ones(1)
    scaler.unscale_(opt)
    assert scaler._per_optimizer_states[id(opt)]["stage"] is OptState.UNSCALED
    scaler.step(opt)
    scaler.update()
    assert scaler._per_optimizer_states == {}


def test_cuda_scaler_disables_itself_without_cuda():
    if genesis.cuda.is_available():
        pytest.skip("CUDA is available")
    with pytest.warns(UserWarning, match="CUDA is not available"):
        scaler = GradScaler()
    assert not scaler.is_enabled()


def test_invalid_arguments():
    with pytest.raises(ValueError, match="growth_factor"):
        GradScaler("cpu", growth_factor=1.0)
    with pytest.raises(ValueError, match="backoff_factor"):
        GradScaler("cpu", backoff_factor=1.5)
    with pytest.raises(ValueError, match="growth_interval"):
        GradScaler("cpu", growth_interval=0)


def test_inf_loss_skips_step_and_growth(device):
    """An infinite loss, scaled and backpropagated, skips the step and backs off the scale."""
    w = genesis.tensor([1.0, -2.0, 3.0], device=device).requires_grad_(True)
    opt = goptim.Adam([w], lr=0.1)
    scaler = GradScaler(kind(device), init_scale=16.0, growth_interval=2)
    assert scaler.is_enabled()
    history = []
    for i in range(6):
        loss = (w * w).sum()
        if i == 2:
            loss = loss * math.inf
        opt.zero_grad()
        scaler.scale(loss).backward()
        before = raw(w)
        scaler.step(opt)
        scaler.update()
        if i == 2:
            assert raw(w) == before  # skipped: bitwise unchanged
        history.append(scaler.get_scale())
    assert history == [16.0, 32.0, 16.0, 16.0, 32.0, 32.0]
    assert opt.state[w]["step"] == 5


def test_unscale_groups_by_dtype_and_flags_inf_in_any(device):
    # one fused unscale + inf check per (device, dtype) group; an inf in the second group
    # must still skip the step, and every grad is unscaled
    a = genesis.ones(3, device=device, requires_grad=True)
    b = genesis.ones(2, dtype=genesis.float64, device=device, requires_grad=True)
    opt = genesis.optim.SGD([a, b], lr=1.0)
    scaler = GradScaler(kind(device), init_scale=4.0)
    a.grad = genesis.full((3,), 8.0, device=device)
    b.grad = genesis.tensor([8.0, float("inf")], dtype=genesis.float64, device=device)
    scaler.unscale_(opt)
    assert a.grad.tolist() == [2.0, 2.0, 2.0]
    assert b.grad.tolist()[0] == 2.0
    scaler.step(opt)
    assert a.tolist() == [1.0, 1.0, 1.0]  # skipped
    scaler.update()
    assert scaler.get_scale() == 2.0
