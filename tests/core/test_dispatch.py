"""genesis.dispatch: the op registry and the interception mode (DispatchMode).

A mode sees every op call of the op table (forward and, during backward, the ops of the
gradient formulas), factories, random fills and in-place edits; results are unchanged by a
mode that only watches; modes nest as torch's TorchDispatchMode."""

from __future__ import annotations

import collections
import sys

import pytest
import torch
from op_table import OPS, Built, flatten_outputs, samples_for

import genesis
from genesis import dispatch
from genesis.autograd.function import Node
from genesis.dispatch import REGISTRY, DispatchMode


class Recorder(DispatchMode):
    """The ops called while active: (name, args, output)."""

    def __init__(self):
        self.calls = []
        self.nodes = []

    @property
    def names(self) -> list:
        return [name for name, _, _ in self.calls]

    def __genesis_dispatch__(self, op, args, kwargs):
        out = op(*args, **kwargs)
        self.calls.append((op.name, args, out))
        return out

    def __genesis_backward__(self, node, run):
        self.nodes.append(node.name())
        return run()


def _values(out) -> list:
    return [o.tolist() if isinstance(o, genesis.Tensor) else o for o in flatten_outputs(out)]


_FORWARD = [(op, op.dtypes[0]) for op in OPS]


@pytest.mark.parametrize(("op", "dtype"), _FORWARD, ids=[op.name for op, _ in _FORWARD])
def test_a_mode_sees_every_op_of_the_table_and_changes_nothing(op, dtype):
    for sample, realized in samples_for(op, dtype):
        built = Built(realized, "genesis", "cpu", requires_grad=False)
        plain = op.op(*built.args, **built.kwargs)
        with Recorder() as rec:
            seen = op.op(*built.args, **built.kwargs)
        assert rec.calls, f"{op.name}[{sample.name}]: the mode saw no op"
        for name, _, _ in rec.calls:
            assert name in REGISTRY, name
        torch.testing.assert_close(_values(seen), _values(plain), equal_nan=True)


def test_the_op_counter_of_the_docs():
    class OpCounter(DispatchMode):
        def __init__(self):
            self.counts = collections.Counter()

        def __genesis_dispatch__(self, op, args, kwargs):
            self.counts[op.name] += 1
            return op(*args, **kwargs)

    w = genesis.randn(4, 3, requires_grad=True)
    x = genesis.randn(2, 4)
    with OpCounter() as counter:
        (x @ w).relu().sum().backward()
    assert counter.counts["matmul"] == 2  # forward, and x.T @ g for w's gradient
    assert counter.counts["relu"] == 1 and counter.counts["sum"] == 1
    assert w.grad is not None


def test_a_nan_detector_names_the_op():
    class NanDetector(DispatchMode):
        def __genesis_dispatch__(self, op, args, kwargs):
            out = op(*args, **kwargs)
            for t in flatten_outputs(out):
                if isinstance(t, genesis.Tensor) and t.dtype.is_floating_point \
                        and t.isnan().any():
                    raise FloatingPointError(f"{op.name} produced a NaN")
            return out

    x = genesis.tensor([1.0, -1.0])
    with NanDetector():
        x.exp().sum()  # fine
        with pytest.raises(FloatingPointError, match="log produced a NaN"):
            x.log()
    assert x.log().isnan().any()  # off again: no error


def test_calls_carry_arguments_and_outputs():
    a, b = genesis.tensor([1.0, 2.0]), genesis.tensor([3.0, 4.0])
    with Recorder() as rec:
        c = a * b
    ((name, args, out),) = rec.calls
    assert name == "mul" and args[0] is a and args[1] is b and out is c


def test_a_mode_may_replace_an_ops_result():
    class DoubleExp(DispatchMode):
        def __genesis_dispatch__(self, op, args, kwargs):
            out = op(*args, **kwargs)
            return out * 2 if op.name == "exp" else out

    x = genesis.tensor([0.0, 1.0])
    with DoubleExp():
        y = x.exp() + 1
    torch.testing.assert_close(torch.tensor(y.tolist()), torch.tensor([0.0, 1.0]).exp() * 2 + 1)


def test_backward_nodes_and_their_formulas_are_seen():
    w = genesis.tensor([1.0, 2.0], requires_grad=True)
    y = (w * w).sum()
    with Recorder() as rec:
        y.backward()
    assert rec.nodes == ["SumBackward", "MulBackward"]
    assert "mul" in rec.names  # the formula g * b
    assert w.grad.tolist() == [2.0, 4.0]


def test_factories_random_fills_in_place_edits_views_and_casts_are_seen():
    with Recorder() as rec:
        x = genesis.zeros(2, 3)
        genesis.randn(2)
        x.uniform_()
        x.add_(1.0)
        x.copy_(genesis.ones(2, 3))
        x[0] = 5.0
        x.view(3, 2)
        x[1:]
        x.to(genesis.float64)
    for name in ("zeros", "randn", "uniform_", "add_", "copy_", "ones", "setitem", "view",
                 "slice", "cast"):
        assert name in rec.names, name


def test_modes_nest_innermost_first_and_a_handler_does_not_see_its_own_ops():
    order = []

    class Named(DispatchMode):
        def __init__(self, name):
            self.name = name

        def __genesis_dispatch__(self, op, args, kwargs):
            order.append((self.name, op.name))
            if op.name == "exp":
                genesis.ones(1).neg()  # the handler's own ops: not shown to this mode again
            return op(*args, **kwargs)

    x = genesis.tensor([1.0])
    with Named("outer"), Named("inner"):
        x.exp()
    assert order == [("inner", "exp"), ("outer", "ones"), ("outer", "neg"), ("outer", "exp")]
    assert dispatch._modes == []


def test_an_error_inside_a_mode_leaves_the_stack_as_it_was():
    class Boom(DispatchMode):
        def __genesis_dispatch__(self, op, args, kwargs):
            raise ValueError(op.name)

    mode, x = Boom(), genesis.tensor([1.0])
    with pytest.raises(ValueError, match="exp"):
        with mode:
            x.exp()
    assert dispatch._modes == []
    with pytest.raises(RuntimeError, match="without having been entered"):
        mode.__exit__(None, None, None)


def test_the_registry_names_every_declared_op_and_function():
    import genesis.op_declarations as decl

    for op in decl.UNARY + decl.BINARY + decl.REDUCTIONS:
        assert REGISTRY[op.name].name == op.name
    assert REGISTRY["exp"].function is genesis.exp.function
    assert REGISTRY["log_softmax"].function.__name__ == "LogSoftmax"
    assert dispatch.op_name_of("ScaledDotProductAttention") == "scaled_dot_product_attention"
    assert dispatch.op_name_of("RMSNorm") == "rms_norm"
    assert REGISTRY["zeros"](2).tolist() == [0.0, 0.0]  # a handle runs its op


def test_kernel_forward_functions_run_no_op_while_recorded(monkeypatch):
    """``Function.kernel_forward`` lets the dispatcher record an op without switching grad
    mode off: the claim is that its forward runs no op. Checked on the op table with inputs
    that require grad: no graph node is made while such a forward runs (an op it ran on an
    input would make one). A forward is found running by its code on the stack: the entries
    (``genesis.autograd.entries``) call the forward they were made with, not the class
    attribute, so patching ``cls.forward`` would not see them."""
    forwards = {}  # code of a kernel_forward Function's forward -> op names
    for handle in list(REGISTRY.values()):
        cls = handle.function
        if cls is not None and cls.kernel_forward:
            forwards.setdefault(getattr(cls.forward, "__func__", cls.forward).__code__,
                                []).append(handle.name)
    made, inside = [], []  # nodes made; (forward's op names, node) made while one ran

    def node_made(self):
        made.append(type(self).__name__)
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code in forwards:
                inside.append((forwards[frame.f_code][0], type(self).__name__))
            frame = frame.f_back

    monkeypatch.setattr(Node, "__init__", node_made)
    checked = {name for names in forwards.values() for name in names}
    assert {"add", "mul", "exp", "sum", "slice", "view", "expand", "permute", "cast", "linear",
            "rms_norm", "contiguous"} <= checked
    for op in OPS:
        for _, realized in samples_for(op, op.dtypes[0]):
            built = Built(realized, "genesis", "cpu", requires_grad=True)
            try:
                op.op(*built.args, **built.kwargs)
            except (RuntimeError, TypeError, ValueError, IndexError):
                pass  # (error samples: what ran before the error is still checked)
    x = genesis.ones(4, 4, requires_grad=True)
    made.clear()
    x[1:3].exp().sum()  # x[a:b] through Tensor.__getitem__'s entry, then two entries
    assert inside == []
    assert made == ["SliceBackward", "ExpBackward", "SumBackward"]


def test_x_a_b_is_slice_apply_through_the_getitem_entry():
    """``x[a:b]`` (``Tensor.__getitem__``'s entry, ``entries.slice_key_entry``) is
    ``Slice.apply(x, (slice(a, b),))``: a mode sees that call; with grad it records a
    SliceBackward whose gradient is torch's; in no_grad nothing is recorded; other keys and a
    0-d tensor go through ``getitem`` (torch's errors)."""
    from genesis.ops.strided import Slice

    w = genesis.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], requires_grad=True)
    with Recorder() as rec:
        y = w[1:3]
    ((name, args, out),) = rec.calls
    assert name == "slice" and args[0] is w and args[1] == (slice(1, 3),) and out is y
    assert y.grad_fn.name() == "SliceBackward" and y.grad_fn.next_functions[0][0].variable is w
    assert y.tolist() == Slice.apply(w, (slice(1, 3),)).tolist() == [[3.0, 4.0], [5.0, 6.0]]
    (y * y).sum().backward()
    assert w.grad.tolist() == [[0.0, 0.0], [6.0, 8.0], [10.0, 12.0]]
    with genesis.no_grad():
        assert w[1:].grad_fn is None and not w[1:].requires_grad
    assert w[1, 1:].tolist() == [4.0] and w[None, 1:].shape == (1, 2, 2)  # (getitem's)
    with pytest.raises(IndexError, match="0-dim"):
        genesis.tensor(1.0)[1:]


def test_x_a_b_keeps_its_key_tuple_wherever_the_op_is_seen():
    """The ``x[a:b]`` entry hands ``Slice.forward`` the slice alone (no tuple to make on the
    eager path); whatever sees the op's arguments still gets the key tuple
    ``(slice(a, b),)``: a mode, the recorded node (``ctx.key``, which ``SliceBackward`` and
    a traced backward read) and ``slice_backward``'s call. The forward makes the same view
    from either form, for every kind of bound."""
    from genesis.autograd.function import _NO_GRAD_CTX
    from genesis.ops.strided import Slice

    w = genesis.ones(4, 6, requires_grad=True)
    y = w[1:3]
    assert y.grad_fn.key == (slice(1, 3),) and y.grad_fn.in_shape == (4, 6)
    with Recorder() as rec:
        y.backward(genesis.ones(2, 6))
    ((_, args, _),) = [call for call in rec.calls if call[0] == "slice_backward"]
    assert args[1] == (4, 6) and args[2] == (slice(1, 3),)
    assert w.grad.sum().item() == 12.0

    base = torch.arange(12.0)
    for start, stop, step in ((2, 8, None), (None, -3, None), (1, None, 3), (-100, 100, None),
                              (8, 2, None), (torch.tensor(2).numpy()[()], 7, None),
                              (genesis.tensor(2), 7, 2)):
        k = slice(start, stop, step)
        for x, t in ((genesis.arange(12.0), base), (genesis.arange(12.0)[1:], base[1:])):
            lone, as_tuple = Slice.forward(_NO_GRAD_CTX, x, k), Slice.forward(
                _NO_GRAD_CTX, x, (k,))
            expected = t[slice(*(int(b) if b is not None else None for b in (start, stop,
                                                                              step)))]
            for view in (lone, as_tuple, x[k]):
                assert view.tolist() == expected.tolist(), (k, x.storage_offset())
                assert view.stride() == expected.stride()
                if expected.numel():  # (an empty view's offset: genesis keeps its base's)
                    assert view.storage_offset() == expected.storage_offset()
    with pytest.raises(TypeError):
        genesis.arange(4.0)[1.0:3]


def test_the_three_argument_entry_records_as_apply_does():
    """``entries.ternary_entry`` (``F.linear``, ``rms_norm``) takes ``Function.apply``'s steps:
    a mode sees the call with its three arguments; the op is recorded when any argument
    requires grad (the bias alone here) and not under no_grad; a non-tensor third argument
    (a norm's eps) is a constant."""
    x = genesis.tensor([[1.0, 2.0]])
    w = genesis.tensor([[3.0, 4.0], [5.0, 6.0]])
    b = genesis.tensor([0.5, -0.5], requires_grad=True)
    with Recorder() as rec:
        y = genesis.nn.functional.linear(x, w, b)
    ((name, args, out),) = rec.calls
    assert name == "linear" and args == (x, w, b) and out is y
    assert y.tolist() == [[11.5, 16.5]] and y.grad_fn.name() == "LinearBackward"
    y.sum().backward()
    assert b.grad.tolist() == [1.0, 1.0] and x.grad is None and w.grad is None
    assert genesis.nn.functional.linear(x, w).grad_fn is None  # nothing requires grad
    with genesis.no_grad():
        assert genesis.nn.functional.linear(x, w, b).grad_fn is None
    v = genesis.tensor([[3.0, 4.0]], requires_grad=True)
    with Recorder() as rec:
        r = genesis.nn.functional.rms_norm(v, (2,), eps=1e-6)
    assert rec.names == ["rms_norm"] and rec.calls[0][1][2] == 1e-6
    assert r.grad_fn.name() == "RMSNormBackward"
