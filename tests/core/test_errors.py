"""Bad input gets a clear error that names what was wrong (both shapes, both devices, the
dtype) — never a wrong result, a hang or a crash."""

from __future__ import annotations

import re

import pytest

import genesis
from genesis.backends import registry
from genesis.backends.cpu import CPUBackend


def _raises(exc, pattern, fn, *args, **kwargs):
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    assert re.search(pattern, str(info.value)), f"{str(info.value)!r} !~ {pattern!r}"
    return str(info.value)


# ------------------------------------------------------------ shape mismatch
@pytest.mark.parametrize("op", [
    lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, lambda a, b: a / b,
    lambda a, b: a ** b, lambda a, b: a == b, lambda a, b: a < b, genesis.maximum,
    genesis.minimum, genesis.logical_and, lambda a, b: genesis.where(a > 0, a, b),
    genesis.atan2, lambda a, b: genesis.remainder(a, b),
], ids=["add", "sub", "mul", "div", "pow", "eq", "lt", "maximum", "minimum", "logical_and",
        "where", "atan2", "remainder"])
def test_broadcast_mismatch_names_both_shapes(op):
    a, b = genesis.ones(2, 3), genesis.ones(4, 3)
    msg = _raises(RuntimeError, "broadcast", op, a, b)
    assert "(2, 3)" in msg and "(4, 3)" in msg, msg


def test_other_shape_errors_name_the_shapes():
    _raises(RuntimeError, r"\(2, 3\).*\(2, 4\)", genesis.cat,
            [genesis.ones(2, 3), genesis.ones(2, 4)])
    _raises(RuntimeError, r"\[2, 3\].*\[3, 2\]", genesis.stack,
            [genesis.ones(2, 3), genesis.ones(3, 2)])
    _raises(RuntimeError, r"\[5\].*12", genesis.ones(3, 4).view, 5)
    _raises(RuntimeError, r"expanded size.*\[3, 2\].*\[2, 2\]|\(3\).*\(2\)",
            genesis.ones(2, 2).expand, 3, 2)
    msg = _raises(RuntimeError, "broadcast", genesis.ones(2, 2).copy_, genesis.ones(3))
    assert "(3,)" in msg and "(2, 2)" in msg, msg
    _raises(RuntimeError, r"\[2\].*\[3, 2\]", genesis.ones(2).add_, genesis.ones(3, 2))
    _raises(IndexError, r"mask.*\[3\].*\[2, 3\]", lambda: genesis.ones(2, 3)[
        genesis.tensor([True, False, True])])
    _raises(RuntimeError, r"\(3,\).*\(2, 3\)",
            lambda: (genesis.ones(2, 3, requires_grad=True) * 2).backward(genesis.ones(3)))


@pytest.mark.parametrize(("a", "b", "pattern"), [
    ((2, 3), (4, 5), r"\(2, 3\).*\(4, 5\)"),
    ((3,), (4,), r"\(3,\).*\(4,\)"),
    ((2, 2, 3), (2, 4, 5), r"\(2, 2, 3\).*\(2, 4, 5\)"),
    ((2, 2, 3), (3, 3, 5), r"broadcast|\(2,\).*\(3,\)"),
], ids=["2d", "1d", "batched", "batch-broadcast"])
def test_matmul_mismatch(a, b, pattern):
    _raises(RuntimeError, pattern, genesis.matmul, genesis.ones(*a), genesis.ones(*b))
    _raises(RuntimeError, pattern, lambda: genesis.ones(*a) @ genesis.ones(*b))


def test_mm_bmm_outer_shape_errors():
    _raises(RuntimeError, "2x3 and 4x5", genesis.mm, genesis.ones(2, 3), genesis.ones(4, 5))
    _raises(RuntimeError, "2-D", genesis.mm, genesis.ones(2, 3, 1), genesis.ones(3, 2))
    _raises(RuntimeError, "3-D", genesis.bmm, genesis.ones(2, 3), genesis.ones(3, 2))
    _raises(RuntimeError, r"\(2, 2, 3\).*\(3, 3, 4\)", genesis.bmm, genesis.ones(2, 2, 3),
            genesis.ones(3, 3, 4))
    _raises(RuntimeError, "1-D", genesis.outer, genesis.ones(2, 2), genesis.ones(2))
    _raises(RuntimeError, "1D", genesis.matmul, genesis.ones(()), genesis.ones(2))


# ------------------------------------------------------------ device mismatch
class FakeBackend(CPUBackend):
    """A second device type ('fake') whose kernels are the CPU ones."""

    name = "fake"


@pytest.fixture
def fake_device():
    registry.register("fake", FakeBackend())
    yield "fake"
    registry._loaded.pop("fake", None)
    genesis.device("fake")._backend = None


@pytest.mark.parametrize("op", [
    lambda a, b: a + b, lambda a, b: a * b, genesis.maximum, lambda a, b: a == b,
    genesis.matmul, lambda a, b: genesis.cat([a, b]),
    lambda a, b: genesis.where(b > 0, a, b), lambda a, b: a.gather(0, b.long()),
    lambda a, b: a.index_select(0, b.long().flatten()),
    lambda a, b: a.masked_fill(b > 0, 1.0), lambda a, b: genesis.stack([a, b]),
    lambda a, b: a.index_add(0, b.long()[0], b), lambda a, b: a.scatter(0, b.long(), b),
], ids=["add", "mul", "maximum", "eq", "matmul", "cat", "where", "gather", "index_select",
        "masked_fill", "stack", "index_add", "scatter"])
def test_device_mismatch_names_both_devices(fake_device, op):
    a = genesis.ones(2, 2, device=fake_device)
    b = genesis.zeros(2, 2)
    assert a.device.type == "fake" and (a * 2).device.type == "fake"
    msg = _raises(RuntimeError, "device", op, a, b)
    assert "fake" in msg and "cpu" in msg, msg
    msg = _raises(RuntimeError, "device", op, b, a)
    assert "fake" in msg and "cpu" in msg, msg


def test_zero_dim_cpu_tensor_may_meet_another_device(fake_device):
    a = genesis.ones(3, device=fake_device)
    out = a * genesis.tensor(2.0)  # torch allows a 0-d CPU tensor as a scalar
    assert out.device.type == "fake" and out.tolist() == [2.0, 2.0, 2.0]


def test_to_other_device_and_back_keeps_values_and_grads(fake_device):
    x = genesis.tensor([1.0, 2.0], requires_grad=True)
    y = x.to(fake_device)
    assert y.device.type == "fake"
    (y * y).sum().backward()
    assert x.grad.device.type == "cpu" and x.grad.tolist() == [2.0, 4.0]


@pytest.fixture
def without_cuda_plugin(monkeypatch):
    """The registry as if genesis-cuda were not installed (whether or not it is)."""
    eps = {k: v for k, v in registry._discover().items() if k != "cuda"}
    monkeypatch.setattr(registry, "_entry_points", eps)
    monkeypatch.delitem(registry._loaded, "cuda", raising=False)
    for spec in ("cuda", "cuda:1"):
        monkeypatch.setattr(genesis.device(spec), "_backend", None)


def test_cuda_without_plugin_says_what_to_install(without_cuda_plugin):
    assert genesis.cuda.is_available() is False and genesis.cuda.device_count() == 0
    msg = _raises(RuntimeError, "genesis-cuda", genesis.zeros, 2, device="cuda")
    assert "pip install" in msg
    _raises(RuntimeError, "genesis-cuda", genesis.ones(2).cuda)
    _raises(RuntimeError, "genesis-cuda", genesis.ones(2).to, "cuda:1")


def test_unknown_device_strings():
    _raises(ValueError, "invalid device", genesis.device, "cuda:x")
    _raises(ValueError, "invalid device", genesis.device, ":0")
    _raises(RuntimeError, "'tpu'.*entry-point", genesis.zeros, 2, device="tpu")


# ----------------------------------------------------------------- dtype errors
def test_dtype_errors_name_the_dtypes():
    _raises(RuntimeError, "float32.*float64|Float.*Double", genesis.matmul,
            genesis.ones(2, 2), genesis.ones(2, 2, dtype=genesis.float64))
    _raises(RuntimeError, "int64", genesis.mean, genesis.ones(2, dtype=genesis.int64))
    _raises(RuntimeError, "floating", genesis.softmax, genesis.ones(2, dtype=genesis.int64), 0)
    _raises(RuntimeError, "floating point.*int64",
            genesis.ones(2, dtype=genesis.int64).requires_grad_)
    _raises(TypeError, "integer|bool", genesis.bitwise_and, genesis.ones(2), genesis.ones(2))
    _raises(TypeError, "bool", genesis.where, genesis.ones(2), genesis.ones(2), genesis.ones(2))
    _raises(RuntimeError, "bool.*int64|int64.*bool|boolean", genesis.ones(2).masked_fill,
            genesis.ones(2, dtype=genesis.int64), 1.0)
    _raises(IndexError, "long, int or bool", lambda: genesis.ones(3)[genesis.tensor([0.0])])
    _raises(RuntimeError, "int32/int64.*int16", genesis.gather, genesis.ones(2, 2), 0,
            genesis.zeros(2, 2, dtype=genesis.int16))
    _raises(RuntimeError, "float32.*float64|float64.*float32", genesis.scatter,
            genesis.ones(2, 2), 0, genesis.zeros(1, 2, dtype=genesis.int64),
            genesis.ones(1, 2, dtype=genesis.float64))
    _raises(RuntimeError, "can't be cast.*int64|Long", genesis.ones(2, dtype=genesis.int64).mul_,
            1.5)
    _raises(RuntimeError, "one_hot.*int32|Long", genesis.ops.one_hot,
            genesis.zeros(2, dtype=genesis.int32))
    _raises(TypeError, "floating", genesis.set_default_dtype, genesis.int32)


def test_bool_subtraction_and_negative_int_powers_raise():
    b = genesis.tensor([True, False])
    _raises(RuntimeError, "Subtraction.*bool", lambda: b - b)
    _raises(RuntimeError, "Subtraction.*bool", lambda: genesis.ones(2) - True)
    _raises(RuntimeError, "negative integer powers", lambda: genesis.tensor([2, 3]) ** -1)
    _raises(RuntimeError, "ZeroDivision|division by zero",
            lambda: genesis.tensor([2, 3]) // genesis.tensor([0, 1]))


# ------------------------------------------------------------ index errors
def test_index_errors_are_clear():
    x = genesis.ones(2, 3)
    _raises(IndexError, "index 2 is out of bounds for dimension 0 with size 2", lambda: x[2])
    _raises(IndexError, "out of bounds", lambda: x[:, genesis.tensor([0, 3])])
    _raises(IndexError, "out of bounds", lambda: x.__setitem__(genesis.tensor([5]), 1.0))
    _raises(IndexError, "too many indices", lambda: x[0, 0, 0])
    _raises(IndexError, "Dimension out of range.*got 2", x.sum, 2)
    _raises(IndexError, "Dimension out of range.*got -3", x.softmax, -3)
    _raises(IndexError, "out of bounds", x.index_select, 1, genesis.tensor([3]))
    _raises(IndexError, "out of bounds", x.gather, 1, genesis.tensor([[0, 3]]))
    _raises(IndexError, "single ellipsis", lambda: x[..., ...])
    _raises(ValueError, "step", lambda: x[::-1])
    _raises(TypeError, "slice indices must be integers", lambda: x[1.0:2])
    _raises(IndexError, "slice\\(\\) cannot be applied to a 0-dim tensor", lambda: x.sum()[1:2])
    w = genesis.ones(3, requires_grad=True).sum()
    _raises(IndexError, "slice\\(\\) cannot be applied to a 0-dim tensor", lambda: w[:])
    _raises(RuntimeError, "only one dimension", x.view, -1, -1)
    _raises(RuntimeError, "permutation", x.permute, 0, 0)


def test_index_value_checks_read_the_device_only_when_asked(monkeypatch):
    """Off the CPU, index bounds are not read back to the host (no sync per gather): a
    negative ``x[index]`` still wraps, on the device; GENESIS_DEVICE_CHECKS turns the check
    back on there."""
    from genesis.ops import common

    _register_toy()
    x = genesis.arange(6.0).reshape(2, 3).to("toy:0")
    assert common.checks_values(x.cpu()) and not common.checks_values(x)

    def no_host_read(*_):
        raise AssertionError("an index check read a device tensor on the host")

    for name in ("__int__", "item", "tolist"):
        monkeypatch.setattr(genesis.Tensor, name, no_host_read)
    idx = genesis.tensor([-1, 0]).to("toy:0")
    got = [x[:, idx], x.index_select(1, idx.remainder(3)), x.gather(1, idx.abs().view(1, 2))]
    monkeypatch.undo()
    assert got[0].cpu().tolist() == [[2.0, 0.0], [5.0, 3.0]]
    assert got[1].cpu().tolist() == [[2.0, 0.0], [5.0, 3.0]]
    assert got[2].cpu().tolist() == [[1.0, 0.0]]
    monkeypatch.setattr(common, "DEVICE_VALUE_CHECKS", True)
    bad = genesis.tensor([[0, 3]]).to("toy:0")
    _raises(IndexError, "index 3 is out of bounds for dimension with size 3", x.gather, 1, bad)


# ------------------------------------------------ in-place on saved / leaf tensors
def test_in_place_on_saved_tensor_raises_at_backward():
    x = genesis.tensor([1.0, 2.0], requires_grad=True)
    y = x.sigmoid()
    y.add_(1)
    msg = _raises(RuntimeError, "modified by an inplace operation", y.sum().backward)
    assert "version 1" in msg and "expected version 0" in msg and "[2]" in msg


def test_in_place_on_leaf_raises_at_once():
    x = genesis.ones(2, requires_grad=True)
    _raises(RuntimeError, "leaf Variable that requires grad", x.add_, 1)
    _raises(RuntimeError, "leaf Variable that requires grad", x.__setitem__, 0, 2.0)
    _raises(RuntimeError, "view of a leaf Variable", x[:1].mul_, 2)
    assert x.tolist() == [1.0, 1.0]  # nothing was written


def test_backward_errors():
    x = genesis.ones(2, 2, requires_grad=True)
    msg = _raises(RuntimeError, "only for scalar outputs", (x * 2).backward)
    assert "(2, 2)" in msg
    _raises(RuntimeError, "does not require grad", genesis.ones(2).sum().backward)
    y = (x * x).sum()
    y.backward()
    _raises(RuntimeError, "second time.*retain_graph=True", y.backward)
    _raises(RuntimeError, "allow_unused", genesis.autograd.grad, (x * 2).sum(),
            [x, genesis.ones(1, requires_grad=True)])


# -------------------------------------------------------------- misc misuse
def test_misc_misuse_is_reported():
    _raises(TypeError, "genesis.tensor", genesis.Tensor)
    _raises(TypeError, "pickl|genesis.save", lambda: __import__("pickle").dumps(genesis.ones(2)))
    _raises(RuntimeError, "min.*max", genesis.clamp, genesis.ones(2))
    _raises(RuntimeError, "k", genesis.topk, genesis.ones(3), 4)
    _raises(RuntimeError, "chunks", genesis.chunk, genesis.ones(3), 0)
    _raises(RuntimeError, "split_size|positive", genesis.split, genesis.ones(3), 0)
    _raises(RuntimeError, "repeats", genesis.ones(3).repeat_interleave, genesis.tensor([1, 2]))
    _raises(RuntimeError, "2 dimensions", genesis.tril, genesis.ones(3))
    _raises(RuntimeError, "non-empty", genesis.cat, [])
    _raises(RuntimeError, "exceeds", genesis.ones(3).narrow, 0, 2, 2)


def test_copy_between_devices_is_allowed(fake_device):
    """copy_ (like torch's) moves data across devices rather than refusing."""
    a = genesis.zeros(2, device=fake_device)
    a.copy_(genesis.tensor([1.0, 2.0]))
    assert a.device.type == "fake" and a.tolist() == [1.0, 2.0]


def test_cuda_plugin_without_gpu_says_so():
    if "cuda" not in registry.installed() or genesis.cuda.is_available():
        pytest.skip("needs genesis-cuda installed on a machine without a usable GPU")
    _raises(RuntimeError, "(?i)cuda.*device|device.*cuda", genesis.zeros, 2, device="cuda")


# ------------------------------------------- device mismatch for every op of the table
# Ops where torch itself accepts a tensor of another device: copies (copy_, x[slice] = v),
# shape-only arguments (expand_as, view_as), and repeat counts read on the host.
_CROSS_DEVICE_OK = {"copy_", "copy_view", "setitem", "expand_as", "view_as",
                    "repeat_interleave"}


def _mixed_device_params():
    from op_table import OPS, Built, samples_for

    params = []
    for op in OPS:
        dtype = "float32" if "float32" in op.dtypes else op.dtypes[0]
        for sample, realized in samples_for(op, dtype):
            built = Built(realized, "genesis", "cpu", requires_grad=False)
            tensors = [a for a in _flat(list(built.args) + list(built.kwargs.values()))
                       if isinstance(a, genesis.Tensor)]
            if op.name in _CROSS_DEVICE_OK:
                break
            if len(tensors) >= 2 and all(t.ndim > 0 for t in tensors):
                params.append(pytest.param(op, realized, id=f"{op.name}-{sample.name}"))
                break
    return params


def _flat(items):
    out = []
    for a in items:
        if isinstance(a, (list, tuple)):
            out.extend(_flat(a))
        else:
            out.append(a)
    return out


@pytest.mark.parametrize(("op", "realized"), _mixed_device_params())
def test_every_multi_tensor_op_names_both_devices(op, realized):
    """Each op of the table, with its inputs spread over 'cpu' and the toy device, refuses
    with an error that names both devices (never computes, never crashes in a kernel)."""
    from op_table import Built

    _register_toy()
    built = Built(realized, "genesis", "cpu", requires_grad=False)
    moved = [False]

    def move_last(obj):
        # move the last tensor argument to the toy device
        if isinstance(obj, list):
            return [move_last(o) for o in reversed(obj)][::-1]
        if isinstance(obj, tuple):
            return tuple(move_last(o) for o in reversed(obj))[::-1]
        if isinstance(obj, genesis.Tensor) and not moved[0]:
            moved[0] = True
            return obj.to("toy:0")
        return obj

    args = move_last(list(built.args))
    kwargs = built.kwargs
    with pytest.raises((RuntimeError, IndexError, TypeError)) as info:
        op.op(*args, **kwargs)
    msg = str(info.value)
    assert "toy" in msg and "cpu" in msg, f"{op.name}: {msg}"


def _register_toy():
    import os
    import sys

    if registry.is_loaded("toy"):
        return
    src = os.path.join(os.path.dirname(__file__), os.pardir, "backends", "toy_plugin", "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    from genesis_toy.backend import ToyBackend

    registry.register("toy", ToyBackend())


def test_assigning_a_mismatched_grad_raises():
    x = genesis.zeros(2, requires_grad=True)
    _raises(RuntimeError, r"gradient of size \[3\] to a tensor of size \[2\]", setattr, x, "grad",
            genesis.ones(3))
    _raises(RuntimeError, "dtype genesis.int64 to a tensor with dtype genesis.float32", setattr,
            x, "grad", genesis.ones(2, dtype=genesis.int64))
    _raises(TypeError, "Tensor or None", setattr, x, "grad", [1.0, 2.0])
    x.grad = genesis.ones(2)  # a matching gradient is accepted, and None clears it
    assert x.grad.tolist() == [1.0, 1.0]
    x.grad = None
    assert x.grad is None


# ------------------------------------------------------------ not a tensor
@pytest.mark.parametrize("fn, name", [(genesis.exp, "exp"), (genesis.neg, "neg"),
                                      (genesis.sigmoid, "sigmoid")])
def test_a_unary_op_of_a_number_names_the_op_and_the_type(fn, name):
    # the dispatcher's entry reads the input's requires_grad first; a number has none
    _raises(TypeError, rf"{name}\(\).*must be a Tensor, not float", fn, 3.0)
    _raises(TypeError, rf"{name}\(\).*not list", fn, [1.0])


@pytest.mark.parametrize("other", [3.0, [1.0, 2.0], None])
def test_matmul_of_a_non_tensor_names_both_operand_types(other):
    m = genesis.ones(2, 2)
    kind = type(other).__name__
    _raises(TypeError, rf"matmul expects two tensors, got Tensor and {kind}", genesis.matmul,
            m, other)
    _raises(TypeError, rf"matmul expects two tensors, got {kind} and Tensor", genesis.matmul,
            other, m)


def test_matmul_of_an_array_with_a_shape_names_both_operand_types():
    np = pytest.importorskip("numpy")
    _raises(TypeError, r"matmul expects two tensors, got Tensor and ndarray", genesis.matmul,
            genesis.ones(2, 2), np.ones((2, 2)))
