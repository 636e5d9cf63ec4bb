"""The tiny ops' plainest cases (plain operands: one kernel call, no promotion; views and
slices met before) give what the ops' general paths give: values, dtypes, views sharing their
base's version counter, graph nodes and gradients; and they step aside for dispatch modes and
for autocast when it casts an operand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import genesis
from genesis.backends import registry
from genesis.backends.cpu import CPUBackend
from genesis.dispatch import DispatchMode
from genesis.ops import elementwise


class _OpNames(DispatchMode):
    """The names of the ops called while active."""

    def __init__(self):
        self.names = []

    def __genesis_dispatch__(self, op, args, kwargs):
        self.names.append(op.name)
        return op(*args, **kwargs)


def _t(values, **kw):
    return genesis.tensor(values, dtype=genesis.float32, **kw)


CASES = {  # name -> (call on genesis tensors a, b (4-vectors), the torch reference)
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "mul_scalar": (lambda a, b: a * 2.0, lambda a, b: a * 2.0),
    "rsub_scalar": (lambda a, b: 1.5 - a, lambda a, b: 1.5 - a),
    "exp": (lambda a, b: a.exp(), lambda a, b: a.exp()),
    "lt": (lambda a, b: a < b, lambda a, b: a < b),
    "sum": (lambda a, b: a.sum(), lambda a, b: a.sum()),
    "matmul": (lambda a, b: a.view(2, 2) @ b.view(2, 2), lambda a, b: a.view(2, 2) @ b.view(2, 2)),
    "slice": (lambda a, b: a[1:4:2], lambda a, b: a[1:4:2]),
    "view_0d": (lambda a, b: a[1:2].view(()), lambda a, b: a[1:2].view(())),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_host_path_matches_torch(name):
    g, t = CASES[name]
    a, b = _t([0.5, -1.0, 2.0, 3.0]), _t([1.0, 1.0, -2.0, 4.0])
    out = g(a, b)
    ref = t(torch.tensor(a.tolist()), torch.tensor(b.tolist()))
    assert out.dtype.name == str(ref.dtype).removeprefix("torch.")
    assert tuple(out.shape) == tuple(ref.shape)
    torch.testing.assert_close(torch.tensor(out.tolist()), ref)


def test_views_share_the_version_counter_and_in_place_bumps_it():
    a = _t([1.0, 2.0, 3.0, 4.0])
    v, s = a.view(2, 2), a[1:3]
    assert v._base is a and s._base is a
    a.add_(_t([1.0, 1.0, 1.0, 1.0]))
    assert a._version == v._version == s._version == 1
    assert s.tolist() == [3.0, 4.0]


class _Leaf(genesis.Tensor):
    """A Tensor subclass (as nn.Parameter): it takes the host path too."""


def test_recorded_host_path_gives_graph_and_gradients():
    w = _t([1.0, 2.0, 3.0], requires_grad=True)
    p = genesis.Tensor._make_subclass(_Leaf, _t([0.5, 0.5, 0.5]), requires_grad=True)
    b = _t([3.0, 4.0, 5.0])
    y = (w * b).exp() + p
    assert y.grad_fn is not None and y.grad_fn.name() == "AddBackward"
    y.sum().backward()
    tw = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (tw * torch.tensor([3.0, 4.0, 5.0])).exp().sum().backward()
    torch.testing.assert_close(torch.tensor(w.grad.tolist()), tw.grad)
    assert p.grad.tolist() == [1.0, 1.0, 1.0]


def test_making_and_recording_tensors_keeps_autograd_state_in_slots():
    # requires_grad and grad_fn are slots set when a tensor is made: a read is one
    # specialised slot load (a class-level default read through an instance is not
    # specialised by CPython), and recording an output allocates no instance dict.
    # _out_idx and _leaf_edge are slots left unset until they mean something: _out_idx is set
    # with a grad_fn, _leaf_edge the first time a leaf joins a graph.
    w = _t([1.0, 2.0], requires_grad=True)
    x = _t([3.0, 4.0])
    made = [x, x + x, x[1:], x[1:][1:], x.view(2, 1), w * x, (w * x).sum(), w.exp(),
            genesis.tensor(1.0), w.detach(), x.T, x.narrow(0, 0, 1)]
    assert all(not t.__dict__ for t in made)
    # every maker (Tensor._wrap, new_tensor, view_tensor) sets every other slot
    lazy = ("_out_idx", "_leaf_edge")
    fields = [name for name in genesis.Tensor.__slots__
              if not name.startswith("__") and name not in lazy]
    assert [[name for name in fields if not hasattr(t, name)] for t in made] == [[]] * len(made)
    assert all(name in genesis.Tensor.__slots__ for name in ("requires_grad", "grad_fn") + lazy)
    assert [hasattr(t, "_out_idx") for t in made] == [t.grad_fn is not None for t in made]
    assert not hasattr(x, "_leaf_edge")  # (never in a graph)
    y = w * x
    assert y.requires_grad and y.grad_fn is not None and y._out_idx == 0 and not y.__dict__
    edge = w._leaf_edge  # made when w first joined a graph, shared by every later op
    assert edge[0].variable is w and y.grad_fn.next_functions[0] is edge
    assert (w + x).grad_fn.next_functions[0] is edge
    y.sum().backward()
    assert w.grad.tolist() == [3.0, 4.0]


def test_in_place_edit_of_a_view_routes_the_gradient_to_its_base():
    """An in-place op on a view of a recorded base rebases the base's history through it
    (``rebase_view_history``): the gradient still reaches the leaf behind the base, as in
    torch."""
    w = _t([1.0, 2.0, 3.0], requires_grad=True)
    base = w * 1.0
    base[1:].mul_(_t([2.0, 3.0]))
    (base * base).sum().backward()
    tw = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    tb = tw * 1.0
    tb[1:].mul_(torch.tensor([2.0, 3.0]))
    (tb * tb).sum().backward()
    torch.testing.assert_close(torch.tensor(w.grad.tolist()), tw.grad)


def test_views_met_again_use_their_plan_and_record_when_needed():
    """A view, reshape (shape given as ints, a tuple or a Size) met before and a narrow
    give torch's views of the same base; with a graph to record they record."""
    a = _t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    shapes = ((3, 2), (6,), a.shape)
    for shape in shapes:  # first meetings: the geometry is worked out (and remembered)
        a.reshape(shape)
    views = [a.reshape(*shapes[0]), a.reshape(shapes[1]), a.view(shapes[0]), a.reshape(a.shape),
             a.narrow(1, 1, 2), a.narrow(0, 1, 0)]
    ref = torch.tensor(a.tolist())
    wants = [ref.reshape(3, 2), ref.reshape(6), ref.view(3, 2), ref.reshape(ref.shape),
             ref.narrow(1, 1, 2), ref.narrow(0, 1, 0)]
    for got, want in zip(views, wants):
        assert got._base is a and tuple(got.shape) == tuple(want.shape)
        assert got.tolist() == want.tolist()
    w = _t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    y = (w.reshape(w.shape) * w.narrow(1, 1, 2).sum()).sum()
    y.backward()
    tw = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    (tw.reshape(tw.shape) * tw.narrow(1, 1, 2).sum()).sum().backward()
    assert w.grad.tolist() == tw.grad.tolist()


def test_recorded_full_sum_gives_torchs_gradients():
    """``w.sum()`` of a tensor that requires grad records SumBackward; the gradient, and a
    second-order gradient through it, are torch's."""
    p = genesis.Tensor._make_subclass(_Leaf, _t([[0.5, -1.0], [2.0, 3.0]]), requires_grad=True)
    y = p.sum()
    assert y.grad_fn.name() == "SumBackward" and y.shape == ()
    assert y.grad_fn.next_functions[0][0].variable is p
    (g,) = genesis.autograd.grad((p * p).sum(), p, create_graph=True)
    assert g.tolist() == [[1.0, -2.0], [4.0, 6.0]] and g.requires_grad
    g.sum().backward()
    assert p.grad.tolist() == [[2.0, 2.0], [2.0, 2.0]]


def test_full_reduction_backward_expands_its_gradient():
    """A full reduction's backward broadcasts its 0-d gradient with ``expand`` (an op a
    dispatch mode sees); recorded under create_graph, the second-order gradient is torch's."""
    p = genesis.Tensor._make_subclass(_Leaf, _t([[0.5, -1.0], [2.0, 3.0]]), requires_grad=True)
    for name in ("sum", "amax", "prod"):
        y = getattr(p, name)()
        with _OpNames() as seen:
            y.backward()
        assert "expand" in seen.names, name
    assert p.grad.tolist() == [[-5.0, 4.0], [-0.5, 1.0]]  # 1 + (amax: 0 or 1) + prod/p
    y = p.prod()
    (g,) = genesis.autograd.grad(y * y, p, create_graph=True)  # prod's gradient: 2y, recorded
    assert g.requires_grad
    (gg,) = genesis.autograd.grad(g.sum(), p)
    t = torch.tensor([[0.5, -1.0], [2.0, 3.0]], requires_grad=True)
    (tg,) = torch.autograd.grad(t.prod() ** 2, t, create_graph=True)
    torch.testing.assert_close(torch.from_numpy(gg.numpy()), torch.autograd.grad(tg.sum(), t)[0])


def test_cast_records_the_cast():
    """``to(dtype)`` makes a Cast node: a floating result is in the graph and
    its gradient comes back in the input's dtype; an integer result is not; under no_grad
    nothing is recorded."""
    p = genesis.Tensor._make_subclass(_Leaf, _t([0.5, -1.25, 3.0]), requires_grad=True)
    h = p.to(genesis.bfloat16)
    assert h.dtype is genesis.bfloat16 and h.grad_fn.name() == "CastBackward"
    assert h.tolist() == [0.5, -1.25, 3.0]
    (h * h).sum().backward()
    assert p.grad.dtype is genesis.float32 and p.grad.tolist() == [1.0, -2.5, 6.0]
    i = p.to(genesis.int64)
    assert i.tolist() == [0, -1, 3] and not i.requires_grad and i.grad_fn is None
    with genesis.no_grad():
        assert p.to(genesis.float16).grad_fn is None
    assert p.to(genesis.float32) is p


def test_view_errors_stay_on_the_host_path():
    x = _t([[1.0, 2.0], [3.0, 4.0]]).t()
    with pytest.raises(RuntimeError, match="not compatible"):
        x.view(4)
    with pytest.raises(RuntimeError, match="not compatible"):  # the cached answer, again
        x.view(4)
    with pytest.raises(TypeError):
        _t([1.0, 2.0]).view(2.0)


def test_remembered_views_are_per_strides_and_int_sizes():
    """The host path's remembered view of a (2, 3) tensor keeps each input's offset, is not
    reused for another (2, 3) tensor with other strides, nor for float sizes."""
    a = _t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    for _ in range(2):  # the first call remembers the plan, the second uses it
        assert a.view(3, 2).tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
        assert (a.view(3, 2).stride(), a.view(3, 2).storage_offset()) == ((2, 1), 0)
        c = _t([0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])[2:].view(2, 3)  # a at offset 2
        assert c.view(3, 2).tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
        assert (c.view(3, 2).stride(), c.view(3, 2).storage_offset()) == ((2, 1), 2)
    b = _t([[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]).t()  # a's values and shape, other strides
    with pytest.raises(RuntimeError, match="not compatible"):
        b.view(3, 2)
    r = b.reshape(3, 2)  # a copy, not the remembered view of b's memory
    assert r._base is not b and r.tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    with pytest.raises(TypeError):
        a.view(3.0, 2)
    with pytest.raises(TypeError):
        a.reshape(3, 2.0)


def test_remembered_slices_are_per_strides_offset_and_int_bounds():
    """The host path's remembered ``x[1:3]`` of a (3, 2) tensor is not reused for another
    (3, 2) tensor with other strides, starts at each tensor's own offset, and float bounds
    still raise while numpy ints and 0-d tensors still index."""
    a = _t([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    for _ in range(2):  # the first call remembers the plan, the second uses it
        assert a[1:3].tolist() == [[3.0, 4.0], [5.0, 6.0]]
        assert (a[1:3].stride(), a[1:3].storage_offset()) == ((2, 1), 2)
    b = _t([[1.0, 3.0, 5.0], [2.0, 4.0, 6.0]]).t()  # a's values and shape, other strides
    assert b[1:3].tolist() == [[3.0, 4.0], [5.0, 6.0]]
    c = _t([[0.0, 0.0], [1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])[1:]  # a's geometry at offset 2
    assert c[1:3].tolist() == [[3.0, 4.0], [5.0, 6.0]]
    assert c[1:3].storage_offset() == 4 and c[1:3]._base is c._base
    with pytest.raises(TypeError):
        a[1.0:3]
    assert a[np.int64(1):np.int64(3)].tolist() == [[3.0, 4.0], [5.0, 6.0]]
    assert a[genesis.tensor(1):3].tolist() == [[3.0, 4.0], [5.0, 6.0]]
    assert a[::2].tolist() == [[1.0, 2.0], [5.0, 6.0]]
    # other spellings of the same rows, each with its own plan
    for k in (slice(-2, None), slice(1, 100), slice(1, 3, 1)):
        assert a[k].tolist() == [[3.0, 4.0], [5.0, 6.0]]
    with pytest.raises(ValueError, match="step"):
        a[1:3:0]


def test_kept_geometry_follows_the_array():
    """A tensor's strides and offset are read from its array once and kept; ``.data = other``
    swaps the array, and with it the geometry (here: other strides at another offset)."""
    a = _t([[1.0, 2.0], [3.0, 4.0]])
    assert (a.stride(), a.storage_offset()) == ((2, 1), 0)
    a.data = _t([[0.0, 1.0, 3.0], [0.0, 2.0, 4.0]])[:, 1:].t()
    assert (a.stride(), a.storage_offset()) == ((1, 3), 1)
    with pytest.raises(RuntimeError, match="not compatible"):  # (4,) needs C order
        a.view(4)
    assert a[1:].tolist() == [[3.0, 4.0]] and a[1:].storage_offset() == 2
    assert a.contiguous().view(4).tolist() == [1.0, 2.0, 3.0, 4.0]


class _InPlaceRecording(CPUBackend):
    """The CPU kernels, on device type 'inplacerec', noting its in-place kernel calls."""

    name = "inplacerec"

    def __init__(self):
        super().__init__()
        self.calls = []

    def inplace_kernel(self, op):
        run = super().inplace_kernel(op)
        return lambda a, b: self.calls.append(op) or run(a, b)


def test_in_place_ops_call_the_backends_in_place_kernel():
    backend = _InPlaceRecording()
    registry.register("inplacerec", backend)
    try:
        a = genesis.ones(3, device="inplacerec")
        a.add_(genesis.full((3,), 2.0, device="inplacerec"))
        a.mul_(0.5)
        assert a.tolist() == [1.5, 1.5, 1.5] and a._version == 2
        assert backend.calls == ["add", "mul"]
    finally:
        registry._loaded.pop("inplacerec", None)


def test_cpu_kernels_are_torch_functions():
    """No Python frame between an elementwise op's forward and torch on the CPU."""
    backend = _t([1.0])._backend
    assert elementwise.DECLARED["add"].function.kernels[backend] is torch.add
    assert elementwise.DECLARED["exp"].function.kernels[backend] is torch.exp


def test_autocast_casts_only_where_the_dtype_changes():
    """Under autocast, an fp32-category op (exp, pow) of float32 operands runs without a
    cast; a bfloat16 operand is cast to float32 first."""
    x = _t([0.5, -1.0, 2.0], requires_grad=True)
    with genesis.autocast("cpu", dtype=genesis.bfloat16):
        y = x.exp()
        z = x ** 2.0
        with _OpNames() as seen:
            w = x.to(genesis.bfloat16).exp()
        with _OpNames() as unseen:
            x.exp()
    assert seen.names == ["cast", "cast", "exp"]  # the user's cast, autocast's, the op
    assert unseen.names == ["exp"]
    assert y.dtype is z.dtype is w.dtype is genesis.float32
    assert y.grad_fn.name() == "ExpBackward" and z.grad_fn.name() == "PowBackward"
    (y + z + w).sum().backward()
    tx = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    (tx.exp() + tx ** 2.0 + tx.to(torch.bfloat16).float().exp()).sum().backward()
    torch.testing.assert_close(torch.tensor(x.grad.tolist()), tx.grad)


def _python_frames(fn) -> list:
    """The names of the Python functions ``fn()`` calls, in call order."""
    import sys

    names = []
    sys.setprofile(lambda frame, event, arg: names.append(frame.f_code.co_name)
                   if event == "call" else None)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return names


def test_matmul_of_matrices_goes_straight_to_its_forward():
    """``a @ b`` of two matrices is Matmul's dispatcher entry, then its forward and the
    tensor maker (the CPU kernel is torch's own); 1-d operands and non-tensors take the 1-d
    rules, with torch's results and errors."""
    a, v = _t([[1.0, 2.0], [3.0, 4.0]]), _t([1.0, -1.0])
    a @ a  # (the product's shape, remembered)
    # (the entry's code is named "call": entries.matrix_entry)
    assert _python_frames(lambda: a @ a) == ["<lambda>", "call", "forward", "new_tensor"]
    with _OpNames() as seen:
        a @ a
    assert seen.names == ["matmul"]
    ta, tv = torch.tensor(a.tolist()), torch.tensor(v.tolist())
    for got, want in ((a @ v, ta @ tv), (v @ a, tv @ ta), (v @ v, tv @ tv),
                      (genesis.matmul(a, a), ta @ ta)):
        assert tuple(got.shape) == tuple(want.shape)
        torch.testing.assert_close(torch.tensor(got.tolist()), want)
    with pytest.raises(TypeError, match="matmul expects two tensors, got Tensor and ndarray"):
        genesis.matmul(a, np.ones((2, 2), np.float32))
    with pytest.raises(RuntimeError, match="at least 1D"):
        genesis.matmul(a, genesis.tensor(2.0))
    w = _t([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    (a @ w).sum().backward()
    assert w.grad.tolist() == (ta.T @ torch.ones(2, 2)).tolist()
