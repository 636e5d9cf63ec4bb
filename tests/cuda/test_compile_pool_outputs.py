"""A replayed CUDA graph hands its outputs out as aliases of its pool memory (GPU only).

``genesis_cuda.compiler.pool_outputs``: no copy after a replay; an alias still in use when
the graph replays again is moved to memory of its own first, so every result keeps its
values; the backward graph reads the forward's saved activations in place. These checks
count the moves, which is what decides both the speed and the memory of a compiled step.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

pytest.importorskip("triton")

import genesis  # noqa: E402
import genesis.nn as nn  # noqa: E402
from genesis_cuda.compiler import pool_outputs  # noqa: E402
from genesis_cuda.compiler.pool_outputs import AliasStorage  # noqa: E402

pytestmark = pytest.mark.cuda


@pytest.fixture
def moves(monkeypatch):
    """The list of aliases moved out of a pool (each ``move_out`` appends its alias)."""
    moved = []
    real = AliasStorage.move_out

    def counting(self, alloc):
        moved.append(self)
        real(self, alloc)

    monkeypatch.setattr(AliasStorage, "move_out", counting)
    return moved


def close(a, b):
    np.testing.assert_allclose(a.detach().float().cpu().numpy(),
                               np.asarray(b, dtype=np.float32), rtol=1e-5, atol=1e-5)


def _mlp():
    genesis.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.SiLU(), nn.Linear(64, 32)).to("cuda")


def test_a_training_loop_moves_nothing_and_reads_activations_in_place(moves):
    model = _mlp()
    compiled = genesis.compile(model)
    opt = genesis.optim.SGD(model.parameters(), lr=0.01)
    xs = [genesis.randn(16, 32, device="cuda") for _ in range(6)]
    for x in xs:
        loss = compiled(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    # (each step's loss is a tensor the step made itself: the compiled outputs are dead
    # by the next replay, and the backward released the saved activations)
    assert moves == []


def test_results_kept_across_replays_keep_their_values(moves):
    fn = genesis.compile(lambda t: (t * 2).exp() + 1)
    xs = [genesis.full((64,), 0.1 * i, device="cuda") for i in range(6)]
    outs = [fn(x) for x in xs]
    middle = outs[3][10:20]  # a view of a handed-out result
    for x in xs:
        fn(x)  # later replays rewrite the pool
    for x, y in zip(xs, outs):
        close(y, np.exp(2 * x.cpu().numpy()) + 1)
    close(middle, np.exp(2 * xs[3].cpu().numpy()[10:20]) + 1)
    assert moves  # the kept results were moved out of the pool before being overwritten
    assert all(m._source is None for m in moves)


def test_two_forwards_before_one_backward_match_eager():
    """Gradient accumulation written as two forwards and one backward: the first forward's
    saved activations are moved before the second replay, and the backward graph, which
    reads activations where the forward wrote them, runs that call eagerly."""
    model = _mlp()
    compiled = genesis.compile(model)
    for _ in range(5):
        a, b = genesis.randn(16, 32, device="cuda"), genesis.randn(16, 32, device="cuda")
        model.zero_grad()
        (model(a).pow(2).mean() + model(b).pow(2).mean()).backward()
        want = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        (compiled(a).pow(2).mean() + compiled(b).pow(2).mean()).backward()
        for p, w in zip(model.parameters(), want):
            np.testing.assert_allclose(p.grad.cpu().numpy(), w.cpu().numpy(),
                                       rtol=1e-4, atol=1e-5)


def test_results_outlive_the_compiled_function():
    fn = genesis.compile(lambda t: t * 3 + 1)
    x = genesis.full((128,), 2.0, device="cuda")
    outs = [fn(x) for _ in range(4)]  # the last ones are aliases of the graph's pool
    assert pool_outputs.is_pool_alias(outs[-1])
    del fn
    gc.collect()
    genesis.empty((1 << 20,), device="cuda").fill_(-1.0)  # memory the pool may have held
    for y in outs:
        close(y, np.full(128, 7.0))
