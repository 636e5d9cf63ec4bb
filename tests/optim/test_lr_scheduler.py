"""genesis.optim.lr_scheduler against torch.optim.lr_scheduler: identical lr sequences."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.optim.lr_scheduler as tsched

import genesis
import genesis.optim as goptim
from genesis.optim import lr_scheduler as gsched

LRS = (0.1, 0.03)  # two parameter groups with different base rates


def _optimizers(opt_name="SGD", **opt_kw):
    """The same two-group optimizer in genesis and in torch."""
    opt_kw = {"momentum": 0.9, **opt_kw} if opt_name == "SGD" else opt_kw
    g = getattr(goptim, opt_name)(
        [{"params": [genesis.zeros(2, requires_grad=True)], "lr": lr} for lr in LRS], **opt_kw)
    t = getattr(torch.optim, opt_name)(
        [{"params": [torch.zeros(2, requires_grad=True)], "lr": lr} for lr in LRS], **opt_kw)
    return g, t


def _sequence(sched, opt, n, metrics=None, extra_keys=()):
    """[(last lrs, extra group values)] for the initial state and n steps."""
    out = [(list(sched.get_last_lr()), [tuple(g[k] for k in extra_keys)
                                        for g in opt.param_groups])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "step order" warnings
        for i in range(n):
            opt.step()
            if metrics is None:
                sched.step()
            else:
                sched.step(metrics[i])
            out.append((list(sched.get_last_lr()),
                        [tuple(g[k] for k in extra_keys) for g in opt.param_groups]))
    return out


CASES = [
    ("LambdaLR", {"lr_lambda": lambda e: 0.95**e}),
    ("StepLR", {"step_size": 3}),
    ("StepLR", {"step_size": 4, "gamma": 0.5}),
    ("MultiStepLR", {"milestones": [2, 5, 5, 9], "gamma": 0.3}),
    ("ExponentialLR", {"gamma": 0.9}),
    ("CosineAnnealingLR", {"T_max": 10}),
    ("CosineAnnealingLR", {"T_max": 7, "eta_min": 0.001}),  # past T_max: the cosine goes on
    ("LinearLR", {}),
    ("LinearLR", {"start_factor": 0.05, "end_factor": 0.5, "total_iters": 9}),
    ("OneCycleLR", {"max_lr": 1.0, "total_steps": 40}),
    ("OneCycleLR", {"max_lr": [0.5, 2.0], "total_steps": 40, "pct_start": 0.25,
                        "anneal_strategy": "linear"}),
    ("OneCycleLR", {"max_lr": 1.0, "total_steps": 40, "three_phase": True}),
    ("OneCycleLR", {"max_lr": 1.0, "epochs": 4, "steps_per_epoch": 10, "three_phase": True,
                    "anneal_strategy": "linear", "div_factor": 10.0, "final_div_factor": 100.0}),
    ("OneCycleLR", {"max_lr": 1.0, "total_steps": 40, "cycle_momentum": False}),
    ("MultiplicativeLR", {"lr_lambda": lambda e: 0.9 if e % 2 else 0.97}),
    ("ConstantLR", {}),
    ("ConstantLR", {"factor": 0.25, "total_iters": 7}),
    ("PolynomialLR", {"total_iters": 12, "power": 2.0}),
    ("PolynomialLR", {}),
    ("CosineAnnealingWarmRestarts", {"T_0": 5}),
    ("CosineAnnealingWarmRestarts", {"T_0": 3, "T_mult": 2, "eta_min": 0.002}),
]


@pytest.mark.parametrize("name,kwargs", CASES,
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_sequence_equals_torch(name, kwargs):
    g_opt, t_opt = _optimizers()
    n = 39 if name == "OneCycleLR" else 30
    extra = ("momentum",) if name == "OneCycleLR" else ()
    g = _sequence(getattr(gsched, name)(g_opt, **kwargs), g_opt, n, extra_keys=extra)
    t = _sequence(getattr(tsched, name)(t_opt, **kwargs), t_opt, n, extra_keys=extra)
    assert g == t  # exact: same formulas in the same order


def test_one_cycle_cycles_adam_beta1_like_torch():
    g_opt, t_opt = _optimizers("Adam")
    kw = {"max_lr": 0.01, "total_steps": 25, "base_momentum": 0.8, "max_momentum": 0.9}
    g = _sequence(gsched.OneCycleLR(g_opt, **kw), g_opt, 24, extra_keys=("betas",))
    t = _sequence(tsched.OneCycleLR(t_opt, **kw), t_opt, 24, extra_keys=("betas",))
    assert g == t


def test_one_cycle_errors():
    g_opt, _ = _optimizers()
    with pytest.raises(ValueError, match="total_steps"):
        gsched.OneCycleLR(g_opt, max_lr=1.0)
    with pytest.raises(ValueError, match="anneal_strategy"):
        gsched.OneCycleLR(g_opt, max_lr=1.0, total_steps=5, anneal_strategy="exp")
    sched = gsched.OneCycleLR(g_opt, max_lr=1.0, total_steps=3)
    for _ in range(3):
        sched.step()
    with pytest.raises(ValueError, match="Tried to step 4 times"):
        sched.step()
    no_momentum = goptim.Adagrad([genesis.zeros(1, requires_grad=True)])
    with pytest.raises(ValueError, match="momentum"):
        gsched.OneCycleLR(no_momentum, max_lr=1.0, total_steps=5)


METRICS = [5.0, 4.0, 4.0, 4.0, 4.0, 3.99995, 3.9, 3.9, 3.9, 3.9, 3.9, 4.5, 4.5, 2.0, 2.0, 2.0,
           2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("mode", ["min", "max"])
@pytest.mark.parametrize("threshold_mode", ["rel", "abs"])
@pytest.mark.parametrize("kw", [{"patience": 2}, {"patience": 1, "cooldown": 2, "factor": 0.5},
                                {"patience": 0, "min_lr": [0.01, 0.02], "threshold": 0.1},
                                {"patience": 0, "min_lr": 0.005, "eps": 1e-3, "factor": 0.3}])
def test_reduce_on_plateau_equals_torch(mode, threshold_mode, kw):
    metrics = METRICS if mode == "min" else [-m for m in METRICS]
    g_opt, t_opt = _optimizers()
    g = _sequence(gsched.ReduceLROnPlateau(g_opt, mode=mode, threshold_mode=threshold_mode, **kw),
                  g_opt, len(metrics), metrics)
    t = _sequence(tsched.ReduceLROnPlateau(t_opt, mode=mode, threshold_mode=threshold_mode, **kw),
                  t_opt, len(metrics), metrics)
    assert g == t


def test_reduce_on_plateau_accepts_a_tensor_metric_and_validates():
    g_opt, _ = _optimizers()
    sched = gsched.ReduceLROnPlateau(g_opt, patience=0)
    sched.step(genesis.tensor(1.0))
    sched.step(genesis.tensor(2.0))
    assert sched.get_last_lr() == [0.1 * 0.1, 0.03 * 0.1]
    with pytest.raises(ValueError, match="Factor"):
        gsched.ReduceLROnPlateau(g_opt, factor=1.0)
    with pytest.raises(ValueError, match="mode"):
        gsched.ReduceLROnPlateau(g_opt, mode="up")
    with pytest.raises(ValueError, match="threshold mode"):
        gsched.ReduceLROnPlateau(g_opt, threshold_mode="pct")


def _sequential(mod, opt, variant):
    if variant == 0:
        first = mod.LinearLR(opt, start_factor=0.1, total_iters=5)
        second = mod.CosineAnnealingLR(opt, T_max=20, eta_min=1e-4)
        return mod.SequentialLR(opt, [first, second], milestones=[5])
    a = mod.ExponentialLR(opt, gamma=0.9)
    b = mod.StepLR(opt, step_size=2, gamma=0.5)
    c = mod.MultiStepLR(opt, milestones=[3, 4], gamma=0.1)
    return mod.SequentialLR(opt, [a, b, c], milestones=[4, 9])


@pytest.mark.parametrize("variant", [0, 1])
def test_sequential_equals_torch(variant):
    g_opt, t_opt = _optimizers()
    g = _sequence(_sequential(gsched, g_opt, variant), g_opt, 30)
    t = _sequence(_sequential(tsched, t_opt, variant), t_opt, 30)
    assert g == t


def test_chained_equals_torch():
    def make(mod, opt):
        return mod.ChainedScheduler([mod.ConstantLR(opt, factor=0.1, total_iters=3),
                                     mod.ExponentialLR(opt, gamma=0.9),
                                     mod.MultiStepLR(opt, [4, 8], gamma=0.5)])

    g_opt, t_opt = _optimizers()
    assert _sequence(make(gsched, g_opt), g_opt, 15) == _sequence(make(tsched, t_opt), t_opt, 15)
    with pytest.raises(ValueError, match="ReduceLROnPlateau"):
        gsched.ChainedScheduler([gsched.ReduceLROnPlateau(g_opt)])


def test_warm_restarts_fractional_epochs_equal_torch():
    g_opt, t_opt = _optimizers()
    gs = gsched.CosineAnnealingWarmRestarts(g_opt, T_0=4, T_mult=2, eta_min=0.001)
    ts = tsched.CosineAnnealingWarmRestarts(t_opt, T_0=4, T_mult=2, eta_min=0.001)
    for epoch in [0.25, 0.5, 3.75, 4.0, 6.5, 11.9, 12.0, 30.2]:
        gs.step(epoch)
        ts.step(epoch)
        assert gs.get_last_lr() == ts.get_last_lr()


def test_sequential_errors():
    g_opt, _ = _optimizers()
    other, _ = _optimizers()
    a = gsched.StepLR(g_opt, step_size=2)
    with pytest.raises(ValueError, match="one more"):
        gsched.SequentialLR(g_opt, [a], milestones=[3])
    with pytest.raises(ValueError, match="same optimizer"):
        gsched.SequentialLR(g_opt, [a, gsched.StepLR(other, step_size=2)], milestones=[3])
    with pytest.raises(ValueError, match="ReduceLROnPlateau"):
        gsched.SequentialLR(g_opt, [a, gsched.ReduceLROnPlateau(g_opt)], milestones=[3])


@pytest.mark.parametrize("name,kwargs", [
    ("StepLR", {"step_size": 3, "gamma": 0.5}), ("MultiStepLR", {"milestones": [2, 6, 6]}),
    ("ExponentialLR", {"gamma": 0.8}), ("CosineAnnealingLR", {"T_max": 8, "eta_min": 0.01}),
    ("LinearLR", {"start_factor": 0.2, "total_iters": 6}),
    ("ConstantLR", {"factor": 0.5, "total_iters": 4}), ("PolynomialLR", {"total_iters": 9}),
    ("CosineAnnealingWarmRestarts", {"T_0": 4, "T_mult": 2}),
])
def test_closed_form_step_with_epoch_equals_torch(name, kwargs):
    g_opt, t_opt = _optimizers()
    gs, ts = getattr(gsched, name)(g_opt, **kwargs), getattr(tsched, name)(t_opt, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epoch in [3, 7, 1, 12, 5]:
            gs.step(epoch)
            ts.step(epoch)
            assert gs.get_last_lr() == ts.get_last_lr()


def test_warmup_cosine_helper():
    g_opt, _ = _optimizers()
    base = [g["lr"] for g in g_opt.param_groups]
    warmup, total, ratio = 4, 20, 0.1
    sched = gsched.get_cosine_schedule_with_warmup(g_opt, warmup, total, min_lr_ratio=ratio)
    assert isinstance(sched, gsched.LambdaLR)
    seen = [sched.get_last_lr()]
    for _ in range(total + 3):
        g_opt.step()
        sched.step()
        seen.append(sched.get_last_lr())
    for step, lrs in enumerate(seen):
        if step < warmup:
            factor = step / warmup
        else:
            progress = min(1.0, (step - warmup) / (total - warmup))
            factor = ratio + (1 - ratio) * 0.5 * (1 + math.cos(math.pi * progress))
        assert lrs == pytest.approx([b * factor for b in base], rel=1e-12, abs=0)
    assert seen[0] == [0.0, 0.0]
    assert seen[warmup] == pytest.approx(base)
    assert seen[total] == pytest.approx([b * ratio for b in base])
    assert seen[-1] == seen[total]  # flat after the end
    # the same lambda in torch's LambdaLR gives the same sequence
    _, t_opt = _optimizers()
    t = tsched.LambdaLR(t_opt, sched.lr_lambdas[0])
    torch_seen = [t.get_last_lr()]
    for _ in range(total + 3):
        t_opt.step()
        t.step()
        torch_seen.append(t.get_last_lr())
    assert torch_seen == seen
    with pytest.raises(ValueError):
        gsched.get_cosine_schedule_with_warmup(g_opt, 30, 20)


def _resume_case(make, n_before=7, n_after=9, metrics=None):
    """Run n_before steps, checkpoint (optimizer + scheduler), resume in new objects."""
    opt, _ = _optimizers()
    sched = make(opt)
    full = _sequence(sched, opt, n_before + n_after, metrics)

    opt2, _ = _optimizers()
    sched2 = make(opt2)
    head = _sequence(sched2, opt2, n_before, metrics)
    ckpt = {"optim": opt2.state_dict(), "sched": sched2.state_dict()}

    opt3, _ = _optimizers()
    sched3 = make(opt3)
    opt3.load_state_dict(ckpt["optim"])
    sched3.load_state_dict(ckpt["sched"])
    assert sched3.get_last_lr() == head[-1][0]
    tail = _sequence(sched3, opt3, n_after, None if metrics is None else metrics[n_before:])
    assert head + tail[1:] == full
    return ckpt


@pytest.mark.parametrize("make", [
    lambda o: gsched.StepLR(o, step_size=3),
    lambda o: gsched.MultiStepLR(o, milestones=[2, 8, 8]),
    lambda o: gsched.ExponentialLR(o, gamma=0.9),
    lambda o: gsched.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
    lambda o: gsched.LinearLR(o, start_factor=0.1, total_iters=10),
    lambda o: gsched.OneCycleLR(o, max_lr=1.0, total_steps=20, three_phase=True),
    lambda o: gsched.SequentialLR(o, [gsched.LinearLR(o, start_factor=0.1, total_iters=4),
                                      gsched.CosineAnnealingLR(o, T_max=12)], milestones=[4]),
    lambda o: gsched.get_cosine_schedule_with_warmup(o, 3, 16),
    lambda o: gsched.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2),
    lambda o: gsched.ChainedScheduler([gsched.ConstantLR(o, 0.5, total_iters=9),
                                       gsched.PolynomialLR(o, total_iters=12)]),
], ids=["step", "multistep", "exp", "cosine", "linear", "onecycle", "sequential", "warmup",
        "restarts", "chained"])
def test_state_dict_resume_continues_the_same_sequence(make):
    _resume_case(make)


def test_reduce_on_plateau_state_dict_resume():
    _resume_case(lambda o: gsched.ReduceLROnPlateau(o, patience=1, cooldown=1), 9, 12,
                 metrics=METRICS[:21])


def test_state_dict_has_no_optimizer_and_lambdas_are_dropped():
    g_opt, _ = _optimizers()
    sched = gsched.LambdaLR(g_opt, lambda e: 1.0 / (e + 1))
    sd = sched.state_dict()
    assert "optimizer" not in sd and sd["lr_lambdas"] == [None, None]
    assert sd["base_lrs"] == list(LRS) and sd["last_epoch"] == 0

    class Factor:
        def __init__(self, k):
            self.k = k

        def __call__(self, epoch):
            return self.k**epoch

    sched = gsched.LambdaLR(g_opt, [Factor(0.5), Factor(0.9)])
    sd = sched.state_dict()
    assert sd["lr_lambdas"] == [{"k": 0.5}, {"k": 0.9}]
    other = gsched.LambdaLR(g_opt, [Factor(1.0), Factor(1.0)])
    other.load_state_dict(sd)
    assert [f.k for f in other.lr_lambdas] == [0.5, 0.9]


def test_resuming_requires_initial_lr():
    g_opt, _ = _optimizers()
    with pytest.raises(KeyError, match="initial_lr"):
        gsched.StepLR(g_opt, step_size=2, last_epoch=3)


def test_scheduler_needs_an_optimizer():
    with pytest.raises(TypeError, match="is not an Optimizer"):
        gsched.StepLR(object(), step_size=2)
