"""The Tensor API against torch: metadata, host access, numpy/DLPack exchange, conversion,
copies and in-place writes, creation functions, RNG reproducibility, default dtype, repr."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from op_table import ALL, g_dtype, t_dtype, to_torch

import genesis


# ----------------------------------------------------------------- metadata
def test_the_tensor_class_is_not_a_constructor():
    """``genesis.Tensor(...)`` and a subclass without ``__new__`` say how tensors are made;
    a subclass with its own ``__new__`` (``nn.Parameter``) constructs."""
    refusal = r"genesis\.tensor\(\.\.\.\).*not Tensor\(\.\.\.\)"
    for args in (([1.0],), (), (2, 3)):
        with pytest.raises(TypeError, match=refusal):
            genesis.Tensor(*args)

    class Plain(genesis.Tensor):
        __slots__ = ()

    with pytest.raises(TypeError, match=r"not Plain\(\.\.\.\)"):
        Plain()

    class Made(genesis.Tensor):
        __slots__ = ()

        def __new__(cls, data):
            return genesis.Tensor._make_subclass(cls, data)

    made = Made(genesis.ones(2))
    assert type(made) is Made and made.tolist() == [1.0, 1.0]


def test_shape_size_dtype_device_ndim_numel():
    x = genesis.zeros(2, 3, 4)
    assert x.shape == (2, 3, 4) and isinstance(x.shape, genesis.Size)
    assert x.size() == (2, 3, 4) and x.size(1) == 3 and x.size(-1) == 4
    assert x.dtype is genesis.float32 and x.device == genesis.device("cpu")
    assert x.device == "cpu" and str(x.device) == "cpu"
    assert x.ndim == 3 and x.dim() == 3 and x.numel() == 24 and len(x) == 2
    assert x.element_size() == 4 and x.nbytes == 96
    assert genesis.zeros(()).ndim == 0 and genesis.zeros(()).numel() == 1
    assert genesis.zeros(0, 3).numel() == 0
    assert repr(genesis.Size([2, 3])) == "genesis.Size([2, 3])"
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.size(3)
    with pytest.raises(TypeError):
        len(genesis.zeros(()))


@pytest.mark.parametrize("make", [
    lambda lib: lib.zeros(2, 3, 4),
    lambda lib: lib.zeros(2, 3, 4).transpose(0, 2),
    lambda lib: lib.zeros(4, 6)[::2, 1::3],
    lambda lib: lib.zeros(3, 1).expand(3, 4),
    lambda lib: lib.zeros(2, 3, 4).permute(1, 2, 0)[1],
    lambda lib: lib.zeros(5, 4)[2:],
    lambda lib: lib.zeros(()),
    lambda lib: lib.zeros(0, 3),
    lambda lib: lib.zeros(2, 1, 3).unsqueeze(1).squeeze(2),
], ids=["contig", "transposed", "strided", "expanded", "permuted-select", "offset", "0-d",
        "empty", "unsqueeze-squeeze"])
def test_strides_contiguity_offset_match_torch(make):
    g, t = make(genesis), make(torch)
    assert g.shape == tuple(t.shape)
    assert g.stride() == t.stride()
    assert g.storage_offset() == t.storage_offset()
    assert g.is_contiguous() == t.is_contiguous()
    c = g.contiguous()
    assert c.is_contiguous() and c.stride() == t.contiguous().stride()
    if g.is_contiguous():
        assert c is g  # no copy when already contiguous, as torch
    if g.ndim:
        assert g.stride(-1) == t.stride(-1)


def test_views_share_memory_and_copies_do_not():
    x = genesis.zeros(3, 4)
    for v in (x.view(12), x.reshape(2, 6), x.T, x[1], x[:, ::2], x.unsqueeze(0),
              x.narrow(1, 1, 2), x.flatten(), x.expand(2, 3, 4), x.detach()):
        assert v.data_ptr() >= x.data_ptr()
    y = x.view(12)
    y[5] = 7.0
    assert x[1, 1].item() == 7.0
    c = x.clone()
    c.fill_(1.0)
    assert x.sum().item() == 7.0
    r = x.T.reshape(12)  # not viewable: a copy
    r.fill_(0.0)
    assert x.sum().item() == 7.0


# -------------------------------------------------------------- host access
@pytest.mark.parametrize("dtype", ALL)
def test_item_and_tolist_match_torch(dtype):
    data = np.array([[1.5, -2.0, 0.0], [3.25, 4.0, 1.0]])
    t = torch.tensor(data).abs().to(t_dtype(dtype)) if dtype == "uint8" \
        else torch.tensor(data).to(t_dtype(dtype))
    g = genesis.tensor(t.float().numpy() if dtype == "bfloat16" else t.numpy()).to(
        g_dtype(dtype))
    assert g.tolist() == t.tolist()
    assert g[1, 0].item() == t[1, 0].item()
    assert type(g[1, 0].item()) is type(t[1, 0].item())
    assert genesis.tensor(5).tolist() == 5


def test_item_errors_and_python_conversions():
    with pytest.raises(RuntimeError, match="2 elements"):
        genesis.ones(2).item()
    assert float(genesis.tensor([2.5])) == 2.5 and int(genesis.tensor(3)) == 3
    assert bool(genesis.tensor([1.0])) and not bool(genesis.tensor(0))
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(genesis.ones(2))
    assert [1, 2, 3][genesis.tensor(1)] == 2  # __index__
    with pytest.raises(TypeError):
        [1, 2][genesis.tensor(1.0)]
    assert [v.item() for v in genesis.arange(3)] == [0, 1, 2]


def test_numpy_shares_memory_both_ways():
    x = genesis.zeros(3)
    a = x.numpy()
    a[0] = 5.0
    assert x[0].item() == 5.0
    x[1] = 7.0
    assert a[1] == 7.0
    arr = np.arange(6, dtype=np.float64).reshape(2, 3)
    y = genesis.from_numpy(arr)
    assert y.dtype is genesis.float64 and y.shape == (2, 3)
    arr[0, 0] = 42
    assert y[0, 0].item() == 42
    y[1, 2] = -1
    assert arr[1, 2] == -1
    z = genesis.as_tensor(arr)
    z[0, 1] = 9
    assert arr[0, 1] == 9
    t = genesis.tensor(arr)  # tensor() copies
    t[0, 0] = 0
    assert arr[0, 0] == 42


def test_numpy_of_non_contiguous_and_dtypes():
    x = genesis.arange(12).reshape(3, 4).T
    np.testing.assert_array_equal(x.numpy(), np.arange(12).reshape(3, 4).T)
    for dt in ALL:
        if dt == "bfloat16":
            continue
        assert genesis.zeros(2, dtype=g_dtype(dt)).numpy().dtype == np.dtype(
            "bool" if dt == "bool" else dt)
    with pytest.raises(TypeError, match="(?i)bfloat16"):
        genesis.zeros(2, dtype=genesis.bfloat16).numpy()
    with pytest.raises(RuntimeError, match="requires grad"):
        genesis.zeros(2, requires_grad=True).numpy()
    with pytest.raises(TypeError, match="float128|complex|convert"):
        genesis.from_numpy(np.zeros(2, dtype=np.complex64))


@pytest.mark.parametrize("dtype", ALL)
def test_dlpack_round_trip_with_torch(dtype):
    t = torch.arange(6).reshape(2, 3).to(t_dtype(dtype))
    g = genesis.from_dlpack(t)
    assert g.dtype is g_dtype(dtype) and g.shape == (2, 3)
    torch.testing.assert_close(to_torch(g), t)
    t[0, 0] = 1  # shared memory
    assert g[0, 0].item() == t[0, 0].item()
    back = torch.from_dlpack(g)
    g[1, 2] = 0
    assert back[1, 2].item() == 0
    torch.testing.assert_close(back, t)


def test_view_and_reshape_refuse_float_sizes_after_int_ones():
    """Resolved shapes are cached per (shape, sizes); 2.0 == 2 must not reach that cache."""
    x = genesis.zeros(2, 3)
    assert x.view(3, 2).shape == (3, 2) and x.reshape(3, 2).shape == (3, 2)
    for make in (lambda: x.view(3.0, 2), lambda: x.reshape(3.0, 2),
                 lambda: x.reshape((3, 2.0))):
        with pytest.raises(TypeError):
            make()
    with pytest.raises(TypeError):  # as torch
        torch.zeros(2, 3).reshape(3.0, 2)


def test_dlpack_with_numpy_and_views():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    g = genesis.from_dlpack(a)
    a[2, 3] = -1
    assert g[2, 3].item() == -1
    b = np.from_dlpack(g.T)
    np.testing.assert_array_equal(b, a.T)
    assert genesis.ones(2).__dlpack_device__()[0] == 1  # kDLCPU
    with pytest.raises(RuntimeError, match="require"):
        genesis.ones(2, requires_grad=True).__dlpack__()


# ---------------------------------------------------------------- conversion
@pytest.mark.parametrize(("src", "dst"), [(s, d) for s in ALL for d in ALL
                                          if s != d and (s in ("float32", "bool", "int64")
                                                         or d in ("float32", "bool"))])
def test_to_dtype_matches_torch(src, dst):
    t = torch.tensor([[-2.5, 0.0, 1.0], [3.75, 250.0, -1.0]]).to(t_dtype(src))
    g = genesis.tensor(t.float().numpy()).to(g_dtype(src)) if src == "bfloat16" \
        else genesis.tensor(t.numpy())
    out = g.to(g_dtype(dst))
    torch.testing.assert_close(to_torch(out), t.to(t_dtype(dst)))


def test_to_variants_and_identity():
    x = genesis.ones(2)
    assert x.to(genesis.float32) is x and x.to("cpu") is x and x.cpu() is x
    assert x.to("cpu", genesis.float64).dtype is genesis.float64
    assert x.to(dtype=genesis.int32).dtype is genesis.int32
    assert x.to(genesis.zeros(1, dtype=genesis.int8)).dtype is genesis.int8
    y = x.to(genesis.float32, copy=True)
    assert y is not x and y.data_ptr() != x.data_ptr()
    assert x.double().dtype is genesis.float64 and x.half().dtype is genesis.float16
    assert x.long().dtype is genesis.int64 and x.bool().dtype is genesis.bool
    assert x.bfloat16().dtype is genesis.bfloat16 and x.int().dtype is genesis.int32
    assert x.type_as(genesis.zeros(1, dtype=genesis.int16)).dtype is genesis.int16


def test_to_is_differentiable():
    x = genesis.tensor([1.5, 2.0], requires_grad=True)
    (x.to(genesis.float64) * 2).sum().backward()
    assert x.grad.dtype is genesis.float32
    torch.testing.assert_close(to_torch(x.grad), torch.tensor([2.0, 2.0]))


def test_clone_detach_copy_fill_zero():
    x = genesis.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    c = x.clone()
    assert c.requires_grad and c.grad_fn is not None and c.data_ptr() != x.data_ptr()
    d = x.detach()
    assert not d.requires_grad and d.data_ptr() == x.data_ptr()
    t = x.T.clone()
    assert t.is_contiguous()
    y = genesis.zeros(2, 2)
    y.copy_(genesis.tensor([5, 6]))  # broadcast and cast, as torch
    assert y.tolist() == [[5.0, 6.0], [5.0, 6.0]]
    y.copy_(genesis.tensor([[1.0, 2.0], [3.0, 4.0]]).T)
    assert y.tolist() == [[1.0, 3.0], [2.0, 4.0]]
    assert y.fill_(2.5) is y and y.tolist() == [[2.5, 2.5], [2.5, 2.5]]
    y.fill_(genesis.tensor(1.5))
    assert y.sum().item() == 6.0
    assert y.zero_() is y and y.sum().item() == 0.0
    v = y[:, 1]
    v.fill_(3)
    assert y.tolist() == [[0.0, 3.0], [0.0, 3.0]]
    with pytest.raises(RuntimeError, match=r"\(3,\)|\[3\]"):
        y.copy_(genesis.ones(3))


@pytest.mark.parametrize("op", ["add_", "sub_", "mul_", "div_", "pow_", "remainder_",
                                "__iadd__", "__isub__", "__imul__", "__itruediv__"])
@pytest.mark.parametrize("layout", ["contig", "transposed", "broadcast-other", "scalar"])
def test_in_place_arithmetic_matches_torch(op, layout):
    def run(lib):
        x = lib.tensor(np.arange(1.0, 7.0).reshape(2, 3))
        y = lib.tensor(np.arange(2.0, 8.0).reshape(3, 2)).T / 4
        target = x.T.contiguous().T if layout == "transposed" else x
        other = {"contig": y, "transposed": y, "broadcast-other": y[0], "scalar": 1.5}[layout]
        out = getattr(target, op)(other)
        assert out is target
        return target

    torch.testing.assert_close(to_torch(run(genesis)), run(torch))


def test_in_place_dtype_rules_match_torch():
    x = genesis.ones(3, dtype=genesis.int64)
    x += 2  # int stays int
    assert x.dtype is genesis.int64 and x.tolist() == [3, 3, 3]
    with pytest.raises(RuntimeError, match="can't be cast"):
        x += 1.5  # torch: result type Float can't be cast to Long
    with pytest.raises(RuntimeError, match="can't be cast"):
        x.div_(2)
    f = genesis.ones(3, dtype=genesis.float16)
    f.mul_(genesis.tensor([2.0, 3.0, 4.0], dtype=genesis.float64))  # downcast in place: ok
    assert f.dtype is genesis.float16 and f.tolist() == [2.0, 3.0, 4.0]
    with pytest.raises(RuntimeError, match=r"\[3\].*\[2, 3\]|\(3,\).*\(2, 3\)"):
        genesis.ones(3).add_(genesis.ones(2, 3))


# ------------------------------------------------------------------ creation
def _same(g, t):
    torch.testing.assert_close(to_torch(g), t)


@pytest.mark.parametrize("make", [
    lambda lib: lib.tensor([[1, 2], [3, 4]]),
    lambda lib: lib.tensor([1.5, 2]),
    lambda lib: lib.tensor([True, False]),
    lambda lib: lib.tensor(3.5),
    lambda lib: lib.tensor([]),
    lambda lib: lib.tensor([[1, 2]], dtype=lib.float16),
    lambda lib: lib.tensor(np.array([1, 2], dtype=np.int16)),
    lambda lib: lib.tensor([lib.tensor(1.0), lib.tensor(2.0)]),
    lambda lib: lib.tensor(np.float64(2.5)), lambda lib: lib.tensor([np.float64(1.0), 2.0]),
    lambda lib: lib.tensor([np.int32(1), 2]), lambda lib: lib.tensor([np.int16(1), np.float32(2)]),
    lambda lib: lib.tensor([np.uint8(1), np.int8(-1)]), lambda lib: lib.tensor([np.float16(1), 1]),
    lambda lib: lib.tensor([np.bool_(True), False]), lambda lib: lib.tensor([True, 2]),
    lambda lib: lib.as_tensor([1, 2], dtype=lib.int8),
    lambda lib: lib.zeros(2, 3), lambda lib: lib.zeros((2, 3), dtype=lib.int32),
    lambda lib: lib.ones([4]), lambda lib: lib.ones(2, dtype=lib.bool),
    lambda lib: lib.full((2, 2), 7), lambda lib: lib.full((2,), 1.5),
    lambda lib: lib.full((2,), True), lambda lib: lib.full((2, 1), 3, dtype=lib.float64),
    lambda lib: lib.zeros_like(lib.ones(2, 3, dtype=lib.int8)),
    lambda lib: lib.ones_like(lib.ones(2, dtype=lib.float64)),
    lambda lib: lib.full_like(lib.ones(2, 2), 4.5),
    lambda lib: lib.full_like(lib.ones(2, dtype=lib.int64), 3),
    lambda lib: lib.empty(2, 3).shape, lambda lib: lib.empty_like(lib.ones(3, 1)).shape,
    lambda lib: lib.arange(5), lambda lib: lib.arange(1, 4, 0.5), lambda lib: lib.arange(5.0),
    lambda lib: lib.arange(10, 0, -3), lambda lib: lib.arange(0, 1, 0.1),
    lambda lib: lib.arange(3, dtype=lib.float16),
    lambda lib: lib.linspace(0, 1, 5), lambda lib: lib.linspace(-1, 1, 1),
    lambda lib: lib.linspace(0, 10, 7, dtype=lib.float64), lambda lib: lib.linspace(2, 3, 0),
    lambda lib: lib.eye(3), lambda lib: lib.eye(2, 4, dtype=lib.int64),
], ids=lambda f: "")
def test_creation_matches_torch(make):
    g, t = make(genesis), make(torch)
    if isinstance(t, torch.Size):
        assert tuple(g) == tuple(t)
    else:
        _same(g, t)


def test_creation_requires_grad_and_errors():
    assert genesis.zeros(2, requires_grad=True).requires_grad
    assert genesis.tensor([1.0], requires_grad=True).is_leaf
    with pytest.raises(RuntimeError, match="negative"):
        genesis.zeros(-1)
    with pytest.raises(RuntimeError, match="step"):
        genesis.arange(0, 5, 0)
    with pytest.raises(RuntimeError, match="inconsistent"):
        genesis.arange(5, 0, 1)
    with pytest.raises(TypeError, match="infer dtype"):
        genesis.tensor([object()])
    with pytest.raises(TypeError, match="ints"):
        genesis.zeros(2.5)  # never silently truncated
    assert genesis.zeros(np.int64(2), genesis.tensor(3)).shape == (2, 3)
    x = genesis.ones(2, dtype=genesis.float64)
    assert x.new_zeros(3).dtype is genesis.float64 and x.new_ones((2, 2)).shape == (2, 2)
    assert x.new_full((2,), 3).tolist() == [3.0, 3.0] and x.new_tensor([1]).dtype is x.dtype
    assert x.new_empty(4).shape == (4,)


def test_random_creation_shapes_dtypes_ranges():
    genesis.manual_seed(0)
    r = genesis.rand(1000)
    assert r.dtype is genesis.float32 and 0 <= r.min().item() and r.max().item() < 1
    n = genesis.randn(2000, dtype=genesis.float64)
    assert n.dtype is genesis.float64 and abs(n.mean().item()) < 0.1
    assert abs(n.std().item() - 1) < 0.1
    i = genesis.randint(3, 7, (500,))
    assert i.dtype is genesis.int64 and i.min().item() >= 3 and i.max().item() <= 6
    assert genesis.randint(5, (2, 2)).shape == (2, 2)
    p = genesis.randperm(10)
    assert sorted(p.tolist()) == list(range(10)) and p.dtype is genesis.int64
    u = genesis.empty(500).uniform_(-2, 3)
    assert -2 <= u.min().item() and u.max().item() < 3
    m = genesis.empty(3000, dtype=genesis.float64).normal_(5, 2)
    assert abs(m.mean().item() - 5) < 0.2 and abs(m.std().item() - 2) < 0.2
    assert genesis.rand(2, 3, dtype=genesis.bfloat16).dtype is genesis.bfloat16
    assert genesis.randn_like(genesis.ones(2, dtype=genesis.float64)).dtype is genesis.float64
    with pytest.raises(RuntimeError):
        genesis.randint(5, 5, (2,))
    with pytest.raises(RuntimeError, match="std"):
        genesis.empty(2).normal_(0, -1)


def _draws():
    return [genesis.rand(4), genesis.randn(3), genesis.randint(0, 100, (5,)),
            genesis.randperm(6), genesis.empty(3).uniform_(), genesis.empty(2).normal_()]


def _as_lists(ts):
    return [t.tolist() for t in ts]


def test_manual_seed_alone_reproduces_every_random_op():
    genesis.manual_seed(1234)
    a = _as_lists(_draws())
    genesis.manual_seed(1234)
    b = _as_lists(_draws())
    genesis.manual_seed(4321)
    c = _as_lists(_draws())
    assert a == b and a != c


def test_generator_objects_are_independent_streams():
    g1 = genesis.Generator().manual_seed(7)
    g2 = genesis.Generator().manual_seed(7)
    genesis.manual_seed(0)
    x1 = genesis.rand(5, generator=g1).tolist()
    genesis.rand(10)  # the default stream does not disturb g2
    x2 = genesis.rand(5, generator=g2).tolist()
    assert x1 == x2
    assert g1.initial_seed() == 7
    state = g1.get_state()
    assert state.dtype is genesis.uint8 and state.ndim == 1
    y1 = genesis.randn(3, generator=g1).tolist()
    g1.set_state(state)
    assert genesis.randn(3, generator=g1).tolist() == y1
    assert genesis.randperm(5, generator=g2).shape == (5,)


def test_get_set_rng_state_and_fork_rng():
    genesis.manual_seed(3)
    state = genesis.get_rng_state()
    a = genesis.rand(3).tolist()
    genesis.set_rng_state(state)
    assert genesis.rand(3).tolist() == a
    genesis.manual_seed(5)
    with genesis.fork_rng():
        inside = genesis.rand(3).tolist()
    after = genesis.rand(3).tolist()
    assert inside == after  # the block's draws were undone
    assert genesis.initial_seed() == 5


def test_random_draws_are_thread_safe_to_call():
    errors = []

    def work():
        try:
            for _ in range(20):
                genesis.rand(10)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# ------------------------------------------------------------- default dtype
def test_default_dtype():
    assert genesis.get_default_dtype() is genesis.float32
    genesis.set_default_dtype(genesis.float64)
    assert genesis.tensor([1.5]).dtype is genesis.float64
    assert genesis.zeros(2).dtype is genesis.float64
    assert genesis.rand(2).dtype is genesis.float64
    assert genesis.arange(0.0, 1.0, 0.5).dtype is genesis.float64
    assert (genesis.tensor([1, 2]) / 2).dtype is genesis.float64
    assert genesis.tensor([1, 2]).dtype is genesis.int64
    genesis.set_default_dtype(genesis.float32)
    with pytest.raises(TypeError, match="floating"):
        genesis.set_default_dtype(genesis.int64)


# --------------------------------------------------------------------- repr
@pytest.mark.parametrize("make", [
    lambda lib: lib.tensor([1.0, 2.5]),
    lambda lib: lib.tensor([[1, 2], [3, 4]]),
    lambda lib: lib.tensor([True, False]),
    lambda lib: lib.tensor(3.0),
    lambda lib: lib.tensor([1.0, 2.0], dtype=lib.float64),
    lambda lib: lib.tensor([1, 2], dtype=lib.int32),
    lambda lib: lib.tensor([1.0], requires_grad=True),
    lambda lib: lib.tensor([1.0], requires_grad=True) * 2,
], ids=["float", "int", "bool", "0-d", "float64", "int32", "requires_grad", "grad_fn"])
def test_repr_follows_torch_layout(make):
    g, t = repr(make(genesis)), repr(make(torch))
    # same structure and annotations; number formatting and grad_fn names may differ
    assert g.startswith("tensor(") and g.endswith(")")
    for key in ("dtype=", "requires_grad=True", "grad_fn="):
        assert (key in g) == (key in t), (g, t)
    if "dtype=" in t:
        assert t.split("dtype=")[1].split(")")[0].split(",")[0].replace("torch.", "") in g
    assert g.count("[") == t.count("[")


def test_repr_of_empty_and_large():
    assert "[]" in repr(genesis.zeros(0))
    big = repr(genesis.arange(10000))
    assert "..." in big and len(big) < 200


def test_format_of_0d_tensors_is_the_number():
    for lib in (torch, genesis):
        t = lib.tensor(0.123456)
        assert f"{t:.3f}" == "0.123" and f"{lib.tensor(3):>3}" == "  3"
    assert f"{genesis.tensor(2.5)}" == f"{torch.tensor(2.5)}"
    assert f"{genesis.ones(2)}" == repr(genesis.ones(2))
    with pytest.raises(TypeError):
        f"{genesis.ones(2):.2f}"


def test_deepcopy_of_leaves():
    import copy

    x = genesis.tensor([1.0, 2.0], requires_grad=True)
    (x * 2).sum().backward()
    y = copy.deepcopy(x)
    assert y is not x and y.data_ptr() != x.data_ptr() and y.is_leaf and y.requires_grad
    assert y.tolist() == [1.0, 2.0] and y.grad.tolist() == [2.0, 2.0]
    y.detach().fill_(0)  # no sharing with x
    assert x.tolist() == [1.0, 2.0]
    d = copy.deepcopy({"a": x, "b": x})
    assert d["a"] is d["b"]  # the memo keeps aliasing
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(x * 2)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("reduce", [
    lambda x: x.mean(), lambda x: x.norm(), lambda x: x.var(), lambda x: x.std(),
    lambda x: x.reshape(100, 100).mean(1), lambda x: x.reshape(100, 100).norm(dim=0),
    lambda x: x.sum(dtype=x.new_zeros(0, dtype=x.dtype).float().dtype),
], ids=["mean", "norm", "var", "std", "mean-dim", "norm-dim", "sum-float32"])
def test_half_reductions_accumulate_like_torch(dtype, reduce):
    """10000 elements of a half dtype: a sum in half would overflow; torch accumulates in
    float32 (and so must genesis)."""
    data = np.random.default_rng(0).uniform(9, 11, size=10000)
    t = torch.tensor(data).to(t_dtype(dtype))
    g = genesis.tensor(t.float().numpy()).to(g_dtype(dtype))
    torch.testing.assert_close(to_torch(reduce(g)), reduce(t))


def test_default_dtype_is_process_wide_like_torch():
    seen = []
    genesis.set_default_dtype(genesis.float64)
    try:
        t = threading.Thread(target=lambda: seen.append(genesis.tensor([1.5]).dtype))
        t.start()
        t.join()
    finally:
        genesis.set_default_dtype(genesis.float32)
    assert seen == [genesis.float64]


def test_python_floats_keep_float64_precision_when_asked():
    """``tensor([1.2], dtype=float64)`` is exactly 1.2, as torch's (not 1.2 via float32)."""
    assert genesis.tensor([1.2, -0.1], dtype=genesis.float64).tolist() == [1.2, -0.1]
    assert genesis.tensor(0.1, dtype=genesis.float64).item() == 0.1
    assert genesis.tensor([[1.5, 2.5]], dtype=genesis.int64).tolist() == [[1, 2]]
    assert genesis.tensor([0.1], dtype=genesis.float32).tolist() == \
        torch.tensor([0.1], dtype=torch.float32).tolist()
