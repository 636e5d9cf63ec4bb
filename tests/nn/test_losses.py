"""Losses against torch: forward and backward (input and, where differentiable, target)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as TF
from device_params import cpu, to_torch, torch_device
from device_params import to_genesis as _to_genesis
from torch.testing import assert_close

import genesis
import genesis.nn as nn
import genesis.nn.functional as F

REDUCTIONS = ["none", "mean", "sum"]


def to_genesis(t: torch.Tensor, device: str = "cpu"):
    g = _to_genesis(t, device)
    if t.requires_grad:
        g.requires_grad_(True)
    return g


def check(torch_fn, genesis_fn, *inputs, grads=None, device="cpu"):
    """Compare outputs and the gradients of the floating inputs flagged in ``grads``
    (default: every floating tensor input); genesis runs on ``device``, torch on
    ``torch_device(device)``."""
    td = torch_device(device)
    t_in = []
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            want = x.is_floating_point() and (grads is None or i in grads)
            x = x.detach().clone().to(td).requires_grad_(want)
        t_in.append(x)
    g_in = [to_genesis(x, device) if isinstance(x, torch.Tensor) else x for x in t_in]
    t_out, g_out = torch_fn(*t_in), genesis_fn(*g_in)
    assert tuple(g_out.shape) == tuple(t_out.shape)
    assert g_out.device.type == genesis.device(device).type
    assert_close(to_torch(g_out), cpu(t_out), equal_nan=True)
    if not t_out.requires_grad:
        return
    cot = torch.randn_like(t_out)
    t_out.backward(cot)
    g_out.backward(to_genesis(cot, device))
    for t, g in zip(t_in, g_in):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            assert_close(to_torch(g.grad), cpu(t.grad))


def index_target(shape, n_classes, ignore=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    t = torch.randint(0, n_classes, shape, generator=gen)
    if ignore is not None:
        t[torch.rand(shape, generator=gen) < 0.3] = ignore
        t.view(-1)[0] = 0  # at least one kept target
    return t


# ------------------------------------------------------------------------ cross entropy
CE_SHAPES = [((5, 7), (5,)), ((7,), ()), ((3, 4, 2, 5), (3, 2, 5))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("ignore", [None, 2])
@pytest.mark.parametrize("in_shape,t_shape", CE_SHAPES)
def test_cross_entropy_index_targets(in_shape, t_shape, ignore, smoothing, weighted, reduction,
                                     dtype, device):
    torch.manual_seed(0)
    n_classes = in_shape[0 if len(in_shape) == 1 else 1]
    x = torch.randn(in_shape, dtype=dtype)
    t = index_target(t_shape, n_classes, ignore if t_shape else None)
    w = torch.rand(n_classes, dtype=dtype) + 0.5 if weighted else None
    kw = {"reduction": reduction, "label_smoothing": smoothing}
    if ignore is not None:
        kw["ignore_index"] = ignore
    check(lambda x, t, w: TF.cross_entropy(x, t, w, **kw),
          lambda x, t, w: F.cross_entropy(x, t, w, **kw), x, t, w, grads={0}, device=device)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
@pytest.mark.parametrize("shape", [(4, 6), (6,), (2, 5, 3)])
def test_cross_entropy_probability_targets(shape, smoothing, weighted, reduction, device):
    torch.manual_seed(1)
    class_dim = 0 if len(shape) == 1 else 1
    x = torch.randn(shape, dtype=torch.float64)
    p = torch.randn(shape, dtype=torch.float64).softmax(class_dim)
    w = torch.rand(shape[class_dim], dtype=torch.float64) + 0.5 if weighted else None
    kw = {"reduction": reduction, "label_smoothing": smoothing}
    check(lambda x, p, w: TF.cross_entropy(x, p, w, **kw),
          lambda x, p, w: F.cross_entropy(x, p, w, **kw), x, p, w, grads={0, 1}, device=device)


def test_cross_entropy_all_ignored_is_nan_like_torch(device):
    x = torch.randn(3, 4)
    t = torch.full((3,), -100)
    check(TF.cross_entropy, F.cross_entropy, x, t, device=device)


def test_cross_entropy_module(device):
    torch.manual_seed(2)
    w = torch.rand(5) + 0.5
    x, t = torch.randn(6, 5), index_target((6,), 5, ignore=1)
    check(torch.nn.CrossEntropyLoss(weight=w.to(torch_device(device)), ignore_index=1,
                                    label_smoothing=0.1),
          nn.CrossEntropyLoss(weight=to_genesis(w, device), ignore_index=1, label_smoothing=0.1),
          x, t, device=device)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("in_shape,t_shape", CE_SHAPES)
def test_nll_loss(in_shape, t_shape, weighted, reduction, device):
    torch.manual_seed(3)
    n_classes = in_shape[0 if len(in_shape) == 1 else 1]
    x = torch.randn(in_shape, dtype=torch.float64).log_softmax(0 if len(in_shape) == 1 else 1)
    t = index_target(t_shape, n_classes, 3 if t_shape else None)
    w = torch.rand(n_classes, dtype=torch.float64) + 0.5 if weighted else None
    kw = {"reduction": reduction, "ignore_index": 3}
    check(lambda x, t, w: TF.nll_loss(x, t, w, **kw), lambda x, t, w: F.nll_loss(x, t, w, **kw),
          x, t, w, grads={0}, device=device)
    check(torch.nn.NLLLoss(reduction=reduction), nn.NLLLoss(reduction=reduction), x, t,
          device=device)


def test_classification_errors():
    x = genesis.randn(4, 5)
    with pytest.raises(ValueError, match=r"input batch_size \(4\) to match target batch_size "
                                         r"\(3\)"):
        F.cross_entropy(x, genesis.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"target of size \[4, 2\]"):
        F.nll_loss(x, genesis.zeros(4, 2, dtype=genesis.int64))
    with pytest.raises(ValueError, match=r"weight tensor .* 5 classes .* shape: \[4\]"):
        F.cross_entropy(x, genesis.tensor([0, 1, 2, 3]), weight=genesis.ones(4))
    with pytest.raises(ValueError, match=r"probability target of size \[4, 4\]"):
        F.cross_entropy(x, genesis.rand(4, 4))
    with pytest.raises(TypeError, match="integer"):
        F.nll_loss(x, genesis.tensor([True, False, True, True]))
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.cross_entropy(x, genesis.tensor([0, 1, 2, 3]), reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(x, genesis.tensor([0, 1, 2, 3]), label_smoothing=1.5)


# -------------------------------------------------------------------------- regression
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ["mse_loss", "l1_loss"])
def test_mse_l1(name, reduction, device):
    torch.manual_seed(4)
    x, y = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    check(lambda x, y: getattr(TF, name)(x, y, reduction=reduction),
          lambda x, y: getattr(F, name)(x, y, reduction=reduction), x, y, device=device)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0, 2.0])
def test_smooth_l1(beta, reduction, device):
    torch.manual_seed(5)
    x, y = torch.randn(5, 6, dtype=torch.float64) * 2, torch.randn(5, 6, dtype=torch.float64)
    check(lambda x, y: TF.smooth_l1_loss(x, y, reduction=reduction, beta=beta),
          lambda x, y: F.smooth_l1_loss(x, y, reduction=reduction, beta=beta), x, y, device=device)


def test_huber_and_regression_modules(device):
    torch.manual_seed(6)
    x, y = torch.randn(5, 6) * 2, torch.randn(5, 6)
    check(torch.nn.HuberLoss(delta=1.5), nn.modules.loss.HuberLoss(delta=1.5), x, y, device=device)
    check(torch.nn.MSELoss(reduction="sum"), nn.MSELoss(reduction="sum"), x, y, device=device)
    check(torch.nn.L1Loss(), nn.L1Loss(), x, y, device=device)
    check(torch.nn.SmoothL1Loss(beta=0.3), nn.SmoothL1Loss(beta=0.3), x, y, device=device)


def test_mse_broadcast_warns_like_torch():
    with pytest.warns(UserWarning, match="different to the input size"):
        F.mse_loss(genesis.randn(3, 4), genesis.randn(4))


# ------------------------------------------------------------------------------ binary
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(weighted, reduction, device):
    torch.manual_seed(7)
    p = torch.rand(4, 5, dtype=torch.float64) * 0.9 + 0.05
    t = torch.rand(4, 5, dtype=torch.float64)
    w = torch.rand(5, dtype=torch.float64) if weighted else None
    check(lambda p, t, w: TF.binary_cross_entropy(p, t, w, reduction=reduction),
          lambda p, t, w: F.binary_cross_entropy(p, t, w, reduction=reduction), p, t, w,
          grads={0, 1}, device=device)


def test_binary_cross_entropy_clamps_log_at_minus_100(device):
    p = torch.tensor([0.0, 1.0, 0.5, 1.0, 0.0], dtype=torch.float64)
    t = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    t_loss = TF.binary_cross_entropy(p, t, reduction="none")
    g_loss = F.binary_cross_entropy(to_genesis(p, device), to_genesis(t, device),
                                    reduction="none")
    assert_close(to_torch(g_loss), t_loss)  # [100, 100, log 2, 0, 0]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("pos_weight", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_bce_with_logits(weighted, pos_weight, reduction, device):
    torch.manual_seed(8)
    x = torch.randn(6, 3, dtype=torch.float64) * 4
    t = torch.rand(6, 3, dtype=torch.float64)
    w = torch.rand(3, dtype=torch.float64) if weighted else None
    pw = torch.rand(3, dtype=torch.float64) * 3 if pos_weight else None
    check(lambda x, t, w, pw: TF.binary_cross_entropy_with_logits(x, t, w, reduction=reduction,
                                                                  pos_weight=pw),
          lambda x, t, w, pw: F.binary_cross_entropy_with_logits(x, t, w, reduction=reduction,
                                                                 pos_weight=pw),
          x, t, w, pw, grads={0, 1}, device=device)


def test_bce_with_logits_is_stable_for_huge_logits(device):
    x = torch.tensor([-1000.0, -50.0, 0.0, 50.0, 1000.0])
    t = torch.tensor([0.0, 1.0, 0.5, 0.0, 1.0])
    check(lambda x, t: TF.binary_cross_entropy_with_logits(x, t, reduction="none"),
          lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction="none"), x, t,
          device=device)


def test_binary_modules(device):
    torch.manual_seed(9)
    p, t = torch.rand(4, 3) * 0.9 + 0.05, torch.rand(4, 3)
    w, pw = torch.rand(3), torch.rand(3) * 2
    td = torch_device(device)
    check(torch.nn.BCELoss(weight=w.to(td)), nn.BCELoss(weight=to_genesis(w, device)), p, t,
          device=device)
    check(torch.nn.BCEWithLogitsLoss(weight=w.to(td), pos_weight=pw.to(td)),
          nn.BCEWithLogitsLoss(weight=to_genesis(w, device), pos_weight=to_genesis(pw, device)),
          p, t, device=device)


def test_binary_errors():
    with pytest.raises(ValueError, match=r"target size \(\[4\]\).*input size \(\[4, 1\]\)"):
        F.binary_cross_entropy(genesis.rand(4, 1), genesis.rand(4))
    with pytest.raises(ValueError, match=r"\[3\].*\[3, 2\]"):
        F.binary_cross_entropy_with_logits(genesis.rand(3, 2), genesis.rand(3))


# ------------------------------------------------------------------------------ kl_div
@pytest.mark.parametrize("reduction", ["none", "batchmean", "sum", "mean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(reduction, log_target, device):
    torch.manual_seed(10)
    x = torch.randn(4, 6, dtype=torch.float64).log_softmax(1)
    p = torch.randn(4, 6, dtype=torch.float64).softmax(1)
    if not log_target:
        p[0, 2] = 0.0  # a zero-probability target contributes 0, not nan
    t = p.log() if log_target else p
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(lambda x, t: TF.kl_div(x, t, reduction=reduction, log_target=log_target),
              lambda x, t: F.kl_div(x, t, reduction=reduction, log_target=log_target), x, t,
              grads={0} if not log_target else {0, 1}, device=device)
        check(torch.nn.KLDivLoss(reduction=reduction, log_target=log_target),
              nn.KLDivLoss(reduction=reduction, log_target=log_target), x, t, grads={0},
              device=device)


def test_kl_div_mean_warns():
    with pytest.warns(UserWarning, match="batchmean"):
        F.kl_div(genesis.randn(2, 3), genesis.rand(2, 3), reduction="mean")


# ----------------------------------------------------------------- float64 gradcheck
def _f64(*shape, fn=None):
    t = genesis.randn(*shape, dtype=genesis.float64)
    t = fn(t) if fn is not None else t
    return t.detach().requires_grad_(True)


def test_gradcheck_float64():
    from genesis.testing import gradcheck

    genesis.manual_seed(0)
    target = genesis.tensor([1, 2, 0, 2])
    weight = genesis.rand(3, dtype=genesis.float64) + 0.5
    assert gradcheck(lambda x: F.cross_entropy(x, target, weight, ignore_index=0,
                                               label_smoothing=0.1), (_f64(4, 3),))
    probs = genesis.randn(4, 3, dtype=genesis.float64).softmax(1)
    assert gradcheck(lambda x, p: F.cross_entropy(x, p, label_smoothing=0.2),
                     (_f64(4, 3), probs.detach().requires_grad_(True)))
    p = _f64(5, fn=lambda t: t.sigmoid() * 0.8 + 0.1)
    assert gradcheck(lambda p, t: F.binary_cross_entropy(p, t),
                     (p, _f64(5, fn=lambda t: t.sigmoid())))
    pos = genesis.rand(5, dtype=genesis.float64) * 2
    assert gradcheck(lambda x, t: F.binary_cross_entropy_with_logits(x, t, pos_weight=pos),
                     (_f64(5), _f64(5, fn=lambda t: t.sigmoid())))
    assert gradcheck(lambda x, t: F.kl_div(x, t, reduction="batchmean"),
                     (_f64(2, 4, fn=lambda t: t.log_softmax(1)),
                      _f64(2, 4, fn=lambda t: t.softmax(1))))
    assert gradcheck(lambda x, y: F.smooth_l1_loss(x, y, beta=0.7), (_f64(6), _f64(6)))


@pytest.mark.filterwarnings("ignore:kl_div", "ignore:reduction")  # default "mean" warns
@pytest.mark.parametrize("name", ["cross_entropy", "mse_loss", "l1_loss", "smooth_l1_loss",
                                  "binary_cross_entropy_with_logits", "kl_div"])
def test_losses_run_in_float32_under_autocast(name):
    """Low-precision inputs are cast up first (torch's autocast policy for losses)."""
    torch.manual_seed(14)
    x = torch.randn(4, 5).bfloat16()
    other = {"cross_entropy": torch.tensor([0, 3, 1, 4]),
             "kl_div": torch.randn(4, 5).softmax(1).bfloat16()}.get(name, torch.rand(4, 5)
                                                                     .bfloat16())

    def to_g(t):
        return to_genesis(t.float()).to(genesis.bfloat16) if t.is_floating_point() \
            else to_genesis(t)

    with genesis.autocast("cpu", dtype=genesis.bfloat16):
        out = getattr(F, name)(to_g(x), to_g(other))
    assert out.dtype is genesis.float32
    expected = getattr(TF, name)(x.float(), other.float() if other.is_floating_point()
                                 else other)
    assert_close(to_torch(out), expected)
