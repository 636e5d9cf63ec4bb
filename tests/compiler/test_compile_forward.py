"""genesis.compile on the CPU: forward values, guards and recompilation, the graph printout."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import genesis
import genesis.nn as nn
import genesis.nn.functional as F
from genesis.compiler import CompiledFunction


def close(a, b, **tol) -> None:
    np.testing.assert_allclose(a.detach().float().numpy(), b.detach().float().numpy(), **tol)


def mlp_fn(x, w, b):
    h = F.gelu(x @ w.T + b)
    return (h * h.sigmoid()).sum(-1), h[:, :3]


def test_function_matches_eager_on_trace_and_replays():
    x, w, b = genesis.randn(5, 8), genesis.randn(6, 8), genesis.randn(6)
    compiled = genesis.compile(mlp_fn)
    expected = mlp_fn(x, w, b)
    for _ in range(3):  # the trace, then two replays
        got = compiled(x, w, b)
        assert isinstance(got, tuple) and len(got) == 2
        for g, e in zip(got, expected):
            close(g, e)
    x2 = genesis.randn(5, 8)  # same guards, new values: the replay computes them
    for g, e in zip(compiled(x2, w, b), mlp_fn(x2, w, b)):
        close(g, e)
    assert len(compiled._entries) == 1


def test_replay_does_not_run_the_python_function():
    calls = []

    def fn(x):
        calls.append(1)
        return x.exp() + 1

    compiled = genesis.compile(fn)
    x = genesis.randn(4)
    compiled(x)
    compiled(x)
    compiled(genesis.randn(4))
    assert len(calls) == 1


def test_module_matches_eager_and_shares_parameters():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.LayerNorm(4))
    compiled = genesis.compile(model)
    assert list(compiled.parameters())[0] is model[0].weight  # attributes are the module's
    x = genesis.randn(3, 8)
    close(compiled(x), model(x))
    close(compiled(x), model(x))
    with genesis.no_grad():
        model[0].weight.mul_(0.5)  # the replay reads the shared parameter's current values
    close(compiled(x), model(x))


def test_module_compile_in_place():
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    x = genesis.randn(2, 4)
    expected = model(x)
    model.compile()
    close(model(x), expected)
    close(model(x), expected)
    assert isinstance(model._compiled_call, CompiledFunction)


def test_inplace_effect_on_input_is_reproduced():
    def fn(x, y):
        x.mul_(2)
        y[0] = 5.0
        return x + y

    compiled = genesis.compile(fn)
    for _ in range(3):
        a, b = genesis.randn(4), genesis.randn(4)
        a_ref, b_ref = a.clone(), b.clone()
        out = compiled(a, b)
        ref = fn(a_ref, b_ref)
        close(out, ref)
        close(a, a_ref)
        close(b, b_ref)


def test_new_shapes_and_dtypes_retrace():
    compiled = genesis.compile(lambda x: x.softmax(-1) * 3)
    for shape, dtype in [((2, 3), genesis.float32), ((4, 3), genesis.float32),
                         ((2, 3), genesis.float64), ((2, 3), genesis.float32)]:
        x = genesis.randn(*shape, dtype=dtype)
        out = compiled(x)
        assert out.shape == x.shape and out.dtype is dtype
        close(out, x.softmax(-1) * 3)
    assert len(compiled._entries) == 3


def test_python_constants_are_guarded():
    compiled = genesis.compile(lambda x, k: x * k)
    x = genesis.ones(3)
    assert compiled(x, 2).tolist() == [2.0, 2.0, 2.0]
    assert compiled(x, 3).tolist() == [3.0, 3.0, 3.0]
    assert len(compiled._entries) == 2


def test_train_eval_is_guarded():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    compiled = genesis.compile(model)
    x = genesis.ones(64, 4)
    model.eval()
    close(compiled(x), model(x))
    model.train()
    out = compiled(x)
    assert (out == 0).sum().item() > 0  # dropout is on in train mode
    model.eval()
    close(compiled(x), model(x))
    assert len(compiled._entries) == 2


def test_dropout_draws_new_numbers_on_each_replay():
    compiled = genesis.compile(lambda x: F.dropout(x, 0.5, training=True))
    x = genesis.ones(1000)
    masks = [(compiled(x) == 0).numpy() for _ in range(3)]
    assert not (masks[1] == masks[2]).all()
    assert 300 < masks[2].sum() < 700
    genesis.manual_seed(7)  # replayed in the same order, the draws are eager's
    eager = F.dropout(x, 0.5, training=True)
    genesis.manual_seed(7)
    close(compiled(x), eager)


def test_non_callable_is_refused():
    with pytest.raises(TypeError, match="callable"):
        genesis.compile(3)
    with pytest.raises(TypeError, match="callable"):
        genesis.compile(genesis.ones(2))


def test_dynamic_shapes_are_refused_out_loud():
    """dynamic=True (torch: one graph for every size) is not supported: a warning, then one
    trace per shape; a value that is no bool is a TypeError."""
    with pytest.warns(UserWarning, match=r"dynamic=True.*not supported.*traced and compiled "
                                         r"anew"):
        compiled = genesis.compile(lambda x: x * 2, dynamic=True)
    compiled(genesis.ones(2))
    compiled(genesis.ones(3))
    assert len(compiled.graphs()) == 2
    with pytest.raises(TypeError, match="dynamic must be True, False or None, got 'yes'"):
        genesis.compile(lambda x: x, dynamic="yes")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        genesis.compile(lambda x: x, dynamic=False)


def test_decorator_forms():
    @genesis.compile
    def f(x):
        return x + 1

    @genesis.compile(fullgraph=True)
    def g(x):
        return x * 2

    x = genesis.ones(2)
    assert f(x).tolist() == [2.0, 2.0] and g(x).tolist() == [2.0, 2.0]


def test_graph_printout_names_ops_and_lines():
    def fn(x, w):
        return genesis.relu(x @ w)  # the line the graph names

    compiled = genesis.compile(fn)
    compiled(genesis.randn(2, 3), genesis.randn(3, 4))
    (graph,) = compiled.graphs()
    text = str(graph)
    assert [n.op for n in graph.nodes] == ["matmul", "relu"]
    assert "v2: f32[2, 4] = matmul(v0, v1)" in text
    assert "test_compile_forward.py:" in text and "relu(v2)" in text
    assert [v.shape for v in graph.inputs] == [(2, 3), (3, 4)]


def test_cache_limit_falls_back_to_eager_with_one_warning():
    limit = genesis.compiler.get_cache_size_limit()
    genesis.compiler.set_cache_size_limit(2)
    try:
        compiled = genesis.compile(lambda x: x * 2)
        compiled(genesis.ones(1))
        compiled(genesis.ones(2))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert compiled(genesis.ones(3)).tolist() == [2.0] * 3
            assert compiled(genesis.ones(4)).tolist() == [2.0] * 4
        assert len([w for w in caught if "runs eagerly" in str(w.message)]) == 1
        assert len(compiled._entries) == 2
    finally:
        genesis.compiler.set_cache_size_limit(limit)


def test_no_grad_and_grad_are_separate_traces():
    w = genesis.randn(3, requires_grad=True)
    compiled = genesis.compile(lambda x: (x * w).sum())
    x = genesis.randn(3)
    with genesis.no_grad():
        out = compiled(x)
        assert not out.requires_grad
    out = compiled(x)
    assert out.requires_grad
    assert len(compiled._entries) == 2


def test_autocast_state_is_guarded_and_casts_replay():
    lin = nn.Linear(8, 8)
    compiled = genesis.compile(lin)
    x = genesis.randn(4, 8)
    with genesis.autocast("cpu", dtype=genesis.bfloat16):
        for _ in range(2):
            out = compiled(x)
            assert out.dtype is genesis.bfloat16
            close(out, lin(x))
    assert compiled(x).dtype is genesis.float32
    (graph,) = compiled.graphs()[:1]
    assert "cast" in [n.op for n in graph.nodes]


def test_replaced_parameter_and_moved_module_retrace():
    model = nn.Linear(3, 2)
    compiled = genesis.compile(model)
    x = genesis.randn(4, 3)
    compiled(x)
    model.weight = nn.Parameter(genesis.ones(2, 3))  # a new parameter object
    close(compiled(x), model(x))
    model.double()  # buffers and parameters change dtype (identity kept)
    out = compiled(x.double())
    assert out.dtype is genesis.float64
    close(out, model(x.double()))
    assert len(compiled._entries) == 3


def test_whole_node_backward_option_gives_the_same_gradients():
    model = nn.Sequential(nn.Linear(4, 8), nn.RMSNorm(8), nn.Linear(8, 3))
    compiled = genesis.compile(model, options={"backward": "nodes"})
    x, y = genesis.randn(5, 4), genesis.tensor([0, 1, 2, 0, 1])
    for _ in range(3):
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()
        expected = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        F.cross_entropy(compiled(x), y).backward()
        for p, e in zip(model.parameters(), expected):
            close(p.grad, e, rtol=1e-6, atol=1e-7)
    (entry,) = compiled._entries.values()
    ops = [n.op for n in entry.plan.backward_graph.nodes]
    assert "linear_backward" in ops and "rms_norm_backward" in ops


def test_a_captured_tensor_dropped_by_its_owner_is_not_replayed():
    state = {"w": genesis.ones(3)}
    compiled = genesis.compile(lambda x: x * state["w"])
    x = genesis.ones(3)
    assert compiled(x).tolist() == [1.0, 1.0, 1.0]
    state["w"] = genesis.full((3,), 2.0)  # rebound: the traced tensor is held by nobody else
    assert compiled(x).tolist() == [2.0, 2.0, 2.0]
    assert compiled(x).tolist() == [2.0, 2.0, 2.0]


def test_a_deep_copy_of_a_compiled_module_runs_its_own_parameters():
    import copy

    model = nn.Linear(3, 3)
    model.compile()
    x = genesis.randn(2, 3)
    model(x)
    twin = copy.deepcopy(model)
    with genesis.no_grad():
        twin.weight.fill_(0.0)
        twin.bias.fill_(1.0)
    assert twin(x).tolist() == [[1.0] * 3] * 2
    assert twin._compiled_call is not model._compiled_call
    close(model(x), x @ model.weight.T + model.bias)


def test_namedtuple_and_dict_results_are_rebuilt_from_the_replay():
    def fn(x):
        return {"max": x.max(0), "sum": x.sum()}

    compiled = genesis.compile(fn)
    compiled(genesis.randn(4))
    x = genesis.randn(4)
    out = compiled(x)
    assert type(out["max"]).__name__ == "values_indices"
    close(out["max"].values, x.max(0).values)
    assert out["max"].indices.item() == x.max(0).indices.item()
    close(out["sum"], x.sum())


def test_replay_source_is_generated_python():
    from genesis.compiler.replay import replay_callable

    compiled = genesis.compile(lambda x: (x * 2).exp())
    compiled(genesis.ones(2))
    (graph,) = compiled.graphs()
    run = replay_callable(graph)
    assert "v1 = mul_0(v0, 2)" in run.source and "del v1" in run.source
    assert run([genesis.zeros(2)])[0].tolist() == [1.0, 1.0]


def test_a_backend_array_passed_to_an_op_makes_the_key_run_eagerly():
    def fn(x):
        raw = (x * 2)._data  # a backend array: a replay could not recompute it
        return genesis.from_dlpack(raw) + x

    compiled = genesis.compile(fn)
    with pytest.warns(UserWarning, match="no traced op made"):
        compiled(genesis.ones(2))
    x = genesis.full((2,), 3.0)
    assert compiled(x).tolist() == [9.0, 9.0]  # eager, not the trace's [2, 2] + x


def test_graph_keeps_a_slices_key_tuple():
    """``x[a:b]`` reaches ``Slice.forward`` without a key tuple in eager mode, but the traced
    graphs (what a replay and genesis-cuda's compiler read) hold the op's argument as every
    mode sees it: ``(slice(a, b),)``, in the forward's ``slice`` and the backward's
    ``slice_backward``."""
    compiled = genesis.compile(lambda x: x[1:3].exp().sum())
    x = genesis.randn(4, 5, requires_grad=True)
    out = compiled(x)
    close(out, x[1:3].exp().sum())
    out.backward()
    close(x.grad[1:3], x[1:3].exp())
    forward, backward = compiled.graphs()
    (node,) = [n for n in forward.nodes if n.op == "slice"]
    assert node.args[1] == (slice(1, 3),)
    (node,) = [n for n in backward.nodes if n.op == "slice_backward"]
    assert node.args[2] == (slice(1, 3),)
