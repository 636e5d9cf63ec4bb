"""genesis.compile's traced backward on the CPU: gradients, accumulation, the region node."""

from __future__ import annotations

import gc

import numpy as np

import genesis
import genesis.nn as nn
import genesis.nn.functional as F


def close(a, b, **tol) -> None:
    np.testing.assert_allclose(a.detach().float().numpy(), b.detach().float().numpy(), **tol)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(16)
        self.up = nn.Linear(16, 32)
        self.gate = nn.Linear(16, 32, bias=False)
        self.down = nn.Linear(32, 16)

    def forward(self, x):
        h = self.norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def grads_of(model, fn, *args):
    model.zero_grad()
    fn(*args).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_parameter_and_input_gradients_match_eager():
    genesis.manual_seed(0)
    model = Block()
    compiled = genesis.compile(model)
    for step in range(3):  # the trace, then replays through the compiled backward
        x = genesis.randn(4, 5, 16, requires_grad=True)
        target = genesis.randn(4, 5, 16)
        expected = grads_of(model, lambda a, t: F.mse_loss(model(a), t), x, target)
        gx = x.grad.clone()
        x.grad = None
        got = grads_of(model, lambda a, t: F.mse_loss(compiled(a), t), x, target)
        for g, e in zip(got, expected):
            close(g, e, rtol=1e-5, atol=1e-6)
        close(x.grad, gx, rtol=1e-5, atol=1e-6)
        if step:
            assert type(compiled(x).grad_fn).__name__ == "CompiledRegionBackward"
    (entry,) = compiled._entries.values()
    assert entry.plan is not None  # the backward was traced, not left to eager autograd
    assert entry.plan.backward_graph.nodes


def test_gradients_accumulate_into_grad_as_eager():
    w = genesis.randn(5, requires_grad=True)
    compiled = genesis.compile(lambda x: (x * w).tanh().sum())
    x = genesis.randn(5)
    compiled(x).backward()
    compiled(x).backward()
    compiled(x).backward()  # two replays add to the trace's gradient
    ref = genesis.randn(5, requires_grad=True)
    with genesis.no_grad():
        ref.copy_(w)
    for _ in range(3):
        (x * ref).tanh().sum().backward()
    close(w.grad, ref.grad, rtol=1e-6)


def test_loss_module_with_cross_entropy():
    genesis.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 5), nn.LayerNorm(5))

    def step(x, y):
        return F.cross_entropy(model(x), y)

    compiled = genesis.compile(step)
    x, y = genesis.randn(6, 8), genesis.tensor([0, 1, 2, 3, 4, 0])
    for _ in range(3):
        expected = grads_of(model, lambda: step(x, y))
        got = grads_of(model, lambda: compiled(x, y))
        for g, e in zip(got, expected):
            close(g, e, rtol=1e-5, atol=1e-6)
    (entry,) = compiled._entries.values()
    assert entry.plan is not None


def test_outputs_that_need_no_grad_stay_without_grad_fn():
    w = genesis.randn(3, requires_grad=True)

    def fn(x):
        return x * w, (x * w).argmax(), x.detach() * 2

    compiled = genesis.compile(fn)
    x = genesis.randn(3)
    for _ in range(2):
        y, idx, d = compiled(x)
        assert y.requires_grad and not idx.requires_grad and not d.requires_grad


def test_saved_input_edited_in_place_is_caught():
    w = genesis.randn(3, requires_grad=True)
    compiled = genesis.compile(lambda x: (x * w).sum())
    x = genesis.randn(3, requires_grad=True)
    compiled(x)
    out = compiled(x)
    with genesis.no_grad():
        w.mul_(2)  # w is saved for backward: as eager, backward refuses
    try:
        out.backward()
    except RuntimeError as err:
        assert "modified by an inplace operation" in str(err)
    else:
        raise AssertionError("backward through an edited saved tensor ran")


class GradientsSaveOutputs(nn.Module):
    """Ops whose gradient formulas call ops that save their own outputs (silu's formula
    takes a sigmoid, gelu's an exp): under create_graph each such node of the traced
    backward forms a reference cycle with its output."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        return F.silu(self.fc(x)) * F.gelu(x)


def test_the_traced_backward_leaves_no_tensor_in_a_reference_cycle():
    # the trace's tensors (the first call's activations) must be freed by reference
    # counting, not when the garbage collector happens to run (a cold 0.2B compile kept
    # 1.3 GiB of them alive through training)
    genesis.manual_seed(0)
    model = GradientsSaveOutputs()
    compiled = genesis.compile(model)
    # (x stays referenced: a leaf and its AccumulateGrad node refer to each other, eager
    # autograd's own cycle, which this test is not about)
    x = genesis.randn(4, 16, requires_grad=True)
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        compiled(x).sum().backward()  # the first call: traces the forward and the backward
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        cyclic = [o for o in gc.garbage if isinstance(o, genesis.Tensor)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()
    assert compiled._entries and all(e.plan is not None for e in compiled._entries.values())
    assert cyclic == []
