"""genesis.compile's traced backward under bf16 autocast on the CPU: the gradients eager
autograd gives, in the same dtypes.

The backward trace runs autograd with ``create_graph=True``, so every gradient formula takes
its differentiable path; a plain backward takes the op's fused formula. Both paths must hand
each input a gradient of that input's dtype (issue 30: rms_norm's differentiable formula gave
a bfloat16 input a float32 gradient, which the next matmul refused).
"""

from __future__ import annotations

import pytest

import genesis
import genesis.nn as nn
import genesis.nn.functional as F
from genesis.testing import assert_close


class NormedMLP(nn.Module):
    """Linear -> RMSNorm -> Linear: under autocast the norm sees a bfloat16 input and its
    float32 weight, and the Linear before it needs a bfloat16 gradient."""

    def __init__(self, d: int = 16):
        super().__init__()
        self.up = nn.Linear(d, 2 * d, bias=False)
        self.norm = nn.RMSNorm(2 * d, eps=1e-6)
        self.down = nn.Linear(2 * d, d)

    def forward(self, x):
        return self.down(self.norm(self.up(x)))


def test_rms_norm_on_a_bf16_input_gives_gradients_of_eager_dtypes_and_values():
    genesis.manual_seed(0)
    x = genesis.randn(3, 5, 16).to(genesis.bfloat16).requires_grad_()
    w = (genesis.rand(16) + 0.5).requires_grad_()  # float32, as a norm's weight stays

    def loss_of(run):
        return run(x, w).float().pow(2).sum()

    def norm(a, b):
        return F.rms_norm(a, (16,), b, 1e-6)

    want = genesis.autograd.grad(loss_of(norm), [x, w])
    assert [g.dtype for g in want] == [genesis.bfloat16, genesis.float32]
    compiled = genesis.compile(norm)
    for _ in range(3):  # the trace, then replays of the traced backward
        got = genesis.autograd.grad(loss_of(compiled), [x, w])
        assert_close(got, want)  # (dtypes too)
    (entry,) = compiled._entries.values()
    assert entry.plan is not None  # the traced backward ran, not eager autograd


@pytest.mark.parametrize("backward", [None, "nodes"])
def test_module_under_bf16_autocast_trains_as_eager(backward):
    genesis.manual_seed(1)
    model = NormedMLP()
    compiled = genesis.compile(model, options={"backward": backward} if backward else None)
    x = genesis.randn(4, 6, 16, requires_grad=True)

    def step(run):
        model.zero_grad()
        x.grad = None
        with genesis.autocast("cpu", dtype=genesis.bfloat16):
            out = run(x)
        out.float().pow(2).mean().backward()
        return out.detach(), x.grad, [p.grad for p in model.parameters()]

    want = step(model)
    for _ in range(3):
        got = step(compiled)
        assert_close(got, want)
    (entry,) = compiled._entries.values()
    assert entry.plan is not None


def test_layer_norm_on_a_bf16_input_gives_gradients_of_eager_dtypes():
    genesis.manual_seed(2)
    x = genesis.randn(4, 8).to(genesis.bfloat16).requires_grad_()
    w, b = (genesis.rand(8) + 0.5).requires_grad_(), genesis.randn(8).requires_grad_()

    def norm(a, w, b):
        return F.layer_norm(a, (8,), w, b)

    def grads(run):
        return genesis.autograd.grad(run(x, w, b).float().pow(2).sum(), [x, w, b])

    want = grads(norm)
    assert [g.dtype for g in want] == [genesis.bfloat16, genesis.float32, genesis.float32]
    compiled = genesis.compile(norm)
    for _ in range(2):
        assert_close(grads(compiled), want)
