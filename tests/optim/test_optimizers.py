"""genesis.optim optimizers against torch.optim: same weights, same gradients, same steps.

Every optimizer runs 12 steps from identical initial weights with identical gradients
(drawn once with torch, copied into both); after every step the parameters, and at the end
the whole state, must equal torch's at torch's default float tolerances.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from device_params import cpu, to_torch, torch_device
from device_params import to_genesis as _to_genesis
from torch.testing import assert_close

import genesis
import genesis.optim as goptim

STEPS = 12
SHAPES = [(4, 3), (5,), ()]


def to_genesis(t: torch.Tensor, requires_grad: bool = False, device: str = "cpu"):
    return _to_genesis(t, device, requires_grad)


def _configs():
    sgd = [{"lr": 0.1}]
    for momentum, dampening, nesterov, wd, maximize in itertools.product(
            [0.0, 0.9], [0.0, 0.3], [False, True], [0.0, 0.05], [False, True]):
        if nesterov and (momentum == 0 or dampening != 0):
            continue
        sgd.append({"lr": 0.05, "momentum": momentum, "dampening": dampening, "nesterov": nesterov,
                        "weight_decay": wd, "maximize": maximize})
    adam = [{"lr": 0.01, "betas": b, "eps": eps, "weight_decay": wd, "amsgrad": ams, "maximize": mx}
            for b, eps, wd, ams, mx in itertools.product(
                [(0.9, 0.999), (0.8, 0.95)], [1e-8], [0.0, 0.1], [False, True], [False, True])]
    adam.append({"lr": 0.01, "eps": 1e-3})
    adamw = [{"lr": 0.01, "weight_decay": wd, "amsgrad": ams, "maximize": mx}
             for wd, ams, mx in itertools.product([0.0, 0.01, 0.3], [False, True], [False, True])]
    rms = [{"lr": 0.01, "alpha": a, "eps": eps, "weight_decay": wd, "momentum": m,
            "centered": c, "maximize": mx}
           for a, eps, wd, m, c, mx in itertools.product(
               [0.99, 0.9], [1e-8], [0.0, 0.1], [0.0, 0.9], [False, True], [False, True])]
    adagrad = [{"lr": 0.1, "lr_decay": d, "weight_decay": wd, "initial_accumulator_value": iv,
                    "eps": eps, "maximize": mx}
               for d, wd, iv, eps, mx in itertools.product(
                   [0.0, 0.01], [0.0, 0.1], [0.0, 0.5], [1e-10, 1e-3], [False, True])]
    for name, configs in [("SGD", sgd), ("Adam", adam), ("AdamW", adamw), ("RMSprop", rms),
                          ("Adagrad", adagrad)]:
        for kw in configs:
            label = ",".join(f"{k}={v}" for k, v in kw.items())
            yield pytest.param(name, kw, id=f"{name}-{label}")


def _data(dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    weights = [torch.randn(s, generator=gen, dtype=dtype) for s in SHAPES]
    grads = [[torch.randn(s, generator=gen, dtype=dtype) for s in SHAPES] for _ in range(STEPS)]
    return weights, grads


def _compare_states(g_opt, t_opt, device="cpu"):
    kind = genesis.device(device).type
    for state in g_opt.state.values():  # the state lives with the parameters
        for value in state.values():
            if isinstance(value, genesis.Tensor):
                assert value.device.type == kind
    g_sd, t_sd = g_opt.state_dict(), t_opt.state_dict()
    assert sorted(g_sd["state"]) == sorted(t_sd["state"])
    for index, t_state in t_sd["state"].items():
        g_state = g_sd["state"][index]
        assert set(g_state) == set(t_state), (g_state.keys(), t_state.keys())
        for key, t_val in t_state.items():
            if key == "step":
                assert g_state[key] == int(t_val.item())
            else:
                assert_close(to_torch(g_state[key]), cpu(t_val))
    for g_group, t_group in zip(g_sd["param_groups"], t_sd["param_groups"]):
        assert g_group["params"] == t_group["params"]
        for key, value in g_group.items():
            assert t_group[key] == value, key


@pytest.mark.parametrize("name,kwargs", list(_configs()))
def test_matches_torch_step_for_step(name, kwargs, device):
    weights, grads = _data()
    td = torch_device(device)
    g_params = [to_genesis(w, requires_grad=True, device=device) for w in weights]
    t_params = [w.clone().to(td).requires_grad_(True) for w in weights]
    g_opt = getattr(goptim, name)(g_params, **kwargs)
    t_opt = getattr(torch.optim, name)(t_params, **kwargs)
    for step_grads in grads:
        for gp, tp, g in zip(g_params, t_params, step_grads):
            gp.grad = to_genesis(g, device=device)
            tp.grad = g.clone().to(td)
        g_opt.step()
        t_opt.step()
        for gp, tp in zip(g_params, t_params):
            assert_close(to_torch(gp), cpu(tp))
    _compare_states(g_opt, t_opt, device)


@pytest.mark.parametrize("name,kwargs", [
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
    ("Adam", {"lr": 0.01, "amsgrad": True}),
    ("AdamW", {"lr": 0.01}),
    ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.5}),
    ("Adagrad", {"lr": 0.1, "lr_decay": 0.01}),
])
def test_float64_params_match_torch(name, kwargs, device):
    weights, grads = _data(torch.float64, seed=1)
    td = torch_device(device)
    g_params = [to_genesis(w, requires_grad=True, device=device) for w in weights]
    t_params = [w.clone().to(td).requires_grad_(True) for w in weights]
    g_opt = getattr(goptim, name)(g_params, **kwargs)
    t_opt = getattr(torch.optim, name)(t_params, **kwargs)
    for step_grads in grads:
        for gp, tp, g in zip(g_params, t_params, step_grads):
            gp.grad, tp.grad = to_genesis(g, device=device), g.clone().to(td)
        g_opt.step()
        t_opt.step()
    for gp, tp in zip(g_params, t_params):
        assert gp.dtype is genesis.float64
        assert_close(to_torch(gp), cpu(tp))
    _compare_states(g_opt, t_opt, device)


def test_param_groups_with_own_options_and_missing_grads(device):
    weights, grads = _data(seed=2)
    td = torch_device(device)
    g_params = [to_genesis(w, requires_grad=True, device=device) for w in weights]
    t_params = [w.clone().to(td).requires_grad_(True) for w in weights]

    def groups(ps):
        return [{"params": [ps[0]], "lr": 0.1, "momentum": 0.5},
                {"params": ps[1:], "weight_decay": 0.1}]

    g_opt = goptim.SGD(groups(g_params), lr=0.01, momentum=0.9)
    t_opt = torch.optim.SGD(groups(t_params), lr=0.01, momentum=0.9)
    for i, step_grads in enumerate(grads):
        for j, (gp, tp, g) in enumerate(zip(g_params, t_params, step_grads)):
            skip = (i + j) % 3 == 0  # some parameters have no gradient on some steps
            gp.grad = None if skip else to_genesis(g, device=device)
            tp.grad = None if skip else g.clone().to(td)
        g_opt.step()
        t_opt.step()
    for gp, tp in zip(g_params, t_params):
        assert_close(to_torch(gp), cpu(tp))
    _compare_states(g_opt, t_opt, device)
    assert g_opt.param_groups[0]["lr"] == 0.1 and g_opt.param_groups[1]["lr"] == 0.01
    assert g_opt.param_groups[0]["momentum"] == 0.5


def test_add_param_group_and_errors():
    a = genesis.zeros(3, requires_grad=True)
    b = genesis.zeros(2, requires_grad=True)
    opt = goptim.Adam([a], lr=0.1)
    opt.add_param_group({"params": b, "lr": 0.5})
    assert opt.param_groups[1]["params"] == [b]
    assert opt.param_groups[1]["betas"] == (0.9, 0.999)  # filled from defaults
    assert opt.param_groups[1]["lr"] == 0.5
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(ValueError, match="empty parameter list"):
        goptim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="iterable"):
        goptim.SGD(a, lr=0.1)
    with pytest.raises(TypeError, match="ordered"):
        goptim.SGD({a}, lr=0.1)
    with pytest.raises(ValueError, match="non-leaf"):
        goptim.SGD([a * 2], lr=0.1)
    with pytest.raises(ValueError, match="duplicate"):
        goptim.SGD([a, a], lr=0.1)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        goptim.Adam([b], lr=-1.0)
    with pytest.raises(ValueError, match="beta"):
        goptim.Adam([b], betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="Nesterov"):
        goptim.SGD([b], lr=0.1, nesterov=True)


def test_zero_grad():
    a = genesis.zeros(3, requires_grad=True)
    opt = goptim.SGD([a], lr=0.1)
    a.grad = genesis.ones(3)
    opt.zero_grad(set_to_none=False)
    assert a.grad is not None and a.grad.tolist() == [0.0, 0.0, 0.0]
    opt.zero_grad()
    assert a.grad is None


def test_step_runs_closure_with_grad_enabled_and_returns_loss():
    w = genesis.tensor([1.0, -2.0, 3.0], requires_grad=True)
    opt = goptim.SGD([w], lr=0.25)

    def closure():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    with genesis.no_grad():  # step re-enables grad for the closure
        loss = opt.step(closure)
    assert loss.item() == 14.0
    assert w.tolist() == [0.5, -1.0, 1.5]  # w - 0.25 * 2w
    assert not w.grad.requires_grad


def test_update_runs_without_recording_graph():
    w = genesis.tensor([1.0, 2.0], requires_grad=True)
    opt = goptim.Adam([w], lr=0.1)
    w.grad = genesis.tensor([0.5, -0.5])
    opt.step()
    assert w.grad_fn is None and w.is_leaf and w.requires_grad
    assert opt.state[w]["exp_avg"].requires_grad is False


def test_adagrad_state_exists_before_first_step():
    a = genesis.zeros(2, requires_grad=True)
    opt = goptim.Adagrad([a], initial_accumulator_value=0.25)
    assert opt.state[a]["step"] == 0
    assert opt.state[a]["sum"].tolist() == [0.25, 0.25]
    b = genesis.zeros(3, requires_grad=True)
    opt.add_param_group({"params": [b], "initial_accumulator_value": 0.5})
    assert opt.state[b]["sum"].tolist() == [0.5, 0.5, 0.5]


def _snapshot(sd):
    """A deep copy of a state dict's values (tensors as numpy) for exact comparison."""
    if isinstance(sd, dict):
        return {k: _snapshot(v) for k, v in sd.items()}
    if isinstance(sd, (list, tuple)):
        return type(sd)(_snapshot(v) for v in sd)
    if isinstance(sd, genesis.Tensor):
        return ("tensor", str(sd.dtype), sd.device.type, tuple(sd.shape),
                sd.detach().cpu().numpy().tobytes())
    return sd


@pytest.mark.parametrize("name,kwargs", [
    ("SGD", {"lr": 0.1, "momentum": 0.9}),
    ("Adam", {"lr": 0.01, "amsgrad": True}),
    ("AdamW", {"lr": 0.01, "betas": (0.8, 0.9)}),
    ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.9}),
    ("Adagrad", {"lr": 0.1}),
])
def test_state_dict_round_trips_exactly(name, kwargs, device):
    weights, grads = _data(seed=3)
    cls = getattr(goptim, name)

    def make():
        ps = [to_genesis(w, requires_grad=True, device=device) for w in weights]
        return ps, cls([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.05}], **kwargs)

    ref_params, ref = make()
    params, opt = make()
    for step_grads in grads[:5]:
        for ps, o in ((ref_params, ref), (params, opt)):
            for p, g in zip(ps, step_grads):
                p.grad = to_genesis(g, device=device)
            o.step()
    saved = _snapshot(opt.state_dict())
    assert list(opt.state_dict()["state"]) == [0, 1, 2]
    assert [g["params"] for g in opt.state_dict()["param_groups"]] == [[0], [1, 2]]

    # A fresh optimizer over copies of the weights, loaded from the state dict.
    resumed_params = [to_genesis(to_torch(p), requires_grad=True, device=device) for p in params]
    resumed = cls([{"params": resumed_params[:1]}, {"params": resumed_params[1:]}], **kwargs)
    resumed.load_state_dict(opt.state_dict())
    assert _snapshot(resumed.state_dict()) == saved
    assert resumed.param_groups[1]["lr"] == 0.05
    assert resumed.param_groups[0]["params"] == resumed_params[:1]
    # The loaded state is a copy: stepping the resumed optimizer leaves the source alone.
    for step_grads in grads[5:]:
        for ps, o in ((ref_params, ref), (resumed_params, resumed)):
            for p, g in zip(ps, step_grads):
                p.grad = to_genesis(g, device=device)
            o.step()
    assert _snapshot(opt.state_dict()) == saved
    for a, b in zip(ref_params, resumed_params):
        assert a.detach().cpu().numpy().tobytes() == b.detach().cpu().numpy().tobytes()
    assert _snapshot(ref.state_dict()) == _snapshot(resumed.state_dict())


def test_load_state_dict_casts_floating_state_to_param_dtype():
    a = genesis.zeros(2, dtype=genesis.float64, requires_grad=True)
    opt = goptim.Adam([a], lr=0.1)
    sd = {"state": {0: {"step": 3, "exp_avg": genesis.ones(2), "exp_avg_sq": genesis.ones(2)}},
          "param_groups": [dict(opt.state_dict()["param_groups"][0])]}
    opt.load_state_dict(sd)
    assert opt.state[a]["exp_avg"].dtype is genesis.float64
    assert opt.state[a]["step"] == 3


def test_load_state_dict_accepts_a_tensor_step_counter(device):
    weights, grads = _data(seed=5)
    td = torch_device(device)
    t_params = [w.clone().to(td).requires_grad_(True) for w in weights]
    t_opt = torch.optim.Adam(t_params, lr=0.01)
    g_params = [to_genesis(w, requires_grad=True, device=device) for w in weights]
    g_opt = goptim.Adam(g_params, lr=0.01)
    for step_grads in grads[:3]:
        for tp, g in zip(t_params, step_grads):
            tp.grad = g.clone().to(td)
        t_opt.step()
    # torch's state dict, tensors converted (to CPU genesis tensors: loading moves them to
    # the parameters' device, as torch's does): its step counters are 0-d float tensors
    t_sd = t_opt.state_dict()
    g_opt.load_state_dict({
        "state": {i: {k: to_genesis(v) for k, v in s.items()} for i, s in t_sd["state"].items()},
        "param_groups": [{k: v for k, v in grp.items()} for grp in t_sd["param_groups"]]})
    with genesis.no_grad():
        for gp, tp in zip(g_params, t_params):
            gp.copy_(to_genesis(tp, device=device))
    assert g_opt.state[g_params[0]]["step"] == 3
    for step_grads in grads[3:]:
        for gp, tp, g in zip(g_params, t_params, step_grads):
            gp.grad, tp.grad = to_genesis(g, device=device), g.clone().to(td)
        g_opt.step()
        t_opt.step()
    for gp, tp in zip(g_params, t_params):
        assert_close(to_torch(gp), cpu(tp))


def test_load_state_dict_rejects_mismatched_groups():
    a = genesis.zeros(2, requires_grad=True)
    b = genesis.zeros(2, requires_grad=True)
    opt = goptim.SGD([a, b], lr=0.1)
    other = goptim.SGD([{"params": [a]}, {"params": [b]}], lr=0.1)
    with pytest.raises(ValueError, match="different number of parameter groups"):
        opt.load_state_dict(other.state_dict())
    small = goptim.SGD([a], lr=0.1)
    with pytest.raises(ValueError, match="doesn't match the size"):
        opt.load_state_dict(small.state_dict())


def test_repr_lists_groups():
    opt = goptim.AdamW([genesis.zeros(1, requires_grad=True)], lr=0.5)
    text = repr(opt)
    assert text.startswith("AdamW (") and "lr: 0.5" in text and "Parameter Group 0" in text


def test_step_hooks():
    w = genesis.zeros(2, requires_grad=True)
    opt = goptim.SGD([w], lr=1.0)
    calls = []
    pre = opt.register_step_pre_hook(lambda o, args, kw: calls.append(("pre", w.tolist())))
    opt.register_step_post_hook(lambda o, args, kw: calls.append(("post", w.tolist())))
    w.grad = genesis.ones(2)
    opt.step()
    assert calls == [("pre", [0.0, 0.0]), ("post", [-1.0, -1.0])]
    pre.remove()
    opt.step()
    assert calls[-1] == ("post", [-2.0, -2.0]) and len(calls) == 3
