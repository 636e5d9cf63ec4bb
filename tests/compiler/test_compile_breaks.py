"""Graph breaks: host reads split the trace; each outcome gets its own branch."""

from __future__ import annotations

import numpy as np
import pytest

import genesis
from genesis.compiler import GraphBreakError


def close(a, b) -> None:
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6)


def branchy(x):
    y = x * 2
    y.add_(1)  # an in-place edit before the break: replayed once, not again on a new branch
    if y.sum() > 0:  # bool(tensor): a graph break
        return y.exp()
    return -y


def test_both_sides_of_a_data_dependent_branch():
    compiled = genesis.compile(branchy)
    for v in [1.0, 2.0, -3.0, -1.0, 5.0, -2.0]:
        x = genesis.full((3,), v)
        close(compiled(x), branchy(x))
    (entry,) = compiled._entries.values()
    assert entry.root.host.op == "item"
    assert len(entry.root.children) == 2  # one traced branch per outcome
    assert [n.op for n in entry.root.nodes] == ["mul", "add_", "sum", "gt"]


def test_a_new_branch_does_not_repeat_the_prefix_effects():
    def fn(x, counter):
        counter.add_(1)  # an in-place effect on an input before the break
        if x.sum() > 0:
            return x + counter
        return x - counter

    compiled = genesis.compile(fn)
    counter = genesis.zeros(1)
    compiled(genesis.ones(2), counter)
    out = compiled(-genesis.ones(2), counter)  # the other outcome: traced now
    assert counter.tolist() == [2.0]  # incremented once per call, not once per trace run
    assert out.tolist() == [-3.0, -3.0]


def test_item_value_is_a_guard():
    def fn(x):
        n = int(x.sum().item())
        return x * n

    compiled = genesis.compile(fn)
    assert compiled(genesis.ones(2)).tolist() == [2.0, 2.0]
    assert compiled(genesis.ones(2)).tolist() == [2.0, 2.0]
    assert compiled(genesis.ones(2) * 2).tolist() == [8.0, 8.0]
    assert compiled(genesis.ones(2)).tolist() == [2.0, 2.0]


def test_nonzero_output_shape_is_a_guard():
    def fn(x):
        idx = (x > 0).nonzero()
        return idx.shape[0] * x.sum()

    compiled = genesis.compile(fn)
    for data in ([1.0, -1.0, 2.0], [1.0, 1.0, 2.0], [1.0, -1.0, 3.0]):
        x = genesis.tensor(data)
        close(compiled(x), fn(x))


def test_fullgraph_names_the_op_and_the_line():
    def fn(x):
        return x * x.sum().item()  # the offending line

    compiled = genesis.compile(fn, fullgraph=True)
    with pytest.raises(GraphBreakError, match=r"`item`.*test_compile_breaks\.py:\d+"):
        compiled(genesis.ones(2))
    line = fn.__code__.co_firstlineno + 1
    with pytest.raises(GraphBreakError, match=f"test_compile_breaks.py:{line}"):
        compiled(genesis.ones(2))


def test_breaks_with_grad_give_eager_gradients():
    w = genesis.randn(3, requires_grad=True)

    def fn(x):
        y = x * w
        if y.sum() > 0:
            return y.exp().sum()
        return (y * y).sum()

    compiled = genesis.compile(fn)
    for s in [1.0, -1.0, 1.0, -1.0]:
        x = genesis.full((3,), s)
        w.grad = None
        compiled(x).backward()
        got = w.grad.clone()
        w.grad = None
        fn(x).backward()
        close(got, w.grad)
