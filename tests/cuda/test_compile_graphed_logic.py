"""``genesis_cuda.compiler.cuda_graph.Graphed``'s buffer policy, without a GPU.

A fake CUDA graph stands in for the driver's: "capturing" records the callable and its
static inputs, "replay" runs it again on them and copies the results into the captured
outputs — what a real replay does to memory. On CPU tensors this checks which inputs are
read in place and which get buffers, that callers' tensors are never overwritten, that
results survive later calls, in-place edits of inputs, and capture failures.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("triton")  # genesis_cuda.compiler imports the kernel modules

import genesis  # noqa: E402
from genesis_cuda.capture import GraphCaptureError  # noqa: E402
from genesis_cuda.compiler import cuda_graph, pool_outputs  # noqa: E402


class FakeGraph:
    captures = 0

    def __init__(self):
        self.fn = self.inputs = self.outputs = None

    def replay(self):
        with genesis.no_grad():
            for out, new in zip(self.outputs, self.fn(self.inputs)):
                out.copy_(new)

    def reset(self):
        self.fn = None

    def pool(self):
        return ("fake pool", id(self))  # CPU tensors are never in it: outputs are copied

    pool_handle = None


class FakeCapture:
    """``graph(g)``: the callable run inside is what ``g`` replays."""

    current = None

    def __init__(self, g, pool=None):
        self.g, g.pool_handle = g, pool

    def __enter__(self):
        FakeCapture.current = self.g
        FakeGraph.captures += 1
        return self.g

    def __exit__(self, *exc):
        FakeCapture.current = None
        return False


class Recorded:
    """The compiled callable: runs ``body``; during a fake capture, also teaches the graph."""

    def __init__(self, body, fail=False):
        self.body, self.fail, self.calls = body, fail, 0

    def __call__(self, inputs):
        self.calls += 1
        g = FakeCapture.current
        if g is not None:
            if self.fail:
                raise GraphCaptureError("cannot read a tensor's value while a CUDA graph ...")
            g.fn, g.inputs = self.body, inputs  # a capture runs nothing: outputs made only
            g.outputs = [o.clone() for o in self.body([i.clone() for i in inputs])]
            return g.outputs
        return self.body(inputs)


@pytest.fixture(autouse=True)
def _fake_cuda_graphs(monkeypatch):
    monkeypatch.setattr(cuda_graph, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(cuda_graph, "graph", FakeCapture)
    monkeypatch.setattr(cuda_graph, "_capturable", lambda inputs: True)
    monkeypatch.setattr(cuda_graph, "empty_cache", lambda: FakeGraph.emptied.append(1))
    FakeGraph.captures = 0
    FakeGraph.emptied = []


def value(t):
    return t.detach().numpy().copy()


def test_fresh_inputs_get_buffers_and_results_survive_later_calls():
    w = genesis.full((4,), 2.0)  # the same tensor every call: read in place
    run = cuda_graph.Graphed(Recorded(lambda ins: [ins[0] * ins[1] + 1]))
    xs = [genesis.full((4,), float(i)) for i in range(5)]
    outs = [run([x, w])[0] for x in xs]
    assert FakeGraph.captures == 1
    assert FakeGraph.emptied == [1]  # the warm-up's cached memory goes back once, at capture
    assert run.kinds == [cuda_graph.BUFFERED, cuda_graph.KEPT] and run.static_inputs[1] is w
    for i, (x, y) in enumerate(zip(xs, outs)):
        np.testing.assert_array_equal(value(x), np.full(4, float(i)))  # never overwritten
        np.testing.assert_array_equal(value(y), np.full(4, 2.0 * i + 1))  # not replaced


def test_persistent_inputs_are_read_as_they_are_now():
    w = genesis.full((3,), 1.0)
    run = cuda_graph.Graphed(Recorded(lambda ins: [ins[0] + ins[1]]))
    x = genesis.zeros(3)
    for _ in range(2):
        run([x, w])
    with genesis.no_grad():
        w.add_(5.0)  # an optimizer step, in place
    np.testing.assert_array_equal(value(run([x, w])[0]), np.full(3, 6.0))


def test_a_replaced_persistent_input_is_captured_again():
    run = cuda_graph.Graphed(Recorded(lambda ins: [ins[0] * 2]))
    a = genesis.ones(2)
    for _ in range(3):
        run([a])
    b = genesis.full((2,), 3.0)  # another tensor in a slot that was persistent
    np.testing.assert_array_equal(value(run([b])[0]), np.full(2, 6.0))
    assert run.cuda_graph is None  # dropped; the next calls warm up and capture anew
    run([b])
    run([b])
    assert FakeGraph.captures == 2 and run.static_inputs[0] is b


def test_in_place_edits_of_inputs_reach_the_caller():
    def body(ins):
        with genesis.no_grad():
            ins[0].add_(1.0)
        return [ins[0] * 1.0]

    run = cuda_graph.Graphed(Recorded(body), writes_inputs=True)
    xs = [genesis.zeros(2) for _ in range(4)]
    for x in xs:
        run([x])
    for x in xs:
        np.testing.assert_array_equal(value(x), np.ones(2))  # each edited exactly once


def test_a_graph_that_cannot_be_captured_runs_eagerly_with_a_warning():
    fn = Recorded(lambda ins: [ins[0] + 1], fail=True)
    run = cuda_graph.Graphed(fn)
    x = genesis.zeros(2)
    run([x])
    with pytest.warns(UserWarning, match="cannot be captured"):
        y = run([x])
    np.testing.assert_array_equal(value(y[0]), np.ones(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run([x])  # no second warning, no second attempt
    assert FakeGraph.captures == 1


def test_modes_choose_cuda_graph_replay():
    from genesis_cuda.compiler.backend_hook import uses_cuda_graph

    for mode in (None, "default", "reduce-overhead", "max-autotune"):
        assert uses_cuda_graph({"mode": mode})
    assert not uses_cuda_graph({"mode": "max-autotune-no-cudagraphs"})
    assert not uses_cuda_graph({"cudagraphs": False})
    assert not uses_cuda_graph({"mode": "reduce-overhead", "triton.cudagraphs": False})
    with pytest.raises(ValueError, match="unknown mode 'fastest'"):
        uses_cuda_graph({"mode": "fastest"})


def test_handed_out_copies_keep_the_outputs_layout():
    """A transposed output (attention's q laid out (B, S, H, D)) is copied with its strides:
    the backward graph's views of it were traced on that layout (a C-order copy broke the
    compiled 0.2B step on an H200 with "view size ... is not compatible")."""
    out = genesis.arange(24.0).reshape(2, 3, 4).transpose(0, 1)  # (3, 2, 4), dense
    copy = pool_outputs._copy_out(out)
    assert copy.stride() == out.stride() and copy.data_ptr() != out.data_ptr()
    np.testing.assert_array_equal(value(copy), value(out))
    assert copy.transpose(0, 1).view(6, 4).shape == (6, 4)
    gappy = genesis.arange(24.0).reshape(4, 6)[:, :3]  # not dense: a C-order copy
    assert pool_outputs._copy_out(gappy).stride() == (3, 1)


def test_another_graphs_outputs_are_read_in_place_and_a_moved_one_runs_eagerly(monkeypatch):
    """The backward graph reads the forward's handed-out activations where the forward
    wrote them; one that was moved away (kept alive across a second forward) is elsewhere,
    and that call runs eagerly without dropping the graph."""
    handed: set = set()
    monkeypatch.setattr(cuda_graph, "is_pool_alias", lambda t: id(t) in handed)
    run = cuda_graph.Graphed(Recorded(lambda ins: [ins[0] * 2]))
    run([genesis.ones(2)])  # warm-up
    h = genesis.full((2,), 3.0)
    handed.add(id(h))
    run([h])  # the capture
    assert run.kinds == [cuda_graph.HANDED] and run.static_inputs == [None]
    with genesis.no_grad():
        h.fill_(4.0)  # the producer's next replay rewrites the same memory
    again = h.view(2)  # handed out anew: another tensor over the same memory
    np.testing.assert_array_equal(value(run([again])[0]), np.full(2, 8.0))
    moved = genesis.full((2,), 5.0)  # that output now lives elsewhere
    np.testing.assert_array_equal(value(run([moved])[0]), np.full(2, 10.0))
    assert run.cuda_graph is not None and FakeGraph.captures == 1


def test_a_kept_input_given_new_memory_is_captured_again():
    """``p.data = ...`` keeps the tensor but moves its memory: the graph would read the old
    address, so the input is matched by address, not by identity."""
    w = genesis.ones(2)
    run = cuda_graph.Graphed(Recorded(lambda ins: [ins[0] * 2]))
    for _ in range(3):
        run([w])
    w.data = genesis.full((2,), 4.0)
    np.testing.assert_array_equal(value(run([w])[0]), np.full(2, 8.0))
    assert run.cuda_graph is None  # dropped: the next calls capture on the new memory


def test_a_shared_pool_moves_out_what_a_replay_could_overwrite():
    """The forward, captured first, may write where the backward later put its outputs (the
    backward reused the forward's freed temporaries): replaying the forward moves out the
    backward's outputs still in use; replaying the backward leaves the forward's alone."""
    moved = []

    class Member:
        def __init__(self, name):
            self.outputs = SimpleNamespace(evacuate=lambda: moved.append(name))
            self.dropped = False

        def drop_capture(self):
            self.dropped = True

    pool = pool_outputs.SharedPool(("handle", 1))
    fwd, bwd = Member("forward"), Member("backward")
    pool.captured(fwd)
    pool.captured(bwd)
    pool.before_replay(fwd)
    assert moved == ["forward", "backward"]
    moved.clear()
    pool.before_replay(bwd)
    assert moved == ["backward"]
    pool.reset()
    assert fwd.dropped and bwd.dropped and pool.members == []


def test_graphs_of_one_pool_capture_into_it_and_are_dropped_together():
    pool = pool_outputs.SharedPool(("handle", 2))
    w = genesis.ones(2)
    first = cuda_graph.Graphed(Recorded(lambda ins: [ins[0] * 2]), pool=pool)
    second = cuda_graph.Graphed(Recorded(lambda ins: [ins[0] + 1]), pool=pool)
    for _ in range(3):
        second(first([w]))
    assert pool.members == [first, second]
    assert first.cuda_graph.pool_handle == second.cuda_graph.pool_handle == pool.handle
    first([genesis.full((2,), 5.0)])  # a kept input replaced: both graphs are dropped
    assert first.cuda_graph is None and second.cuda_graph is None and pool.members == []
