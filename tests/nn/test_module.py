"""Module API: registration, iteration, state dicts, device/dtype moves, hooks, repr,
containers and Parameter."""

import copy

import numpy as np
import pytest

import genesis
import genesis.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.bn = nn.BatchNorm1d(4)
        self.fc2 = nn.Linear(4, 2, bias=False)
        self.register_buffer("scratch", genesis.zeros(2), persistent=False)

    def forward(self, x):
        return self.fc2(nn.functional.relu(self.bn(self.fc1(x))))


def values(t):
    return np.array(t.detach().numpy(), copy=True)


# ----------------------------------------------------------------- Parameter
def test_parameter_is_leaf_tensor_sharing_memory():
    data = genesis.ones(3)
    p = nn.Parameter(data)
    assert isinstance(p, genesis.Tensor) and isinstance(p, nn.Parameter)
    assert p.requires_grad and p.is_leaf
    with genesis.no_grad():
        data.mul_(2)
    assert values(p).tolist() == [2.0, 2.0, 2.0]
    assert not nn.Parameter(genesis.ones(2), requires_grad=False).requires_grad
    assert "Parameter containing" in repr(p)


def test_parameter_from_non_leaf_is_leaf():
    x = genesis.ones(2, requires_grad=True)
    p = nn.Parameter(x * 2)
    assert p.is_leaf and p.grad_fn is None


def test_parameter_ops_return_plain_tensors_and_grads_flow():
    p = nn.Parameter(genesis.tensor([1.0, 2.0]))
    y = (p * p).sum()
    y.backward()
    assert values(p.grad).tolist() == [2.0, 4.0]


def test_parameter_deepcopy_is_independent():
    p = nn.Parameter(genesis.ones(2))
    q = copy.deepcopy(p)
    assert isinstance(q, nn.Parameter) and q is not p and q.requires_grad
    with genesis.no_grad():
        q.fill_(3.0)
    assert values(p).tolist() == [1.0, 1.0]


# ------------------------------------------------------- registration/iteration
def test_named_parameters_buffers_modules():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == [
        "fc1.weight", "fc1.bias", "bn.weight", "bn.bias", "fc2.weight"]
    assert [n for n, _ in net.named_buffers()] == [
        "scratch", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    assert [n for n, _ in net.named_modules()] == ["", "fc1", "bn", "fc2"]
    assert [n for n, _ in net.named_children()] == ["fc1", "bn", "fc2"]
    assert len(list(net.parameters(recurse=False))) == 0
    assert [n for n, _ in net.named_parameters(prefix="model")][0] == "model.fc1.weight"
    assert len(list(net.modules())) == 4


def test_shared_parameters_are_deduplicated():
    a = nn.Linear(2, 2)
    b = nn.Linear(2, 2)
    b.weight = a.weight
    seq = nn.Sequential(a, b)
    assert len(list(seq.parameters())) == 3
    assert len(list(seq.named_parameters(remove_duplicate=False))) == 4
    shared = nn.Sequential(a, a)
    assert len(list(shared.modules())) == 2
    assert len(list(shared.parameters())) == 2


def test_setattr_routing_and_reassignment():
    m = nn.Module()
    m.w = nn.Parameter(genesis.zeros(2))
    assert "w" in m._parameters and "w" not in m.__dict__
    m.w = None
    assert m.w is None and "w" in m._parameters
    with pytest.raises(TypeError, match="cannot assign"):
        m.w = genesis.zeros(2)  # a plain tensor is not a Parameter
    m.child = nn.Linear(1, 1)
    assert "child" in m._modules
    m.register_buffer("buf", genesis.ones(1))
    m.buf = genesis.zeros(1)
    assert values(m._buffers["buf"]).tolist() == [0.0]
    with pytest.raises(TypeError):
        m.buf = 3
    m.plain = 5
    assert m.plain == 5
    del m.child
    assert "child" not in m._modules
    with pytest.raises(AttributeError, match="has no attribute 'missing'"):
        _ = m.missing
    m.b = nn.Buffer(genesis.ones(2), persistent=False)
    assert "b" in m._buffers and "b" not in m.state_dict()


def test_registration_errors():
    m = nn.Module()
    with pytest.raises(KeyError, match="contain"):
        m.register_buffer("a.b", genesis.zeros(1))
    with pytest.raises(KeyError, match="empty"):
        m.register_parameter("", None)
    m.x = 1
    with pytest.raises(KeyError, match="already exists"):
        m.register_buffer("x", genesis.zeros(1))
    with pytest.raises(TypeError):
        m.register_parameter("p", genesis.zeros(1))
    with pytest.raises(TypeError):
        m.add_module("c", "not a module")

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(genesis.zeros(1))

    with pytest.raises(AttributeError, match="before Module.__init__"):
        Early()


def test_get_submodule_parameter_buffer():
    net = Net()
    assert net.get_submodule("bn") is net.bn
    assert net.get_submodule("") is net
    assert net.get_parameter("fc1.weight") is net.fc1.weight
    assert net.get_buffer("bn.running_mean") is net.bn.running_mean
    with pytest.raises(AttributeError):
        net.get_submodule("nope")


def test_missing_forward_raises():
    with pytest.raises(NotImplementedError, match='missing the required "forward"'):
        nn.Module()(1)


# -------------------------------------------------------------- modes
def test_train_eval_apply_requires_grad():
    net = Net()
    assert net.training and net.bn.training
    assert net.eval() is net
    assert not net.training and not net.bn.training
    net.train()
    assert net.fc1.training
    with pytest.raises(ValueError):
        net.train("yes")
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "BatchNorm1d", "Linear", "Net"]
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_zero_grad():
    lin = nn.Linear(2, 2)
    lin(genesis.ones(1, 2)).sum().backward()
    assert lin.weight.grad is not None
    lin.zero_grad(set_to_none=False)
    assert values(lin.weight.grad).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    lin.zero_grad()
    assert lin.weight.grad is None and lin.bias.grad is None


# ---------------------------------------------------------- state dict
def test_state_dict_keys_and_detached_sharing():
    net = Net()
    sd = net.state_dict()
    assert list(sd) == ["fc1.weight", "fc1.bias", "bn.weight", "bn.bias", "bn.running_mean",
                        "bn.running_var", "bn.num_batches_tracked", "fc2.weight"]
    assert "scratch" not in sd  # non-persistent
    assert not sd["fc1.weight"].requires_grad
    with genesis.no_grad():
        net.fc1.weight.fill_(7.0)
    assert values(sd["fc1.weight"]).max() == 7.0  # shares memory
    kept = net.state_dict(keep_vars=True)
    assert kept["fc1.weight"] is net.fc1.weight


def test_load_state_dict_round_trip_copies_in_place():
    src, dst = Net(), Net()
    weight_obj = dst.fc1.weight
    result = dst.load_state_dict(src.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert repr(result) == "<All keys matched successfully>"
    assert dst.fc1.weight is weight_obj  # copied into, so optimizers stay valid
    for (n, a), (_, b) in zip(src.state_dict().items(), dst.state_dict().items()):
        np.testing.assert_array_equal(values(a), values(b), err_msg=n)
    # The copy is a copy: changing the source later does not change the destination.
    with genesis.no_grad():
        src.fc1.weight.fill_(0.0)
    assert values(dst.fc1.weight).any()


def test_load_state_dict_strict_errors_list_all_keys():
    net = Net()
    sd = net.state_dict()
    del sd["fc1.bias"]
    sd["extra.weight"] = genesis.zeros(1)
    sd["fc1.extra"] = genesis.zeros(1)
    with pytest.raises(RuntimeError) as err:
        Net().load_state_dict(sd)
    msg = str(err.value)
    assert "Error(s) in loading state_dict for Net" in msg
    assert 'Missing key(s) in state_dict: "fc1.bias"' in msg
    assert '"extra.weight"' in msg and '"fc1.extra"' in msg
    result = Net().load_state_dict(sd, strict=False)
    assert result.missing_keys == ["fc1.bias"]
    assert sorted(result.unexpected_keys) == ["extra.weight", "fc1.extra"]


def test_strict_load_rejects_keys_nested_under_a_parameter_or_an_empty_slot():
    net = Net()
    net.register_module("gone", None)
    sd = net.state_dict()
    sd["fc1.weight.foo"] = genesis.zeros(1)  # under a parameter: not the parameter
    sd["weight"] = genesis.zeros(1)  # the root has no parameter of that name
    sd["gone.weight"] = genesis.zeros(1)  # a child slot holding None loads nothing
    with pytest.raises(RuntimeError,
                       match=r'Unexpected key\(s\) in state_dict: .*"fc1.weight.foo"'):
        net.load_state_dict(sd)
    result = net.load_state_dict(sd, strict=False)
    assert sorted(result.unexpected_keys) == ["fc1.weight.foo", "gone.weight", "weight"]


def test_load_state_dict_shape_mismatch():
    sd = nn.Linear(3, 5).state_dict()
    with pytest.raises(RuntimeError, match=r"size mismatch for weight: copying a param with "
                                           r"shape \(5, 3\) from checkpoint, the shape in "
                                           r"current model is \(4, 3\)"):
        nn.Linear(3, 4).load_state_dict(sd)
    with pytest.raises(RuntimeError, match="size mismatch"):
        nn.Linear(3, 4).load_state_dict(sd, strict=False)


def test_load_state_dict_casts_dtype_and_assign():
    lin = nn.Linear(2, 2)
    sd = {k: v.to(genesis.float64) for k, v in nn.Linear(2, 2).state_dict().items()}
    lin.load_state_dict(sd)
    assert lin.weight.dtype is genesis.float32
    np.testing.assert_allclose(values(lin.weight), values(sd["weight"]), rtol=1e-6)
    lin.load_state_dict(sd, assign=True)
    assert lin.weight.dtype is genesis.float64
    assert isinstance(lin.weight, nn.Parameter) and lin.weight.requires_grad


def test_batchnorm_state_dict_without_counter_loads():
    bn = nn.BatchNorm1d(3)
    sd = bn.state_dict()
    del sd["num_batches_tracked"]
    bn.load_state_dict(sd)  # old checkpoints had no counter


def test_load_state_dict_rejects_non_tensor():
    with pytest.raises(RuntimeError, match="expected genesis.Tensor"):
        nn.Linear(1, 1).load_state_dict({"weight": [[1.0]], "bias": genesis.zeros(1)})


# ------------------------------------------------------------- to / dtype
def test_to_dtype_keeps_parameter_identity_and_int_buffers():
    net = Net()
    w = net.fc1.weight
    net.fc1(genesis.ones(1, 3)).sum().backward()
    net.to(genesis.float64)
    assert net.fc1.weight is w
    assert w.dtype is genesis.float64 and w.grad.dtype is genesis.float64
    assert net.bn.running_mean.dtype is genesis.float64
    assert net.bn.num_batches_tracked.dtype is genesis.int64
    net.half()
    assert w.dtype is genesis.float16
    net.bfloat16()
    assert w.dtype is genesis.bfloat16
    net.float()
    assert w.dtype is genesis.float32
    net.double()
    assert w.dtype is genesis.float64
    net.to("cpu", dtype=genesis.float32)
    assert w.dtype is genesis.float32 and w.device == genesis.device("cpu")
    assert net.cpu() is net
    with pytest.raises(TypeError, match="floating point"):
        net.to(genesis.int32)
    net.to(genesis.zeros(1, dtype=genesis.float64))
    assert w.dtype is genesis.float64


def test_to_then_train_step_updates_same_parameter():
    lin = nn.Linear(2, 1).to(genesis.float64)
    lin(genesis.ones(3, 2, dtype=genesis.float64)).sum().backward()
    assert lin.weight.grad.dtype is genesis.float64
    assert values(lin.weight.grad).tolist() == [[3.0, 3.0]]


# ---------------------------------------------------------------- hooks
def test_forward_hooks_modify_and_remove():
    lin = nn.Linear(2, 2)
    calls = []

    def pre(module, args):
        calls.append("pre")
        return (args[0] * 0,)

    def post(module, args, output):
        calls.append("post")
        return output + 1

    h1 = lin.register_forward_pre_hook(pre)
    h2 = lin.register_forward_hook(post)
    out = lin(genesis.ones(1, 2))
    expected = values(lin.bias) + 1
    np.testing.assert_allclose(values(out)[0], expected, rtol=1e-6)
    assert calls == ["pre", "post"]
    h1.remove()
    h2.remove()
    h2.remove()  # removing twice is harmless
    out = lin(genesis.zeros(1, 2))
    np.testing.assert_allclose(values(out)[0], values(lin.bias), rtol=1e-6)
    assert calls == ["pre", "post"]


def test_forward_hook_order_kwargs_and_context_manager():
    lin = nn.Linear(1, 1)
    order = []
    lin.register_forward_hook(lambda m, a, o: order.append(1))
    lin.register_forward_hook(lambda m, a, o: order.append(0), prepend=True)
    with lin.register_forward_hook(lambda m, a, k, o: order.append(("kw", k)),
                                   with_kwargs=True):
        lin(genesis.ones(1, 1))
    lin(genesis.ones(1, 1))
    assert order == [0, 1, ("kw", {}), 0, 1]

    def pre_kw(module, args, kwargs):
        return (args[0] * 2,), kwargs

    lin.register_forward_pre_hook(pre_kw, with_kwargs=True)
    seen = []
    lin.register_forward_hook(lambda m, a, o: seen.append(values(a[0]).tolist()))
    lin(genesis.ones(1, 1))
    assert seen == [[[2.0]]]


# ----------------------------------------------------------------- repr
def test_repr_like_torch():
    net = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Sequential(nn.Dropout(0.1)))
    assert repr(net) == (
        "Sequential(\n"
        "  (0): Linear(in_features=2, out_features=3, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Sequential(\n"
        "    (0): Dropout(p=0.1, inplace=False)\n"
        "  )\n"
        ")"
    )
    assert repr(nn.LayerNorm(4)) == "LayerNorm((4,), eps=1e-05, elementwise_affine=True)"
    assert repr(nn.Embedding(10, 3, padding_idx=0)) == "Embedding(10, 3, padding_idx=0)"
    assert repr(nn.BatchNorm2d(8)) == (
        "BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)")
    assert repr(nn.GELU("tanh")) == "GELU(approximate='tanh')"


def test_dir_lists_registered_names():
    names = dir(Net())
    assert "fc1" in names and "scratch" in names


def test_deepcopy_module():
    net = Net()
    clone = copy.deepcopy(net)
    assert clone.fc1.weight is not net.fc1.weight
    np.testing.assert_array_equal(values(clone.fc1.weight), values(net.fc1.weight))
    with genesis.no_grad():
        clone.fc1.weight.fill_(0.0)
    assert values(net.fc1.weight).any()


# ----------------------------------------------------------- containers
def test_sequential_indexing_slicing_append():
    a, b, c = nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1)
    seq = nn.Sequential(a, b)
    assert len(seq) == 2 and seq[0] is a and seq[-1] is b
    assert isinstance(seq[0:1], nn.Sequential) and len(seq[0:1]) == 1
    seq.append(c)
    assert seq[2] is c and list(seq) == [a, b, c]
    assert seq(genesis.ones(4, 2)).shape == (4, 1)
    seq[1] = nn.Tanh()
    assert isinstance(seq[1], nn.Tanh)
    del seq[0]
    assert len(seq) == 2 and list(seq._modules) == ["0", "1"]
    with pytest.raises(IndexError):
        seq[5]
    seq.insert(0, nn.Identity())
    assert isinstance(seq[0], nn.Identity)
    assert len(seq + nn.Sequential(nn.ReLU())) == 4
    from collections import OrderedDict

    named = nn.Sequential(OrderedDict([("fc", nn.Linear(1, 1)), ("act", nn.ReLU())]))
    assert [n for n, _ in named.named_children()] == ["fc", "act"]
    assert [n for n, _ in named.named_parameters()] == ["fc.weight", "fc.bias"]


def test_module_list_and_dict():
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert len(layers) == 3 and len(list(layers.parameters())) == 6
    layers.append(nn.ReLU())
    layers.extend([nn.Tanh()])
    assert isinstance(layers[-1], nn.Tanh) and len(layers) == 5
    assert len(layers[1:3]) == 2
    layers.insert(0, nn.Identity())
    assert isinstance(layers[0], nn.Identity) and len(layers) == 6
    del layers[0]
    assert [n for n, _ in layers.named_children()][:2] == ["0", "1"]
    with pytest.raises(TypeError):
        layers.extend(nn.Linear(1, 1))
    d = nn.ModuleDict({"a": nn.Linear(1, 2), "b": nn.ReLU()})
    d["c"] = nn.Tanh()
    assert list(d.keys()) == ["a", "b", "c"] and "a" in d and len(d) == 3
    assert [n for n, _ in d.named_parameters()] == ["a.weight", "a.bias"]
    assert isinstance(d.pop("c"), nn.Tanh) and len(d) == 2
    d.update([("z", nn.Identity())])
    assert list(d) == ["a", "b", "z"]


def test_parameter_list_and_dict():
    pl = nn.ParameterList([nn.Parameter(genesis.ones(2)), genesis.zeros(3)])
    assert len(pl) == 2 and isinstance(pl[1], nn.Parameter)
    pl.append(genesis.ones(1))
    assert [n for n, _ in pl.named_parameters()] == ["0", "1", "2"]
    assert len(list(pl)) == 3
    holder = nn.Module()
    holder.ps = pl
    assert list(holder.state_dict()) == ["ps.0", "ps.1", "ps.2"]
    assert "Parameter containing" in repr(pl)
    pd = nn.ParameterDict({"scale": genesis.ones(4)})
    pd["shift"] = nn.Parameter(genesis.zeros(4))
    assert list(pd.keys()) == ["scale", "shift"] and isinstance(pd["scale"], nn.Parameter)
    assert len(list(pd.parameters())) == 2


def test_container_state_dict_round_trip():
    model = nn.Sequential(nn.Linear(3, 4), nn.ModuleList([nn.LayerNorm(4)]),
                          nn.ModuleDict({"head": nn.Linear(4, 2)}))
    sd = model.state_dict()
    assert list(sd) == ["0.weight", "0.bias", "1.0.weight", "1.0.bias", "2.head.weight",
                        "2.head.bias"]
    other = nn.Sequential(nn.Linear(3, 4), nn.ModuleList([nn.LayerNorm(4)]),
                          nn.ModuleDict({"head": nn.Linear(4, 2)}))
    other.load_state_dict(sd)
    np.testing.assert_array_equal(values(other[2]["head"].weight),
                                  values(model[2]["head"].weight))
