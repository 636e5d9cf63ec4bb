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


def to_torch(t) -> torch.Tensor:
    t = t.detach()
    if t.dtype is genesis.bfloat16:
        return torch.from_numpy(t.view(genesis.int16).numpy().copy()).view(torch.bfloat16)
    return torch.from_numpy(np.array(t.numpy(), copy=True))


def labels():
    return genesis.tensor([0, 2, 1, 3])


def probs(dtype, seed=0):
    return randn(4, 4, dtype=genesis.float32, seed=seed).sigmoid().to(dtype)


# name -> fn(dtype of the inputs) -> output; the inputs are made in the given dtype.
LOWER = {
    "matmul": lambda d: genesis.matmul(randn(4, 8, dtype=d), randn(8, 3, dtype=d, seed=1)),
    "@": lambda d: randn(2, 4, 8, dtype=d) @ randn(8, 3, dtype=d, seed=1),
    "mm": lambda d: genesis.mm(randn(4, 8, dtype=d), randn(8, 3, dtype=d, seed=1)),
    "bmm": lambda d: genesis.bmm(randn(2, 4, 8, dtype=d), randn(2, 8, 3, dtype=d, seed=1)),
    "linear": lambda d: F.linear(randn(4, 8, dtype=d), randn(3, 8, dtype=d, seed=1),
                                 randn(3, dtype=d, seed=2)),
    "conv1d": lambda d: F.conv1d(randn(1, 2, 9, dtype=d), randn(3, 2, 3, dtype=d, seed=1)),
    "conv2d": lambda d: F.conv2d(randn(1, 2, 6, 6, dtype=d), randn(3, 2, 3, 3, dtype=d, seed=1),
                                 randn(3, dtype=d, seed=2)),
    "scaled_dot_product_attention": lambda d: F.scaled_dot_product_attention(
        randn(1, 2, 4, 8, dtype=d), randn(1, 2, 4, 8, dtype=d, seed=1),
        randn(1, 2, 4, 8, dtype=d, seed=2)),
}
FP32 = {
    # softmax family
    "softmax": lambda d: F.softmax(randn(4, 8, dtype=d), dim=-1),
    "log_softmax": lambda d: F.log_softmax(randn(4, 8, dtype=d), dim=-1),
    # norms
    "layer_norm": lambda d: F.layer_norm(randn(4, 8, dtype=d), (8,)),
    "rms_norm": lambda d: F.rms_norm(randn(4, 8, dtype=d), (8,)),
    "group_norm": lambda d: F.group_norm(randn(2, 4, 3, dtype=d), 2),
    "norm": lambda d: genesis.norm(randn(4, 8, dtype=d)),
    # reductions
    "sum": lambda d: genesis.sum(randn(4, 8, dtype=d)),
    "sum(dim)": lambda d: randn(4, 8, dtype=d).sum(dim=1),
    "mean": lambda d: genesis.mean(randn(4, 8, dtype=d)),
    "prod": lambda d: genesis.prod(randn(4, 8, dtype=d)),
    "cumsum": lambda d: genesis.cumsum(randn(4, 8, dtype=d), 1),
    "logsumexp": lambda d: genesis.logsumexp(randn(4, 8, dtype=d), 1),
    # losses
    "cross_entropy": lambda d: F.cross_entropy(randn(4, 5, dtype=d), labels()),
    "nll_loss": lambda d: F.nll_loss(randn(4, 5, dtype=d), labels()),
    "mse_loss": lambda d: F.mse_loss(randn(4, 5, dtype=d), randn(4, 5, dtype=d, seed=1)),
    "l1_loss": lambda d: F.l1_loss(randn(4, 5, dtype=d), randn(4, 5, dtype=d, seed=1)),
    "smooth_l1_loss": lambda d: F.smooth_l1_loss(randn(4, 5, dtype=d),
                                                 randn(4, 5, dtype=d, seed=1)),
    "binary_cross_entropy_with_logits": lambda d: F.binary_cross_entropy_with_logits(
        randn(4, 4, dtype=d), probs(d, 1)),
    "kl_div": lambda d: F.kl_div(F.log_softmax(randn(4, 4), -1).to(d), probs(d, 1),
                                 reduction="batchmean"),
    # exp / log
    "exp": lambda d: genesis.exp(randn(4, 8, dtype=d)),
    "log": lambda d: genesis.log(probs(d)),
    "log1p": lambda d: genesis.log1p(probs(d)),
    "expm1": lambda d: genesis.expm1(randn(4, 8, dtype=d)),
    "log2": lambda d: genesis.log2(probs(d)),
    "pow": lambda d: genesis.pow(probs(d), 2.5),
    "rsqrt": lambda d: genesis.rsqrt(probs(d)),
    "softplus": lambda d: F.softplus(randn(4, 8, dtype=d)),
}
SAME = {  # not in any list: computed in the inputs' dtype
    "add": lambda d: randn(4, dtype=d) + randn(4, dtype=d, seed=1),
    "mul": lambda d: randn(4, dtype=d) * 3.0,
    "relu": lambda d: F.relu(randn(4, dtype=d)),
    "gelu": lambda d: F.gelu(randn(4, dtype=d)),
    "silu": lambda d: F.silu(randn(4, dtype=d)),
    "tanh": lambda d: genesis.tanh(randn(4, dtype=d)),
    "sigmoid": lambda d: genesis.sigmoid(randn(4, dtype=d)),
    "amax": lambda d: genesis.amax(randn(4, 8, dtype=d), 1),
    "reshape": lambda d: randn(4, 8, dtype=d).reshape(8, 4),
    "cat": lambda d: genesis.cat([randn(2, dtype=d), randn(3, dtype=d, seed=1)]),
}
PROMOTE = {  # mixed low/float32 inputs: the widest type wins
    "add": lambda low: randn(4, dtype=low) + randn(4, seed=1),
    "mul": lambda low: randn(4, dtype=low) * randn(4, seed=1),
    "cat": lambda low: genesis.cat([randn(2, dtype=low), randn(3, seed=1)]),
    "stack": lambda low: genesis.stack([randn(3, dtype=low), randn(3, seed=1)]),
    "where": lambda low: genesis.where(randn(3) > 0, randn(3, dtype=low), randn(3, seed=1)),
    "addcmul": lambda low: genesis.addcmul(randn(3), randn(3, dtype=low, seed=1),
                                           randn(3, dtype=low, seed=2)),
}


@pytest.mark.parametrize("low", LOW_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(LOWER))
def test_matmul_like_ops_run_in_the_low_dtype(name, low):
    with genesis.autocast("cpu", dtype=low):
        assert LOWER[name](genesis.float32).dtype is low
        assert LOWER[name](low).dtype is low
    assert LOWER[name](genesis.float32).dtype is genesis.float32  # off again outside


@pytest.mark.parametrize("low", LOW_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(FP32))
def test_precision_sensitive_ops_run_in_float32(name, low):
    with genesis.autocast("cpu", dtype=low):
        assert FP32[name](low).dtype is genesis.float32
        assert FP32[name](genesis.float32).dtype is genesis.float32


@pytest.mark.parametrize("low", LOW_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(SAME))
def test_other_ops_keep_their_input_dtype(name, low):
    with genesis.autocast("cpu", dtype=low):
        assert SAME[name](low).dtype is low
        assert SAME[name](genesis.float32).dtype is genesis.float32


@pytest.mark.parametrize("low", LOW_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(PROMOTE))
def test_mixed_inputs_promote(name, low):
    with genesis.autocast("cpu", dtype=low):
        assert PROMOTE[name](low).dtype is genesis.float32


@pytest.mark.parametrize("low", LOW_DTYPES, ids=lambda d: d.name)
def test_lower_ops_match_torch_autocast_values(low):
    x, w, b = randn(4, 16), randn(8, 16, seed=1), randn(8, seed=2)
    img, k = randn(1, 2, 6, 6, seed=3), randn(3, 2, 3, 3, seed=4)
    with genesis.autocast("cpu", dtype=low):
        ours = [x @ w.t(), F.linear(x, w, b), F.conv2d(img, k)]
    with torch.autocast("cpu", dtype=TORCH_DTYPE[low]):
        theirs = [to_torch(x) @ to_torch(w).t(),
                  torch.nn.functional.linear(to_torch(x), to_torch(w), to_torch(b)),
                  torch.nn.functional.conv2d(to_torch(img), to_torch(k))]
    for a, t in zip(ours, theirs):
        assert t.dtype is TORCH_DTYPE[low]
        assert_close(to_torch(a), t)


@pytest.mark.parametrize("low", LOW_DTYPES, ids=lambda d: d.name)
def test_fp32_ops_compute_from_the_widened_input(low):
    x = randn(4, 8, dtype=low)
    with genesis.autocast("cpu", dtype=low):
        sm, ls = F.softmax(x, -1), F.log_softmax(x, -1)
    ref = to_torch(x).float()
    assert_close(to_torch(sm), torch.softmax(ref, -1))
    assert_close(to_torch(ls), torch.log_softmax(ref, -1))


def test_float64_and_integer_inputs_are_left_alone():
    with genesis.autocast("cpu", dtype=genesis.bfloat16):
        a = randn(3, 4).to(genesis.float64)
        assert (a @ a.t()).dtype is genesis.float64
        assert F.softmax(a, -1).dtype is genesis.float64
        i = genesis.arange(6).reshape(2, 3)
        assert genesis.sum(i).dtype is genesis.int64


def test_gradients_flow_back_to_float32_parameters():
    w = randn(8, 3).requires_grad_(True)
    x = randn(4, 8, seed=1)
    with genesis.autocast("cpu", dtype=genesis.bfloat16):
        y = x @ w
        assert y.dtype is genesis.bfloat16
        loss = F.log_softmax(y, -1).sum()
    loss.backward()
    assert w.grad is not None and w.grad.dtype is genesis.float32
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


def test_other_device_types_are_untouched():
    with genesis.autocast("cuda", dtype=genesis.float16):
        assert genesis.is_autocast_enabled("cuda") and not genesis.is_autocast_enabled("cpu")
        assert (randn(3, 3) @ randn(3, 3)).dtype is genesis.float32  # CPU tensors


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


@pytest.mark.cuda
@pytest.mark.parametrize("low", LOW_DTYPES, ids=lambda d: d.name)
def test_cuda_policy(low):
    a, b = randn(8, 8).to("cuda"), randn(8, 8, seed=1).to("cuda")
    with genesis.autocast("cuda", dtype=low):
        assert (a @ b).dtype is low
        assert F.softmax((a @ b), -1).dtype is genesis.float32
        assert F.cross_entropy(a @ b, genesis.tensor([0] * 8).to("cuda")).dtype is \
            genesis.float32
        assert (randn(3, 3) @ randn(3, 3)).dtype is genesis.float32  # CPU: not autocast
