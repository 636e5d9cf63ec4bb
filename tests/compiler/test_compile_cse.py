"""genesis.compile computes a repeated cheap result once (``genesis.compiler.cse``), on the CPU.

Under bf16 autocast each ``Linear`` casts its input itself, so projections of one input
record one cast each; the compiled forward keeps one cast node, and the backward reads it.
What must not be merged: results the function returns (the caller gets distinct tensors)
and ops on memory an in-place op writes. Every case checks values and gradients against
eager.
"""

from __future__ import annotations

import genesis
import genesis.nn as nn
from genesis.compiler.cse import merge_common
from genesis.testing import assert_close


class ThreeProjections(nn.Module):
    def __init__(self, d: int = 16):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(d, d, bias=False) for _ in range(3))

    def forward(self, x):
        return (self.q(x) * self.k(x) + self.v(x)).float().sum()


def _casts_of(graph, value) -> int:
    return sum(1 for n in graph.nodes if n.op == "cast" and n.args[0] is value)


def _train_step(model, x):
    with genesis.autocast("cpu", dtype=genesis.bfloat16):
        loss = model(x)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return loss.detach(), grads


def test_the_casts_of_one_input_become_one_and_gradients_match_eager():
    genesis.manual_seed(0)
    model = ThreeProjections()
    x = genesis.randn(4, 16)
    eager_loss, eager_grads = _train_step(model, x)
    compiled = genesis.compile(model)
    for _ in range(3):  # trace, then replays
        loss, grads = _train_step(compiled, x)
        assert_close(loss, eager_loss, rtol=0, atol=0)
        for g, e in zip(grads, eager_grads):
            assert_close(g, e, rtol=0, atol=0)
    forward = compiled.graphs()[0]
    x_value = forward.inputs[0]
    assert _casts_of(forward, x_value) == 1, str(forward)
    report = compiled.saved_bytes()[0]
    assert report.tensors_after < report.tensors_before


def test_without_recompute_every_cast_stays_as_eager_autograd_keeps_them():
    model = ThreeProjections()
    compiled = genesis.compile(model, options={"recompute": False})
    _train_step(compiled, genesis.randn(4, 16))
    forward = compiled.graphs()[0]
    assert _casts_of(forward, forward.inputs[0]) == 3, str(forward)


def test_returned_results_stay_distinct_tensors():
    def twice(x):
        return x * 2, x * 2

    x = genesis.randn(5, requires_grad=True)
    compiled = genesis.compile(twice)
    for _ in range(3):
        a, b = compiled(x)
        assert a.data_ptr() != b.data_ptr()
        with genesis.no_grad():
            a.add_(1)  # the caller may change one; the other is untouched, as in eager
        assert_close(b, x.detach() * 2)


def test_ops_reading_memory_written_in_place_are_not_merged():
    def bumped(x):
        y = x.clone()
        view = y[:]  # one Value before and after the write below
        a = view * 3
        y.add_(1)  # the view's memory changes between the two products
        b = view * 3
        return (a + b).sum()

    x = genesis.randn(6, requires_grad=True)
    expected = bumped(x)
    expected.backward()
    eager_grad = x.grad.clone()
    x.grad = None
    compiled = genesis.compile(bumped)
    for _ in range(3):
        out = compiled(x)
        out.backward()
        assert_close(out, expected)
        assert_close(x.grad, eager_grad)
        x.grad = None


def test_merge_common_keeps_the_first_of_equal_nodes_only():
    def f(x):
        return (x * 2 + x * 2 + x * 2.0000001 + x * 3).sum()

    x = genesis.randn(4, requires_grad=True)
    compiled = genesis.compile(f)
    out = compiled(x)
    out.backward()
    assert_close(x.grad, genesis.full((4,), 2 + 2 + 2.0000001 + 3))
    nodes = compiled.graphs()[0].nodes
    products = [n for n in nodes if n.op == "mul"]
    kept, same = merge_common(nodes, {id(n) for n in nodes}, [])
    # mul by 2 twice is the same product (already merged by the compile); 2.0000001 and 3
    # are other constants
    assert [n.args[1] for n in products] == [2, 2.0000001, 3]
    assert same == {} and len(kept) == len(nodes)
