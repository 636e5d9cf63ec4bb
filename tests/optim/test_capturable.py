"""Adam/AdamW with ``capturable=True``: the step count in a device tensor, the same update.

The capturable step computes its bias corrections from a 0-d float32 count on the
parameters' device (float64 math there, as the host does), so it must give the same bits as
the default step, on every path (per parameter, multi-tensor) and device. The CUDA graph
capture of a whole training step is tested in ``tests/cuda/test_graphs_training.py``.
"""

from __future__ import annotations

import pytest
import torch
from device_params import to_genesis as _to_genesis
from device_params import to_torch, torch_device
from torch.testing import assert_close

import genesis
import genesis.optim as goptim

STEPS = 6
SHAPES = [(4, 3), (5,), ()]
CONFIGS = [
    ("Adam", {}),
    ("Adam", {"amsgrad": True, "weight_decay": 0.1}),
    ("Adam", {"maximize": True, "betas": (0.8, 0.95)}),
    ("Adam", {"decoupled_weight_decay": True, "weight_decay": 0.1, "amsgrad": True}),
    ("AdamW", {}),
    ("AdamW", {"weight_decay": 0.3, "maximize": True}),
    ("AdamW", {"amsgrad": True, "eps": 1e-3}),
]


def _params(device, dtype=genesis.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [_to_genesis(torch.randn(s, generator=gen), device).to(dtype).requires_grad_()
            for s in SHAPES]


def _grads(device, dtype=genesis.float32):
    gen = torch.Generator().manual_seed(1)
    return [[_to_genesis(torch.randn(s, generator=gen), device).to(dtype) for s in SHAPES]
            for _ in range(STEPS)]


def _train(params, opt, grads):
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = g
        opt.step()
    return [to_torch(p.detach().float()) for p in params]


def _bits_equal(a, b):
    for x, y in zip(a, b):
        assert_close(x, y, rtol=0, atol=0)


@pytest.mark.parametrize("foreach", [False, True], ids=["single", "foreach"])
@pytest.mark.parametrize("name,kwargs", CONFIGS,
                         ids=[f"{n}-{k}" for n, k in CONFIGS])
def test_capturable_gives_the_same_bits(name, kwargs, foreach, device):
    cls = getattr(goptim, name)
    grads = _grads(device)
    runs = {}
    for capturable in (False, True):
        params = _params(device)
        opt = cls(params, lr=0.01, foreach=foreach, capturable=capturable, **kwargs)
        runs[capturable] = _train(params, opt, grads)
    _bits_equal(runs[True], runs[False])
    for p in params:
        step = opt.state[p]["step"]
        assert isinstance(step, genesis.Tensor) and step.shape == ()
        assert step.dtype is genesis.float32 and step.device == p.device
        assert float(step) == STEPS


@pytest.mark.parametrize("foreach", [False, True], ids=["single", "foreach"])
def test_capturable_bf16_params_give_the_same_bits(foreach, device):
    grads = _grads(device, genesis.bfloat16)
    runs = {}
    for capturable in (False, True):
        params = _params(device, genesis.bfloat16)
        opt = goptim.AdamW(params, lr=0.01, weight_decay=0.1, foreach=foreach,
                           capturable=capturable)
        runs[capturable] = _train(params, opt, grads)
    _bits_equal(runs[True], runs[False])


@pytest.mark.parametrize("foreach", [False, True], ids=["single", "foreach"])
def test_tensor_lr(foreach, device):
    # A 0-d lr read on the device: changed in place, the next step uses the new value.
    grads = _grads(device)
    lr = genesis.tensor(0.01, device=device)
    params = _params(device)
    opt = goptim.AdamW(params, lr=lr, foreach=foreach, capturable=True)
    ref_params = _params(device)
    ref = goptim.AdamW(ref_params, lr=float(lr), foreach=foreach)
    for i, step_grads in enumerate(grads):
        if i == 3:
            lr.fill_(0.002)
            ref.param_groups[0]["lr"] = float(lr)
        for ps, o in ((params, opt), (ref_params, ref)):
            for p, g in zip(ps, step_grads):
                p.grad = g
            o.step()
    _bits_equal([to_torch(p.detach()) for p in params],
                [to_torch(p.detach()) for p in ref_params])


def test_tensor_lr_errors():
    p = genesis.zeros(3, requires_grad=True)
    with pytest.raises(ValueError, match="capturable=False and foreach=True"):
        goptim.Adam([p], lr=genesis.tensor(0.1), foreach=True)
    with pytest.raises(ValueError, match="1-element"):
        goptim.AdamW([p], lr=genesis.tensor([0.1, 0.2]), capturable=True)


def test_capturable_matches_torch(device):
    # torch's capturable AdamW needs CUDA; its plain step computes the same update.
    td = torch_device(device)
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(s, generator=gen) for s in SHAPES]
    t_params = [w.clone().to(td).requires_grad_() for w in weights]
    t_opt = torch.optim.AdamW(t_params, lr=0.01, weight_decay=0.1, amsgrad=True,
                              capturable=td != "cpu")
    g_params = [_to_genesis(w, device, True) for w in weights]
    g_opt = goptim.AdamW(g_params, lr=0.01, weight_decay=0.1, amsgrad=True, capturable=True)
    for step_grads in _grads("cpu"):
        for tp, gp, g in zip(t_params, g_params, step_grads):
            tp.grad = to_torch(g).to(td)
            gp.grad = g.to(device)
        t_opt.step()
        g_opt.step()
        for tp, gp in zip(t_params, g_params):
            assert_close(to_torch(gp), tp.detach().cpu())


# ------------------------------------------------------------------ state dicts
def _snapshot(opt):
    return {i: {k: float(v) if k == "step" else to_torch(v) for k, v in s.items()}
            for i, s in opt.state_dict()["state"].items()}


@pytest.mark.parametrize("saved_capturable,loaded_capturable",
                         [(True, True), (True, False), (False, True)])
def test_state_dict_round_trip(saved_capturable, loaded_capturable, device):
    grads = _grads(device)
    params = _params(device)
    opt = goptim.AdamW(params, lr=0.01, amsgrad=True, capturable=saved_capturable)
    _train(params, opt, grads[:3])
    saved = _snapshot(opt)
    resumed_params = [p.detach().clone().requires_grad_() for p in params]
    resumed = goptim.AdamW(resumed_params, lr=0.01, amsgrad=True, capturable=loaded_capturable)
    sd = opt.state_dict()
    sd["param_groups"][0]["capturable"] = loaded_capturable  # as a user switching modes does
    resumed.load_state_dict(sd)
    step = resumed.state[resumed_params[0]]["step"]
    if loaded_capturable:
        assert isinstance(step, genesis.Tensor) and step.dtype is genesis.float32
        assert step.device == resumed_params[0].device and float(step) == 3
        if saved_capturable:  # a copy: stepping the resumed optimizer leaves the saved alone
            assert step is not opt.state[params[0]]["step"]
    else:
        assert step == 3 and isinstance(step, int)
    _bits_equal(_train(params, opt, grads[3:]), _train(resumed_params, resumed, grads[3:]))
    if saved_capturable and loaded_capturable:
        assert _snapshot(resumed).keys() == saved.keys()


def test_torch_state_dict_loads_into_a_capturable_optimizer(device):
    # torch saves 0-d float32 step tensors (on the CPU unless capturable/fused) and no
    # "capturable" key in old saves: the loaded group takes the optimizer's default.
    td = torch_device(device)
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(s, generator=gen) for s in SHAPES]
    t_params = [w.clone().to(td).requires_grad_() for w in weights]
    t_opt = torch.optim.Adam(t_params, lr=0.01)
    grads = _grads("cpu")
    for step_grads in grads[:3]:
        for tp, g in zip(t_params, step_grads):
            tp.grad = to_torch(g).to(td)
        t_opt.step()
    t_sd = t_opt.state_dict()
    groups = [{k: v for k, v in grp.items() if k != "capturable"}
              for grp in t_sd["param_groups"]]
    g_params = [_to_genesis(tp, device, True) for tp in t_params]
    g_opt = goptim.Adam(g_params, lr=0.01, capturable=True)
    g_opt.load_state_dict({
        "state": {i: {k: _to_genesis(v) for k, v in s.items()} for i, s in t_sd["state"].items()},
        "param_groups": groups})
    assert g_opt.param_groups[0]["capturable"] is True
    assert g_opt.state[g_params[0]]["step"].device == g_params[0].device
    for step_grads in grads[3:]:
        for tp, gp, g in zip(t_params, g_params, step_grads):
            tp.grad, gp.grad = to_torch(g).to(td), g.to(device)
        t_opt.step()
        g_opt.step()
    for tp, gp in zip(t_params, g_params):
        assert_close(to_torch(gp), tp.detach().cpu())
