"""Autograd's graph makes no reference cycle: a dropped graph is freed by reference counting.

A node that saves its own output (exp, tanh, sigmoid, softmax ...) and a leaf with its
``AccumulateGrad`` sink were cycles: their memory (device memory on a GPU) stayed allocated
until Python's cyclic collector ran. torch frees both at once; so must genesis. The
semantics that the cycles carried are checked here too: a saved output unpacked in a
create_graph backward still carries its ``grad_fn`` (double backward), an in-place edit of a
saved output still raises, hooks on a leaf outlive its graphs.
"""

from __future__ import annotations

import gc
import weakref

import pytest
from op_table import OPS, Built, flatten_outputs, samples_for

import genesis
from genesis.autograd.function import AccumulateGrad, Node
from genesis.testing import assert_close

_OUTPUT_SAVING = ["exp", "tanh", "sigmoid", "sqrt", "rsqrt", "softmax", "log_softmax"]


def _apply(name: str, x):
    if name in ("softmax", "log_softmax"):
        return getattr(x, name)(-1)
    return getattr(x, name)()


def _autograd_garbage_of(scenario) -> list[str]:
    """Run ``scenario`` with the cyclic collector off and return the names of the autograd
    objects (tensors, nodes, sinks) it left that only the collector could free.

    ``scenario`` runs once before, with the collector on: first calls warm caches up (and
    may leave an exception's frames, which are no concern here)."""
    scenario()
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        scenario()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return [type(o).__name__ for o in gc.garbage
                if isinstance(o, (genesis.Tensor, Node, AccumulateGrad))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


@pytest.mark.parametrize("name", _OUTPUT_SAVING)
def test_a_never_backwarded_graph_of_output_saving_ops_is_freed_by_refcount(name):
    def scenario():
        x = genesis.randn(4, 16).abs().requires_grad_(True)
        y = _apply(name, x)
        loss = (y * 2).sum()  # (a loss computed with grad on and dropped: no backward)
        ref = weakref.ref(y)
        del y, loss
        assert ref() is None

    assert _autograd_garbage_of(scenario) == []


def test_a_chain_of_output_saving_ops_is_freed_by_refcount():
    def scenario():
        x = genesis.randn(8, 8, requires_grad=True)
        h = x
        refs = [weakref.ref(x)]
        for _ in range(4):
            h = h.tanh().sigmoid().exp()
            refs.append(weakref.ref(h))
        del h, x
        assert [r() for r in refs] == [None] * 5

    assert _autograd_garbage_of(scenario) == []


def test_a_dropped_leaf_that_joined_a_graph_is_freed_by_refcount():
    def scenario():
        x = genesis.randn(3, 5, requires_grad=True)
        w = genesis.randn(3, 5, requires_grad=True)
        (x * w).sum().backward()
        ref = weakref.ref(x)
        del x
        assert ref() is None
        assert w.grad is not None

    assert _autograd_garbage_of(scenario) == []


def test_a_leaf_with_hooks_is_freed_by_refcount():
    def scenario():
        x = genesis.randn(3, requires_grad=True)
        x.register_hook(lambda g: g * 2)
        x.register_post_accumulate_grad_hook(lambda t: None)
        (x * 3).sum().backward()
        ref = weakref.ref(x)
        del x
        assert ref() is None

    assert _autograd_garbage_of(scenario) == []


class _Square(genesis.autograd.Function):
    """A custom Function saving its output (recorded through ``recorded``, not an entry)."""

    @staticmethod
    def forward(ctx, x):
        y = x * x
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return 2 * x * g


class _SplitSquare(genesis.autograd.Function):
    """Two outputs, both saved (the tuple path of ``connect``)."""

    @staticmethod
    def forward(ctx, x):
        a, b = x * x, x * 3
        ctx.save_for_backward(a, b)
        return a, b

    @staticmethod
    def backward(ctx, ga, gb):
        a, b = ctx.saved_tensors
        return ga * 2 * (b / 3) + gb * 3


@pytest.mark.parametrize("fn", [_Square, _SplitSquare])
def test_a_custom_function_saving_its_outputs_is_freed_by_refcount(fn):
    def scenario():
        y = fn.apply(genesis.randn(5, requires_grad=True))
        ref = weakref.ref(y if fn is _Square else y[0])
        del y
        assert ref() is None

    assert _autograd_garbage_of(scenario) == []


def test_a_custom_function_with_two_saved_outputs_backwards_after_they_are_dropped():
    x = genesis.randn(5, dtype=genesis.float64).requires_grad_(True)
    a, b = _SplitSquare.apply(x)
    loss = (a + b).sum()
    del a, b
    loss.backward()
    assert_close(x.grad, 2 * x.detach() + 3)


def _nodes_of(outputs) -> list:
    nodes, seen = [], set()
    stack = [o.grad_fn for o in outputs if isinstance(o, genesis.Tensor)]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        nodes.append(node)
        stack.extend(e[0] for e in node.next_functions if e is not None)
    return nodes


@pytest.mark.parametrize("op", [op for op in OPS if op.differentiable], ids=lambda op: op.name)
def test_no_op_of_the_table_keeps_its_own_output(op):
    """Every op, whichever path records it (an entry's direct ``connect`` skips the look for
    saved outputs unless the Function says ``saves_output``): no node holds a tensor whose
    ``grad_fn`` it is."""
    for _, realized in samples_for(op, "float32"):
        built = Built(realized, "genesis", "cpu", requires_grad=True)
        if not built.leaves:
            continue
        outs = flatten_outputs(op.op(*built.args, **built.kwargs))
        for node in _nodes_of(outs):
            if isinstance(node, AccumulateGrad):
                continue
            kept = [t for t in node._saved or () if isinstance(t, genesis.Tensor)]
            kept += [v for v in vars(node).values() if isinstance(v, genesis.Tensor)]
            assert not any(t.grad_fn is node for t in kept), f"{op.name}: {node.name()}"


# ------------------------------------------------------- what the cycles carried still works
@pytest.mark.parametrize("name", ["exp", "tanh", "sigmoid"])
def test_double_backward_through_a_saved_output_whose_tensor_is_gone(name):
    """The formula reads the saved output; unpacked with the output tensor dropped, it must
    still carry the node as its grad_fn, or the second derivative loses the term."""
    data = genesis.randn(6, dtype=genesis.float64)
    x = data.clone().requires_grad_(True)
    (g,) = genesis.autograd.grad(_apply(name, x).sum(), x, create_graph=True)  # (y dropped)
    (gg,) = genesis.autograd.grad(g.sum(), x)
    xt = __import__("torch").tensor(data.numpy(), requires_grad=True)
    (gt,) = __import__("torch").autograd.grad(getattr(xt, name)().sum(), xt, create_graph=True)
    (ggt,) = __import__("torch").autograd.grad(gt.sum(), xt)
    assert_close(g.detach(), genesis.tensor(gt.detach().numpy()))
    assert_close(gg, genesis.tensor(ggt.numpy()))


@pytest.mark.parametrize("name", ["exp", "tanh", "sigmoid"])
def test_gradgradcheck_through_output_saving_ops(name):
    x = genesis.randn(5, dtype=genesis.float64).requires_grad_(True)
    assert genesis.autograd.gradgradcheck(lambda t: _apply(name, t), (x,))


def test_saved_output_unpacked_while_alive_is_the_output_itself():
    x = genesis.randn(4, requires_grad=True)
    y = x.exp()
    _, saved_y = y.grad_fn.saved_tensors
    assert saved_y is y


def test_saved_output_unpacked_after_it_was_dropped_aliases_its_memory():
    x = genesis.randn(4, requires_grad=True)
    y = x.exp()
    node, ptr, values = y.grad_fn, y.data_ptr(), y.detach().clone()
    del y
    _, saved_y = node.saved_tensors
    assert saved_y.data_ptr() == ptr
    assert saved_y.grad_fn is node and saved_y.requires_grad
    assert_close(saved_y.detach(), values)


def test_inplace_edit_of_a_saved_output_still_raises():
    x = genesis.randn(4, requires_grad=True)
    y = x.exp()
    z = y.sum()
    with genesis.no_grad():
        y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()


def test_inplace_edit_through_a_view_of_a_dropped_saved_output_still_raises():
    x = genesis.randn(4, requires_grad=True)
    y = x.exp()
    v = y.detach()[1:]  # (shares y's memory and version counter)
    z = y.sum()
    del y
    v.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.backward()


def test_retain_graph_backward_twice_through_a_dropped_saved_output():
    x = genesis.randn(4, requires_grad=True)
    z = x.sigmoid().sum()
    z.backward(retain_graph=True)
    first = x.grad.clone()
    z.backward()
    assert_close(x.grad, first * 2)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        z.backward()


def test_hooks_on_a_leaf_survive_its_first_graph():
    x = genesis.randn(3, requires_grad=True)
    seen, accumulated = [], []
    x.register_hook(lambda g: seen.append(g.clone()) or g * 10)
    x.register_post_accumulate_grad_hook(lambda t: accumulated.append(t.grad.clone()))
    (x * 2).sum().backward()
    gc.collect()  # (the first graph is gone)
    (x * 3).sum().backward()
    assert [s.tolist() for s in seen] == [[2.0] * 3, [3.0] * 3]
    assert_close(x.grad, genesis.full((3,), 50.0))
    assert [a.tolist() for a in accumulated] == [[20.0] * 3, [50.0] * 3]


def test_accumulate_grad_names_its_leaf_while_it_lives():
    x = genesis.randn(3, requires_grad=True)
    y = x * 2
    sink = y.grad_fn.next_functions[0][0]
    assert isinstance(sink, AccumulateGrad) and sink.variable is x
    assert (x * 3).grad_fn.next_functions[0][0] is sink  # one sink per leaf, across graphs
    del x
    assert sink.variable is None
    y.sum().backward()  # (a gradient for a leaf nobody holds goes nowhere)
