"""genesis.compile on a CUDA device: the CPU suite's core checks again where the graphs go
to the CUDA backend's ``compile_graph`` hook (or core's replay where it returns None)."""

from __future__ import annotations

import numpy as np
import pytest

import genesis
import genesis.nn as nn
import genesis.nn.functional as F

pytestmark = pytest.mark.cuda


def close(a, b, **tol) -> None:
    np.testing.assert_allclose(a.detach().float().cpu().numpy(),
                               b.detach().float().cpu().numpy(), **tol)


def test_forward_backward_and_inplace_match_eager_on_cuda():
    genesis.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32),
                          nn.RMSNorm(32)).to("cuda")
    compiled = genesis.compile(model)
    for _ in range(3):
        x = genesis.randn(8, 32, device="cuda", requires_grad=True)
        model.zero_grad()
        model(x).pow(2).mean().backward()
        want = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        compiled(x).pow(2).mean().backward()
        for p, w in zip(model.parameters(), want):
            close(p.grad, w, rtol=1e-4, atol=1e-5)  # (a fusing backend may reorder sums)

    def bump(x):
        x.add_(1)
        return x * 2

    f = genesis.compile(bump)
    for _ in range(3):
        a = genesis.zeros(4, device="cuda")
        assert f(a).tolist() == [2.0] * 4 and a.tolist() == [1.0] * 4


def test_branches_and_dropout_on_cuda():
    def fn(x):
        if x.sum() > 0:
            return F.dropout(x, 0.5, training=True)
        return -x

    f = genesis.compile(fn)
    x = genesis.ones(4096, device="cuda")
    a, b = f(x), f(x)
    assert not bool((a == b).all())  # a replay draws new numbers
    assert f(-x).tolist()[:3] == [1.0, 1.0, 1.0]


def test_training_loop_losses_match_eager_on_cuda():
    def losses(compiled: bool) -> list[float]:
        genesis.manual_seed(0)
        model = nn.Sequential(nn.Embedding(64, 32), nn.Linear(32, 64)).to("cuda")
        run = genesis.compile(model) if compiled else model
        opt = genesis.optim.AdamW(model.parameters(), lr=1e-2)
        tokens = genesis.randint(0, 64, (4, 17), device="cuda")
        out = []
        for _ in range(5):
            with genesis.autocast("cuda", dtype=genesis.bfloat16):
                logits = run(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, 64), tokens[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out

    got, want = losses(True), losses(False)
    assert max(abs(a - b) for a, b in zip(got, want)) < 2e-2  # bf16: a fused kernel rounds
    # once where eager rounds per op
