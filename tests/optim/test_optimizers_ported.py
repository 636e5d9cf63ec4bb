"""The optimizers added for porting (Adadelta, Adamax, NAdam, RAdam, Rprop, ASGD, LBFGS)
against torch.optim: same weights and gradients, same steps, same parameters after every
step at torch's default tolerances; their defaults, state dicts and argument errors."""

from __future__ import annotations

import inspect
import itertools

import pytest
import torch
from device_params import cpu, to_genesis, to_torch, torch_device
from torch.testing import assert_close

import genesis
import genesis.optim as goptim

STEPS = 12
SHAPES = [(4, 3), (5,), ()]
NAMES = ["Adadelta", "Adamax", "NAdam", "RAdam", "Rprop", "ASGD"]


def _configs():
    grid = {
        "Adadelta": [{"lr": lr, "rho": rho, "weight_decay": wd, "maximize": mx}
                     for lr, rho, wd, mx in itertools.product(
                         [1.0, 0.5], [0.9, 0.5], [0.0, 0.1], [False, True])],
        "Adamax": [{"lr": 0.01, "betas": b, "weight_decay": wd, "maximize": mx}
                   for b, wd, mx in itertools.product(
                       [(0.9, 0.999), (0.8, 0.9)], [0.0, 0.1], [False, True])],
        "NAdam": [{"lr": 0.01, "weight_decay": wd, "momentum_decay": md,
                   "decoupled_weight_decay": dec, "maximize": mx}
                  for wd, md, dec, mx in itertools.product(
                      [0.0, 0.1], [4e-3, 0.1], [False, True], [False, True])],
        # betas[1] = 0.9 makes rho_t pass 5 at step 6: both branches run in 12 steps
        "RAdam": [{"lr": 0.01, "betas": b, "weight_decay": wd, "decoupled_weight_decay": dec,
                   "maximize": mx}
                  for b, wd, dec, mx in itertools.product(
                      [(0.9, 0.999), (0.8, 0.9)], [0.0, 0.1], [False, True], [False, True])],
        "Rprop": [{"lr": lr, "etas": etas, "step_sizes": sizes, "maximize": mx}
                  for lr, etas, sizes, mx in itertools.product(
                      [0.01, 0.1], [(0.5, 1.2), (0.3, 1.5)], [(1e-6, 50), (1e-3, 0.05)],
                      [False, True])],
        "ASGD": [{"lr": 0.05, "lambd": lam, "alpha": a, "t0": t0, "weight_decay": wd,
                  "maximize": mx}
                 for lam, a, t0, wd, mx in itertools.product(
                     [1e-4, 0.1], [0.75], [1e6, 4], [0.0, 0.1], [False, True])],
    }
    for name, configs in grid.items():
        for kw in configs:
            yield pytest.param(name, kw, id=f"{name}-" + ",".join(f"{k}={v}" for k, v in
                                                                  kw.items()))


def _data(dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    weights = [torch.randn(s, generator=gen, dtype=dtype) for s in SHAPES]
    grads = [[torch.randn(s, generator=gen, dtype=dtype) for s in SHAPES] for _ in range(STEPS)]
    return weights, grads


def _compare_states(g_opt, t_opt):
    """Same state keys and values; genesis keeps scalar state (step, mu_product, eta, mu)
    as Python numbers where torch keeps 0-d tensors."""
    g_sd, t_sd = g_opt.state_dict(), t_opt.state_dict()
    assert sorted(g_sd["state"]) == sorted(t_sd["state"])
    for index, t_state in t_sd["state"].items():
        g_state = g_sd["state"][index]
        assert set(g_state) == set(t_state)
        for key, t_val in t_state.items():
            if t_val.ndim == 0 and not isinstance(g_state[key], genesis.Tensor):
                assert g_state[key] == pytest.approx(t_val.item(), rel=1e-6), key
            else:
                assert_close(to_torch(g_state[key]), cpu(t_val))
    for g_group, t_group in zip(g_sd["param_groups"], t_sd["param_groups"]):
        for key, value in g_group.items():
            assert t_group[key] == value, key


def _run_both(name, kwargs, weights, grads, device, groups=None):
    td = torch_device(device)
    g_params = [to_genesis(w, device, requires_grad=True) for w in weights]
    t_params = [w.clone().to(td).requires_grad_(True) for w in weights]
    g_opt = getattr(goptim, name)(groups(g_params) if groups else g_params, **kwargs)
    t_opt = getattr(torch.optim, name)(groups(t_params) if groups else t_params, **kwargs)
    for i, step_grads in enumerate(grads):
        for j, (gp, tp, g) in enumerate(zip(g_params, t_params, step_grads)):
            skip = groups is not None and (i + j) % 3 == 0  # some steps lack some gradients
            gp.grad = None if skip else to_genesis(g, device)
            tp.grad = None if skip else g.clone().to(td)
        g_opt.step()
        t_opt.step()
        for gp, tp in zip(g_params, t_params):
            assert_close(to_torch(gp), cpu(tp))
    return g_opt, t_opt


@pytest.mark.parametrize("name,kwargs", list(_configs()))
def test_matches_torch_step_for_step(name, kwargs, device):
    weights, grads = _data()
    g_opt, t_opt = _run_both(name, kwargs, weights, grads, device)
    _compare_states(g_opt, t_opt)


@pytest.mark.parametrize("name", NAMES)
def test_float64_and_param_groups_match_torch(name, device):
    weights, grads = _data(torch.float64, seed=1)

    def groups(ps):
        return [{"params": ps[:1], "lr": 0.02}, {"params": ps[1:]}]

    g_opt, t_opt = _run_both(name, {}, weights, grads, device, groups)
    assert g_opt.param_groups[0]["lr"] == 0.02
    _compare_states(g_opt, t_opt)


@pytest.mark.parametrize("name", NAMES + ["LBFGS"])
def test_defaults_are_torchs(name):
    ours = inspect.signature(getattr(goptim, name)).parameters
    theirs = inspect.signature(getattr(torch.optim, name)).parameters
    for arg, param in ours.items():
        assert arg in theirs, arg
        assert param.default == theirs[arg].default, arg
        assert param.kind == theirs[arg].kind, arg


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip_and_loading_torchs(name):
    weights, grads = _data(seed=3)
    params = [to_genesis(w, requires_grad=True) for w in weights]
    t_params = [w.clone().requires_grad_(True) for w in weights]
    opt = getattr(goptim, name)(params)
    t_opt = getattr(torch.optim, name)(t_params)
    for step_grads in grads[:5]:
        for p, tp, g in zip(params, t_params, step_grads):
            p.grad, tp.grad = to_genesis(g), g.clone()
        opt.step()
        t_opt.step()
    # a fresh genesis optimizer resumed from genesis's state dict, another from torch's
    resumed = getattr(goptim, name)([to_genesis(to_torch(p), requires_grad=True)
                                     for p in params])
    resumed.load_state_dict(opt.state_dict())
    from_torch = getattr(goptim, name)([to_genesis(to_torch(p), requires_grad=True)
                                        for p in params])
    t_sd = t_opt.state_dict()
    from_torch.load_state_dict({
        "state": {i: {k: to_genesis(v) for k, v in s.items()} for i, s in t_sd["state"].items()},
        "param_groups": t_sd["param_groups"]})
    for step_grads in grads[5:]:
        for o in (resumed, from_torch):
            for p, g in zip(o.param_groups[0]["params"], step_grads):
                p.grad = to_genesis(g)
            o.step()
        for tp, g in zip(t_params, step_grads):
            tp.grad = g.clone()
        t_opt.step()
    for o in (resumed, from_torch):
        for p, tp in zip(o.param_groups[0]["params"], t_params):
            assert_close(to_torch(p), tp.detach())


@pytest.mark.parametrize("name,kwargs,match", [
    ("Adadelta", {"lr": -1.0}, "Invalid learning rate"),
    ("Adadelta", {"rho": 1.5}, "Invalid rho value"),
    ("Adadelta", {"eps": -1.0}, "Invalid epsilon value"),
    ("Adamax", {"betas": (1.0, 0.9)}, "beta parameter at index 0"),
    ("Adamax", {"weight_decay": -1.0}, "Invalid weight_decay value"),
    ("NAdam", {"momentum_decay": -1.0}, "Invalid momentum_decay value"),
    ("NAdam", {"betas": (0.9, 1.0)}, "beta parameter at index 1"),
    ("RAdam", {"eps": -1.0}, "Invalid epsilon value"),
    ("Rprop", {"etas": (1.5, 1.2)}, "Invalid eta values: 1.5, 1.2"),
    ("ASGD", {"weight_decay": -0.1}, "Invalid weight_decay value"),
    ("LBFGS", {"lr": -1.0}, "Invalid learning rate"),
    ("LBFGS", {"line_search_fn": "armijo"}, "strong_wolfe"),
])
def test_bad_arguments_raise_like_torch(name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        getattr(goptim, name)([genesis.zeros(2, requires_grad=True)], **kwargs)
    if name != "LBFGS" or "lr" in kwargs:  # (torch checks line_search_fn only in step)
        with pytest.raises(ValueError, match=match):
            getattr(torch.optim, name)([torch.zeros(2, requires_grad=True)], **kwargs)
