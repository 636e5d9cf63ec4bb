"""``genesis.optim.LBFGS`` against ``torch.optim.LBFGS`` on a small regularised least-squares
fit: same parameters after every ``step(closure)``, same iteration and evaluation counts,
with fixed steps and with the strong-Wolfe line search.

The problem is convex: on one that diverges (fixed unit steps on a non-convex fit) both
run away and float32 rounding differences (torch keeps some scalars as float32 0-d
tensors, genesis as Python floats) grow without bound, which would test nothing."""

from __future__ import annotations

import pytest
import torch
from device_params import to_genesis, to_torch
from torch.testing import assert_close

import genesis
import genesis.optim as goptim


def _problem(lib, dtype, seed=0):
    """Parameters and a closure-maker for ``mean((x @ w + b - y)**2) + 0.1 * sum(w**4)``."""
    gen = torch.Generator().manual_seed(seed)
    tdt = {"float64": torch.float64, "float32": torch.float32}[dtype]
    data = [torch.randn(s, generator=gen, dtype=tdt) for s in [(8, 3), (8, 2), (3, 2), (2,)]]
    if lib is torch:
        x, y, w, b = (t.clone() for t in data)
        w.requires_grad_(), b.requires_grad_()
    else:
        x, y = to_genesis(data[0]), to_genesis(data[1])
        w, b = to_genesis(data[2], requires_grad=True), to_genesis(data[3], requires_grad=True)

    def make_closure(opt, calls):
        def closure():
            calls.append(1)
            opt.zero_grad()
            loss = ((x @ w + b - y) ** 2).mean() + 0.1 * (w**4).sum()
            loss.backward()
            return loss
        return closure

    return [w, b], make_closure


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kwargs", [
    {},
    {"lr": 0.5, "max_iter": 4},
    {"history_size": 3, "max_iter": 10},
    {"line_search_fn": "strong_wolfe"},
    {"line_search_fn": "strong_wolfe", "history_size": 2, "max_iter": 6, "lr": 0.8},
    {"max_iter": 30, "max_eval": 12, "tolerance_change": 1e-5},
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "defaults")
def test_matches_torch_step_for_step(kwargs, dtype):
    g_params, g_make = _problem(genesis, dtype)
    t_params, t_make = _problem(torch, dtype)
    g_opt, t_opt = goptim.LBFGS(g_params, **kwargs), torch.optim.LBFGS(t_params, **kwargs)
    g_calls, t_calls = [], []
    g_closure, t_closure = g_make(g_opt, g_calls), t_make(t_opt, t_calls)
    for _ in range(3):
        g_loss, t_loss = g_opt.step(g_closure), t_opt.step(t_closure)
        assert_close(to_torch(g_loss), t_loss.detach())
        for gp, tp in zip(g_params, t_params):
            assert_close(to_torch(gp), tp.detach())
        # (float32: near convergence, a stopping test at 1e-7 or 1e-9 can fall either way
        # of its threshold by a rounding; the parameters agree all the same)
        assert dtype == "float32" or len(g_calls) == len(t_calls)
    if dtype == "float32":
        return
    g_state, t_state = g_opt.state[g_params[0]], t_opt.state[t_params[0]]
    assert g_state["n_iter"] == t_state["n_iter"]
    assert g_state["func_evals"] == t_state["func_evals"]
    assert len(g_state["old_dirs"]) == len(t_state["old_dirs"])


def _rosenbrock(lib, start):
    xy = (lib.tensor(start, dtype=lib.float64) if lib is torch
          else genesis.tensor(start, dtype=genesis.float64)).requires_grad_()

    def make_closure(opt, calls):
        def closure():
            calls.append(1)
            opt.zero_grad()
            x, y = xy[0::2], xy[1::2]
            loss = ((1 - x) ** 2 + 100 * (y - x * x) ** 2).sum()
            loss.backward()
            return loss
        return closure

    return [xy], make_closure


@pytest.mark.parametrize("line_search_fn,lr", [
    (None, 0.01), (None, 1.0),  # (fixed steps of 30 diverge: nothing to compare)
    ("strong_wolfe", 0.01), ("strong_wolfe", 1.0), ("strong_wolfe", 30.0),
])  # tiny first steps make the line search extrapolate, huge ones make it zoom
def test_rosenbrock_matches_torch(line_search_fn, lr):
    """The line search's extrapolation and zoom phases both run on the Rosenbrock valley."""
    start = [-1.5, 2.0, 0.5, -0.5, 1.2, 1.0]
    (g_xy,), g_make = _rosenbrock(genesis, start)
    (t_xy,), t_make = _rosenbrock(torch, start)
    kwargs = {"lr": lr, "line_search_fn": line_search_fn, "max_iter": 8}
    g_opt, t_opt = goptim.LBFGS([g_xy], **kwargs), torch.optim.LBFGS([t_xy], **kwargs)
    g_calls, t_calls = [], []
    g_closure, t_closure = g_make(g_opt, g_calls), t_make(t_opt, t_calls)
    for _ in range(4):
        g_opt.step(g_closure)
        t_opt.step(t_closure)
        assert_close(to_torch(g_xy), t_xy.detach())
        assert len(g_calls) == len(t_calls)


def test_stops_at_once_on_a_zero_gradient():
    w = genesis.zeros(3, requires_grad=True)
    opt = goptim.LBFGS([w])
    calls = []

    def closure():
        calls.append(1)
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == 0.0
    assert calls == [1] and w.tolist() == [0.0, 0.0, 0.0]


def test_solves_a_quadratic_and_refuses_groups():
    target = genesis.tensor([1.0, -2.0, 3.0], dtype=genesis.float64)
    w = genesis.zeros(3, dtype=genesis.float64, requires_grad=True)
    opt = goptim.LBFGS([w], line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = ((w - target) ** 2 * genesis.tensor([1.0, 10.0, 100.0],
                                                   dtype=genesis.float64)).sum()
        loss.backward()
        return loss

    calls = []
    opt.register_step_pre_hook(lambda o, args, kw: calls.append("pre"))
    opt.register_step_post_hook(lambda o, args, kw: calls.append("post"))
    opt.step(closure)
    assert_close(to_torch(w), to_torch(target), atol=1e-5, rtol=0)  # (converged to 1e-7 in g)
    assert calls == ["pre", "post"]
    a, b = genesis.zeros(1, requires_grad=True), genesis.zeros(1, requires_grad=True)
    with pytest.raises(ValueError, match="parameter groups"):
        goptim.LBFGS([{"params": [a]}, {"params": [b]}])
