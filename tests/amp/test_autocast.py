"""genesis.autocast: the per-op dtype policy, thread-locality, nesting, enabled=False.

The policy (genesis/autocast.py, and issue 3) follows torch's CUDA autocast lists on every
device: matmul-like ops run in the low dtype; softmax, norms, reductions, losses and
exp/log run in float32; other ops run in their inputs' dtype, and mixed inputs promote.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from device_params import to_torch, torch_device
from torch.testing import assert_close

import genesis
import genesis.nn.functional as F
from genesis import amp

LOW_DTYPES = [genesis.bfloat16, genesis.float16]
TORCH_DTYPE = {genesis.bfloat16: torch.bfloat16, genesis.float16: torch.float16,
               genesis.float32: torch.float32}


def randn(*shape, dtype=genesis.float32, seed=0):
    rng = np.random.default_rng(seed)
    t = genesis.from_numpy(rng.standard_normal(shape).astype(np.float32))
    return t if dtype is genesis.float32 else t.to(dtype)


def rn(device, *shape, dtype=genesis.float32, seed=0):
    """``randn`` on ``device``."""
    return randn(*shape, dtype=dtype, seed=seed).to(device)


def labels(device="cpu"):
    return genesis.tensor([0, 2, 1, 3], device=device)


def probs(device, dtype, seed=0):
    return rn(device, 4, 4, dtype=genesis.float32, seed=seed).sigmoid().to(dtype)


def kind(device: str) -> str:
    """The autocast device type of ``device`` ("cpu", "cuda")."""
    return genesis.device(device).type


# name -> fn(dtype of the inputs, device) -> output; the inputs are made in the given dtype on
# the given device.
LOWER = {
    "matmul": lambda d, dev: genesis.matmul(rn(dev, 4, 8, dtype=d), rn(dev, 8, 3, dtype=d, seed=1)),
    "@": lambda d, dev: rn(dev, 2, 4, 8, dtype=d) @ rn(dev, 8, 3, dtype=d, seed=1),
    "mm": lambda d, dev: genesis.mm(rn(dev, 4, 8, dtype=d), rn(dev, 8, 3, dtype=d, seed=1)),
    "bmm": lambda d, dev: genesis.bmm(rn(dev, 2, 4, 8, dtype=d), rn(dev, 2, 8, 3, dtype=d, seed=1)),
    "linear": lambda d, dev: F.linear(rn(dev, 4, 8, dtype=d), rn(dev, 3, 8, dtype=d, seed=1),
                                      rn(dev, 3, dtype=d, seed=2)),
    "conv1d": lambda d, dev: F.conv1d(rn(dev, 1, 2, 9, dtype=d),
                                      rn(dev, 3, 2, 3, dtype=d, seed=1)),
    "conv2d": lambda d, dev: F.conv2d(rn(dev, 1, 2, 6, 6, dtype=d),
                                      rn(dev, 3, 2, 3, 3, dtype=d, seed=1),
                                      rn(dev, 3, dtype=d, seed=2)),
    "scaled_dot_product_attention": lambda d, dev: F.scaled_dot_product_attention(
        rn(dev, 1, 2, 4, 8, dtype=d), rn(dev, 1, 2, 4, 8, dtype=d, seed=1),
        rn(dev, 1, 2, 4, 8, dtype=d, seed=2)),
}
FP32 = {
    # softmax family
    "softmax": lambda d, dev: F.softmax(rn(dev, 4, 8, dtype=d), dim=-1),
    "log_softmax": lambda d, dev: F.log_softmax(rn(dev, 4, 8, dtype=d), dim=-1),
    # norms
    "layer_norm": lambda d, dev: F.layer_norm(rn(dev, 4, 8, dtype=d), (8,)),
    "group_norm": lambda d, dev: F.group_norm(rn(dev, 2, 4, 3, dtype=d), 2),
    "norm": lambda d, dev: genesis.norm(rn(dev, 4, 8, dtype=d)),
    # reductions
    "sum": lambda d, dev: genesis.sum(rn(dev, 4, 8, dtype=d)),
    "sum(dim)": lambda d, dev: rn(dev, 4, 8, dtype=d).sum(dim=1),
    "mean": lambda d, dev: genesis.mean(rn(dev, 4, 8, dtype=d)),
    "prod": lambda d, dev: genesis.prod(rn(dev, 4, 8, dtype=d)),
    "cumsum": lambda d, dev: genesis.cumsum(rn(dev, 4, 8, dtype=d), 1),
    "logsumexp": lambda d, dev: genesis.logsumexp(rn(dev, 4, 8, dtype=d), 1),
    # losses
    "cross_entropy": lambda d, dev: F.cross_entropy(rn(dev, 4, 5, dtype=d), labels(dev)),
    "nll_loss": lambda d, dev: F.nll_loss(rn(dev, 4, 5, dtype=d), labels(dev)),
    "mse_loss": lambda d, dev: F.mse_loss(rn(dev, 4, 5, dtype=d), rn(dev, 4, 5, dtype=d, seed=1)),
    "l1_loss": lambda d, dev: F.l1_loss(rn(dev, 4, 5, dtype=d), rn(dev, 4, 5, dtype=d, seed=1)),
    "smooth_l1_loss": lambda d, dev: F.smooth_l1_loss(rn(dev, 4, 5, dtype=d),
                                                      rn(dev, 4, 5, dtype=d, seed=1)),
    "binary_cross_entropy_with_logits": lambda d, dev: F.binary_cross_entropy_with_logits(
        rn(dev, 4, 4, dtype=d), probs(dev, d, 1)),
    "kl_div": lambda d, dev: F.kl_div(F.log_softmax(rn(dev, 4, 4), -1).to(d), probs(dev, d, 1),
                                      reduction="batchmean"),
    # exp / log
    "exp": lambda d, dev: genesis.exp(rn(dev, 4, 8, dtype=d)),
    "log": lambda d, dev: genesis.log(probs(dev, d)),
    "log1p": lambda d, dev: genesis.log1p(probs(dev, d)),
    "expm1": lambda d, dev: genesis.expm1(rn(dev, 4, 8, dtype=d)),
    "log2": lambda d, dev: genesis.log2(probs(dev, d)),
    "pow": lambda d, dev: genesis.pow(probs(dev, d), 2.5),
    "rsqrt": lambda d, dev: genesis.rsqrt(probs(dev, d)),
    "softplus": lambda d, dev: F.softplus(rn(dev, 4, 8, dtype=d)),
}
SAME = {  # not in any list: computed in the inputs' dtype
    "rms_norm": lambda d, dev: F.rms_norm(rn(dev, 4, 8, dtype=d), (8,)),
    "add": lambda d, dev: rn(dev, 4, dtype=d) + rn(dev, 4, dtype=d, seed=1),
    "mul": lambda d, dev: rn(dev, 4, dtype=d) * 3.0,
    "relu": lambda d, dev: F.relu(rn(dev, 4, dtype=d)),
    "gelu": lambda d, dev: F.gelu(rn(dev, 4, dtype=d)),
    "silu": lambda d, dev: F.silu(rn(dev, 4, dtype=d)),
    "tanh": lambda d, dev: genesis.tanh(rn(dev, 4, dtype=d)),
    "sigmoid": lambda d, dev: genesis.sigmoid(rn(dev, 4, dtype=d)),
    "amax": lambda d, dev: genesis.amax(rn(dev, 4, 8, dtype=d), 1),
    "reshape": lambda d, dev: rn(dev, 4, 8, dtype=d).reshape(8, 4),
    "cat": lambda d, dev: genesis.cat([rn(dev, 2, dtype=d), rn(dev, 3, dtype=d, seed=1)]),
}
PROMOTE = {  # mixed low/float32 inputs: the widest type wins
    "add": lambda low, dev: rn(dev, 4, dtype=low) + rn(dev, 4, seed=1),
    "mul": lambda low, dev: rn(dev, 4, dtype=low) * rn(dev, 4, seed=1),
    "cat": lambda low, dev: genesis.cat([rn(dev, 2, dtype=low), rn(dev, 3, seed=1)]),
    "stack": lambda low, dev: genesis.stack([rn(dev, 3, dtype=low), rn(dev, 3, seed=1)]),
    "where": lambda low, dev: genesis.where(rn(dev, 3) > 0, rn(dev, 3, dtype=low),
                                            rn(dev, 3, seed=1)),
    "addcmul": lambda low, dev: genesis.addcmul(rn(dev, 3), rn(dev, 3, dtype=low, seed=1),
                                                rn(dev, 3, dtype=low, seed=2)),
}


# torch twins of the table entries, for checking the tables against torch's own CUDA autocast
# lists (torch CUDA only: torch's CPU autocast lists differ, and genesis follows the CUDA ones).
def _t(d, *shape, seed=0):
    return to_torch(randn(*shape, seed=seed)).to("cuda", TORCH_DTYPE[d])


def _tp(d, seed=0):
    return _t(genesis.float32, 4, 4, seed=seed).sigmoid().to(TORCH_DTYPE[d])


def _tl():
    return torch.tensor([0, 2, 1, 3], device="cuda")


# Where genesis's policy knowingly differs from torch's CUDA lists.
TORCH_DEVIATIONS = {
    "mean": "genesis's mean is built on sum (fp32 list), so low inputs give float32; torch "
            "has no autocast kernel for mean (aten::mean has none for AutocastCUDA), so it "
            "keeps the input dtype",
}
TF = torch.nn.functional
TORCH_TWINS = {
    "matmul": lambda d: torch.matmul(_t(d, 4, 8), _t(d, 8, 3, seed=1)),
    "@": lambda d: _t(d, 2, 4, 8) @ _t(d, 8, 3, seed=1),
    "mm": lambda d: torch.mm(_t(d, 4, 8), _t(d, 8, 3, seed=1)),
    "bmm": lambda d: torch.bmm(_t(d, 2, 4, 8), _t(d, 2, 8, 3, seed=1)),
    "linear": lambda d: TF.linear(_t(d, 4, 8), _t(d, 3, 8, seed=1), _t(d, 3, seed=2)),
    "conv1d": lambda d: TF.conv1d(_t(d, 1, 2, 9), _t(d, 3, 2, 3, seed=1)),
    "conv2d": lambda d: TF.conv2d(_t(d, 1, 2, 6, 6), _t(d, 3, 2, 3, 3, seed=1),
                                  _t(d, 3, seed=2)),
    "scaled_dot_product_attention": lambda d: TF.scaled_dot_product_attention(
        _t(d, 1, 2, 4, 8), _t(d, 1, 2, 4, 8, seed=1), _t(d, 1, 2, 4, 8, seed=2)),
    "softmax": lambda d: TF.softmax(_t(d, 4, 8), dim=-1),
    "log_softmax": lambda d: TF.log_softmax(_t(d, 4, 8), dim=-1),
    "layer_norm": lambda d: TF.layer_norm(_t(d, 4, 8), (8,)),
    "rms_norm": lambda d: TF.rms_norm(_t(d, 4, 8), (8,)),
    "group_norm": lambda d: TF.group_norm(_t(d, 2, 4, 3), 2),
    "norm": lambda d: torch.norm(_t(d, 4, 8)),
    "sum": lambda d: torch.sum(_t(d, 4, 8)),
    "sum(dim)": lambda d: _t(d, 4, 8).sum(dim=1),
    "mean": lambda d: torch.mean(_t(d, 4, 8)),
    "prod": lambda d: torch.prod(_t(d, 4, 8)),
    "cumsum": lambda d: torch.cumsum(_t(d, 4, 8), 1),
    "logsumexp": lambda d: torch.logsumexp(_t(d, 4, 8), 1),
    "cross_entropy": lambda d: TF.cross_entropy(_t(d, 4, 5), _tl()),
    "nll_loss": lambda d: TF.nll_loss(_t(d, 4, 5), _tl()),
    "mse_loss": lambda d: TF.mse_loss(_t(d, 4, 5), _t(d, 4, 5, seed=1)),
    "l1_loss": lambda d: TF.l1_loss(_t(d, 4, 5), _t(d, 4, 5, seed=1)),
    "smooth_l1_loss": lambda d: TF.smooth_l1_loss(_t(d, 4, 5), _t(d, 4, 5, seed=1)),
    "binary_cross_entropy_with_logits": lambda d: TF.binary_cross_entropy_with_logits(
        _t(d, 4, 4), _tp(d, 1)),
    "kl_div": lambda d: TF.kl_div(TF.log_softmax(_t(genesis.float32, 4, 4), -1).to(
        TORCH_DTYPE[d]), _tp(d, 1), reduction="batchmean"),
    "exp": lambda d: torch.exp(_t(d, 4, 8)),
    "log": lambda d: torch.log(_tp(d)),
    "log1p": lambda d: torch.log1p(_tp(d)),
    "expm1": lambda d: torch.expm1(_t(d, 4, 8)),
    "log2": lambda d: torch.log2(_tp(d)),
    "pow": lambda d: torch.pow(_tp(d), 2.5),
    "rsqrt": lambda d: torch.rsqrt(_tp(d)),
    "softplus": lambda d: TF.softplus(_t(d, 4, 8)),
    "add": lambda d: _t(d, 4) + _t(d, 4, seed=1),
    "mul": lambda d: _t(d, 4) * 3.0,
    "relu": lambda d: TF.relu(_t(d, 4)),
    "gelu": lambda d: TF.gelu(_t(d, 4)),
    "silu": lambda d: TF.silu(_t(d, 4)),
    "tanh": lambda d: torch.tanh(_t(d, 4)),
    "sigmoid": lambda d: torch.sigmoid(_t(d, 4)),
    "amax": lambda d: torch.amax(_t(d, 4, 8), 1),
    "reshape": lambda d: _t(d, 4, 8).reshape(8, 4),
    "cat": lambda d: torch.cat([_t(d, 2), _t(d, 3, seed=1)]),
}


@pytest.mark.cuda
@pytest.mark.parametrize("low", LOW_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("table,name", [
    pytest.param(t, n, marks=[pytest.mark.xfail(reason=TORCH_DEVIATIONS[n], strict=True)]
                 if n in TORCH_DEVIATIONS else [])
    for t, names in (("LOWER", LOWER), ("FP32", FP32), ("SAME", SAME)) for n in names])
def test_tables_follow_torch_cuda_autocast(table, name, low):
    """Each table entry's output dtype under autocast('cuda') is what torch's CUDA autocast
    gives for the same op (float32 and low inputs). Needs torch with CUDA."""
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA: torch's CUDA autocast policy cannot be asked")
    ours = {"LOWER": LOWER, "FP32": FP32, "SAME": SAME}[table][name]
    for d in (genesis.float32, low):
        with genesis.autocast("cuda", dtype=low):
            got = ours(d, "cuda:0").dtype
        with torch.autocast("cuda", dtype=TORCH_DTYPE[low]):
            want = TORCH_TWINS[name](d).dtype
        assert TORCH_DTYPE[got] is want, f"{name} on {d.name} inputs: {got} vs torch {want}"


@pytest.mark.parametrize("low", LOW_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(LOWER))
def test_matmul_like_ops_run_in_the_low_dtype(name, low, device):
    with genesis.autocast(kind(device), dtype=low):
        out = LOWER[name](genesis.float32, device)
        assert out.dtype is low and out.device.type == kind(device)
        assert LOWER[name](low, device).dtype is low
    assert LOWER[name](genesis.float32, device).dtype is genesis.float32  # off again outside


@pytest.mark.parametrize("low", LOW_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(FP32))
def test_precision_sensitive_ops_run_in_float32(name, low, device):
    with genesis.autocast(kind(device), dtype=low):
        assert FP32[name](low, device).dtype is genesis.float32
        assert FP32[name](genesis.float32, device).dtype is genesis.float32


@pytest.mark.parametrize("low", LOW_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(SAME))
def test_other_ops_keep_their_input_dtype(name, low, device):
    with genesis.autocast(kind(device), dtype=low):
        assert SAME[name](low, device).dtype is low
        assert SAME[name](genesis.float32, device).dtype is genesis.float32


@pytest.mark.parametrize("low", LOW_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(PROMOTE))
def test_mixed_inputs_promote(name, low, device):
    with genesis.autocast(kind(device), dtype=low):
        assert PROMOTE[name](low, device).dtype is genesis.float32


@pytest.mark.parametrize("low", LOW_DTYPES, ids=lambda d: d.name)
def test_lower_ops_match_torch_autocast_values(low, device):
    """Values against torch's autocast on the same device type (torch's CUDA autocast when
    torch has CUDA, else its CPU autocast)."""
    x, w, b = rn(device, 4, 16), rn(device, 8, 16, seed=1), rn(device, 8, seed=2)
    img, k = rn(device, 1, 2, 6, 6, seed=3), rn(device, 3, 2, 3, 3, seed=4)
    with genesis.autocast(kind(device), dtype=low):
        ours = [x @ w.t(), F.linear(x, w, b), F.conv2d(img, k)]
    td = torch_device(device)

    def tt(t):
        return to_torch(t).to(td)

    with torch.autocast(kind(td), dtype=TORCH_DTYPE[low]):
        theirs = [tt(x) @ tt(w).t(), torch.nn.functional.linear(tt(x), tt(w), tt(b)),
                  torch.nn.functional.conv2d(tt(img), tt(k))]
    for a, t in zip(ours, theirs):
        assert t.dtype is TORCH_DTYPE[low] and a.dtype is low
        assert_close(to_torch(a), t.cpu())


@pytest.mark.parametrize("low", LOW_DTYPES, ids=lambda d: d.name)
def test_fp32_ops_compute_from_the_widened_input(low, device):
    x = rn(device, 4, 8, dtype=low)
    with genesis.autocast(kind(device), dtype=low):
        sm, ls = F.softmax(x, -1), F.log_softmax(x, -1)
    ref = to_torch(x).float()
    assert_close(to_torch(sm), torch.softmax(ref, -1))
    assert_close(to_torch(ls), torch.log_softmax(ref, -1))


def test_float64_and_integer_inputs_are_left_alone(device):
    with genesis.autocast(kind(device), dtype=genesis.bfloat16):
        a = rn(device, 3, 4).to(genesis.float64)
        assert (a @ a.t()).dtype is genesis.float64
        assert F.softmax(a, -1).dtype is genesis.float64
        i = genesis.arange(6, device=device).reshape(2, 3)
        assert genesis.sum(i).dtype is genesis.int64


def test_gradients_flow_back_to_float32_parameters(device):
    w = rn(device, 8, 3).requires_grad_(True)
    x = rn(device, 4, 8, seed=1)
    with genesis.autocast(kind(device), dtype=genesis.bfloat16):
        y = x @ w
        assert y.dtype is genesis.bfloat16
        loss = F.log_softmax(y, -1).sum()
    loss.backward()
    assert w.grad is not None and w.grad.dtype is genesis.float32
    assert w.grad.device.type == kind(device)
    assert tuple(w.grad.shape) == (8, 3)


def test_enabled_false_inside_turns_it_off_and_exit_restores():
    a, b = randn(4, 4), randn(4, 4, seed=1)
    with genesis.autocast("cpu", dtype=genesis.bfloat16):
        assert genesis.is_autocast_enabled("cpu")
        with genesis.autocast("cpu", enabled=False):
            assert not genesis.is_autocast_enabled("cpu")
            assert (a @ b).dtype is genesis.float32
        assert genesis.is_autocast_enabled("cpu")
        assert (a @ b).dtype is genesis.bfloat16
    assert not genesis.is_autocast_enabled("cpu")
    assert (a @ b).dtype is genesis.float32


def test_nesting_switches_dtype_and_restores_it():
    a, b = randn(4, 4), randn(4, 4, seed=1)
    with genesis.autocast("cpu", dtype=genesis.bfloat16):
        with genesis.autocast("cpu", dtype=genesis.float16):
            assert genesis.get_autocast_dtype("cpu") is genesis.float16
            assert (a @ b).dtype is genesis.float16
        assert genesis.get_autocast_dtype("cpu") is genesis.bfloat16
        assert (a @ b).dtype is genesis.bfloat16


def test_state_is_restored_after_an_exception():
    with pytest.raises(KeyError):
        with genesis.autocast("cpu", dtype=genesis.bfloat16):
            raise KeyError("boom")
    assert not genesis.is_autocast_enabled("cpu")
    assert (randn(2, 2) @ randn(2, 2)).dtype is genesis.float32


def test_other_device_types_are_untouched(device):
    """Autocast for the other device type leaves this device's tensors alone."""
    other = "cuda" if kind(device) == "cpu" else "cpu"
    with genesis.autocast(other, dtype=genesis.float16):
        assert genesis.is_autocast_enabled(other) and not genesis.is_autocast_enabled(
            kind(device))
        assert (rn(device, 3, 3) @ rn(device, 3, 3)).dtype is genesis.float32


def test_thread_local():
    started, release = threading.Event(), threading.Event()
    seen = {}

    def worker():
        started.wait()
        seen["enabled"] = genesis.is_autocast_enabled("cpu")
        seen["dtype"] = (randn(3, 3) @ randn(3, 3)).dtype
        release.set()

    thread = threading.Thread(target=worker)
    thread.start()
    with genesis.autocast("cpu", dtype=genesis.bfloat16):
        started.set()
        release.wait(timeout=30)
        assert (randn(3, 3) @ randn(3, 3)).dtype is genesis.bfloat16
    thread.join()
    assert seen == {"enabled": False, "dtype": genesis.float32}


def test_thread_started_inside_does_not_inherit():
    out = {}
    with genesis.autocast("cpu", dtype=genesis.bfloat16):
        t = threading.Thread(target=lambda: out.update(dt=(randn(2, 2) @ randn(2, 2)).dtype))
        t.start()
        t.join()
    assert out["dt"] is genesis.float32


def test_count_of_threads_with_autocast_on():
    """The host paths read the thread-local flag only while some thread has autocast on:
    the count is each thread with its flag on, through nesting, ``enabled=False`` regions,
    exceptions and a second thread, and is zero again afterwards."""
    from genesis.autocast import _anywhere

    assert _anywhere.on == 0
    with genesis.autocast("cpu", dtype=genesis.bfloat16):
        with genesis.autocast("cuda", dtype=genesis.float16):
            assert _anywhere.on == 1
        with genesis.autocast("cpu", enabled=False):
            assert _anywhere.on == 0
            assert (randn(3, 3) @ randn(3, 3)).dtype is genesis.float32
        assert _anywhere.on == 1
        inside, release, seen = threading.Event(), threading.Event(), []

        def worker():
            with genesis.autocast("cpu", dtype=genesis.float16):
                seen.append(_anywhere.on)
                inside.set()
                release.wait(timeout=30)

        thread = threading.Thread(target=worker)
        thread.start()
        inside.wait(timeout=30)
        assert _anywhere.on == 2 and (randn(3, 3) @ randn(3, 3)).dtype is genesis.bfloat16
        release.set()
        thread.join()
        assert seen == [2] and _anywhere.on == 1
        with pytest.raises(RuntimeError, match="inside"), genesis.autocast("cpu", enabled=False):
            raise RuntimeError("inside")
        assert _anywhere.on == 1 and (randn(3, 3) @ randn(3, 3)).dtype is genesis.bfloat16
    assert _anywhere.on == 0 and (randn(3, 3) @ randn(3, 3)).dtype is genesis.float32


def test_decorator_form():
    @genesis.autocast("cpu", dtype=genesis.bfloat16)
    def f(a, b):
        return a @ b

    assert f(randn(2, 2), randn(2, 2)).dtype is genesis.bfloat16
    assert not genesis.is_autocast_enabled("cpu")


def test_amp_reexports_the_core_autocast():
    assert amp.autocast is genesis.autocast
    with amp.autocast("cpu", dtype=genesis.bfloat16):
        assert (randn(2, 2) @ randn(2, 2)).dtype is genesis.bfloat16


def test_invalid_arguments():
    with pytest.raises(RuntimeError, match="float16 and bfloat16"):
        genesis.autocast("cpu", dtype=genesis.float32)
    with pytest.raises(ValueError, match="string"):
        genesis.autocast(genesis.device("cpu"))


def test_default_dtypes():
    assert genesis.get_autocast_dtype("cpu") is genesis.bfloat16
    assert genesis.get_autocast_dtype("cuda") is genesis.float16
    with genesis.autocast("cpu"):
        assert (randn(2, 2) @ randn(2, 2)).dtype is genesis.bfloat16
