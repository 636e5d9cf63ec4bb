"""genesis.nn layers against torch.nn layers with copied weights: forward, input and
parameter gradients, buffers, modes, and the transformer layers."""

import numpy as np
import pytest
import torch
import torch.nn as tnn
from device_params import cpu, to_genesis, to_torch, torch_device
from torch.testing import assert_close

import genesis
import genesis.nn as nn

RNG = np.random.default_rng(1)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def copy_weights(g_mod, t_mod):
    """Make ``g_mod``'s parameters and buffers equal to ``t_mod``'s (same names)."""
    g_mod.load_state_dict({k: to_genesis(v) for k, v in t_mod.state_dict().items()})


def compare_module(g_mod, t_mod, *arrays, grad=True, copy=True, device="cpu", **tol):
    """Same weights, same inputs: outputs, input gradients and parameter gradients agree.
    Both modules are moved to ``device`` (torch's to ``torch_device(device)``) first."""
    if copy:
        copy_weights(g_mod, t_mod)
    td = torch_device(device)
    g_mod.to(device)
    t_mod.to(td)

    def floating(a):
        return a.dtype.kind == "f"

    g_in = [genesis.tensor(a, device=device, requires_grad=grad and floating(a)) for a in arrays]
    t_in = [torch.tensor(a, device=td, requires_grad=grad and floating(a)) for a in arrays]
    g_out, t_out = g_mod(*g_in), t_mod(*t_in)
    if isinstance(t_out, tuple):
        g_out, t_out = g_out[0], t_out[0]
    assert tuple(g_out.shape) == tuple(t_out.shape)
    assert g_out.device.type == genesis.device(device).type
    assert_close(to_torch(g_out), cpu(t_out), **tol)
    if not grad:
        return g_out
    go = torch.randn_like(t_out)
    t_out.backward(go)
    g_out.backward(to_genesis(go, device))
    for g, t in zip(g_in, t_in):
        if t.requires_grad:
            assert_close(to_torch(g.grad), cpu(t.grad), **tol)
    t_params = dict(t_mod.named_parameters())
    for name, p in g_mod.named_parameters():
        tp = t_params[name]
        if tp.grad is None:
            assert p.grad is None or not to_torch(p.grad).any(), name
        else:
            assert p.grad is not None, name
            assert_close(to_torch(p.grad), cpu(tp.grad), **tol,
                         msg=lambda m, n=name: f"{n}: {m}")
    return g_out


# ----------------------------------------------------------------- simple layers
@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias, device):
    compare_module(nn.Linear(5, 3, bias=bias), tnn.Linear(5, 3, bias=bias), randn(4, 2, 5),
                   device=device)


def test_linear_default_init_range_and_names():
    lin = nn.Linear(100, 50)
    w = lin.weight.detach().numpy()
    bound = 1 / np.sqrt(100)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert w.std() == pytest.approx(bound / np.sqrt(3), rel=0.05)
    assert [n for n, _ in lin.named_parameters()] == ["weight", "bias"]
    assert lin.weight.shape == (50, 100)


def test_linear_device_dtype_kwargs():
    lin = nn.Linear(2, 3, dtype=genesis.float64, device="cpu")
    assert lin.weight.dtype is genesis.float64 and lin.bias.dtype is genesis.float64


def test_bilinear(device):
    compare_module(nn.Bilinear(3, 4, 2), tnn.Bilinear(3, 4, 2), randn(5, 3), randn(5, 4),
                   device=device)


def test_identity_flatten_unflatten(device):
    x = randn(2, 3, 4, 5)
    compare_module(nn.Identity(3, foo=1), tnn.Identity(), x, device=device)
    compare_module(nn.Flatten(), tnn.Flatten(), x, device=device)
    compare_module(nn.Flatten(0, 2), tnn.Flatten(0, 2), x, device=device)
    compare_module(nn.Unflatten(1, (3, 1)), tnn.Unflatten(1, (3, 1)), x, device=device)
    compare_module(nn.Unflatten(-1, (5, 1)), tnn.Unflatten(-1, (5, 1)), x, device=device)
    assert repr(nn.Flatten()) == "Flatten(start_dim=1, end_dim=-1)"


def test_distance_modules(device):
    compare_module(nn.CosineSimilarity(dim=-1), tnn.CosineSimilarity(dim=-1), randn(3, 5),
                   randn(3, 5), device=device)
    compare_module(nn.PairwiseDistance(p=1.0), tnn.PairwiseDistance(p=1.0), randn(3, 5),
                   randn(3, 5), device=device)


# ------------------------------------------------------------------ embedding
def test_embedding_and_padding_idx(device):
    idx = np.array([[1, 0, 3], [3, 3, 0]], dtype=np.int64)
    compare_module(nn.Embedding(5, 4), tnn.Embedding(5, 4), idx, device=device)
    emb = nn.Embedding(5, 4, padding_idx=0, device=device)
    assert not to_torch(emb.weight)[0].any()  # padding row starts at zero
    compare_module(emb, tnn.Embedding(5, 4, padding_idx=0), idx, device=device)
    assert not to_torch(emb.weight.grad)[0].any()  # and never gets a gradient
    assert to_torch(emb.weight.grad)[3].any()


def test_embedding_from_pretrained():
    table = genesis.tensor(randn(4, 3))
    emb = nn.Embedding.from_pretrained(table)
    assert not emb.weight.requires_grad
    out = emb(genesis.tensor(np.array([2], dtype=np.int64)))
    np.testing.assert_array_equal(out.numpy()[0], table.numpy()[2])
    assert nn.Embedding.from_pretrained(table, freeze=False).weight.requires_grad


# -------------------------------------------------------------- normalisation
@pytest.mark.parametrize("shape,nshape", [((4, 6), 6), ((2, 3, 4, 6), (4, 6))])
def test_layer_norm(shape, nshape, device):
    t = tnn.LayerNorm(nshape)
    with torch.no_grad():  # non-trivial affine parameters
        t.weight.normal_()
        t.bias.normal_()
    compare_module(nn.LayerNorm(nshape), t, randn(*shape) * 3 + 1, device=device)
    compare_module(nn.LayerNorm(nshape, elementwise_affine=False),
                   tnn.LayerNorm(nshape, elementwise_affine=False), randn(*shape), device=device)
    compare_module(nn.LayerNorm(nshape, bias=False), tnn.LayerNorm(nshape, bias=False),
                   randn(*shape), device=device)


def test_rms_norm(device):
    t = tnn.RMSNorm(8, eps=1e-6)
    with torch.no_grad():
        t.weight.normal_()
    compare_module(nn.RMSNorm(8, eps=1e-6), t, randn(3, 5, 8), device=device)
    compare_module(nn.RMSNorm((5, 8)), tnn.RMSNorm((5, 8)), randn(3, 5, 8), device=device)
    compare_module(nn.RMSNorm(8, elementwise_affine=False),
                   tnn.RMSNorm(8, elementwise_affine=False), randn(2, 8), device=device)


def test_group_norm(device):
    t = tnn.GroupNorm(2, 6)
    with torch.no_grad():
        t.weight.normal_()
        t.bias.normal_()
    compare_module(nn.GroupNorm(2, 6), t, randn(3, 6, 4, 4) * 2 - 1, device=device)
    compare_module(nn.GroupNorm(3, 6, affine=False), tnn.GroupNorm(3, 6, affine=False),
                   randn(3, 6, 5), device=device)
    with pytest.raises(ValueError):
        nn.GroupNorm(4, 6)


@pytest.mark.parametrize("cls,tcls,shape", [
    (nn.BatchNorm1d, tnn.BatchNorm1d, (8, 4)),
    (nn.BatchNorm1d, tnn.BatchNorm1d, (8, 4, 5)),
    (nn.BatchNorm2d, tnn.BatchNorm2d, (3, 4, 5, 5)),
    (nn.BatchNorm3d, tnn.BatchNorm3d, (2, 4, 3, 3, 3)),
])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batch_norm_train_eval_running_stats(cls, tcls, shape, momentum, device):
    g, t = cls(4, momentum=momentum), tcls(4, momentum=momentum)
    copy_weights(g, t)
    for step in range(3):
        x = randn(*shape) * (step + 1) + step
        compare_module(g, t, x, copy=False, device=device)
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            assert_close(to_torch(getattr(g, name)), cpu(getattr(t, name)), msg=name)
        for p in list(g.parameters()) + list(t.parameters()):
            p.grad = None
    g.eval()
    t.eval()
    compare_module(g, t, randn(*shape), copy=False, device=device)


def test_batch_norm_without_tracking_and_without_affine(device):
    compare_module(nn.BatchNorm1d(3, track_running_stats=False),
                   tnn.BatchNorm1d(3, track_running_stats=False), randn(6, 3), device=device)
    g = nn.BatchNorm1d(3, track_running_stats=False).eval()
    t = tnn.BatchNorm1d(3, track_running_stats=False).eval()
    compare_module(g, t, randn(6, 3), device=device)  # eval without running stats: batch stats
    assert g.running_mean is None and list(g.state_dict()) == ["weight", "bias"]
    compare_module(nn.BatchNorm2d(3, affine=False), tnn.BatchNorm2d(3, affine=False),
                   randn(2, 3, 4, 4), device=device)


def test_batch_norm_errors_and_reset():
    bn = nn.BatchNorm2d(3)
    with pytest.raises(ValueError, match="expected 4D input"):
        bn(genesis.zeros(2, 3))
    bn(genesis.tensor(randn(2, 3, 2, 2)))
    assert int(bn.num_batches_tracked.item()) == 1
    bn.reset_running_stats()
    assert int(bn.num_batches_tracked.item()) == 0
    assert bn.running_var.numpy().tolist() == [1.0, 1.0, 1.0]


def test_batch_norm_loaded_counter_drives_cumulative_average(device):
    t = tnn.BatchNorm1d(2, momentum=None)
    for _ in range(4):
        t(torch.randn(5, 2))
    g = nn.BatchNorm1d(2, momentum=None)
    copy_weights(g, t)
    compare_module(g, t, randn(5, 2), copy=False, device=device)
    assert_close(to_torch(g.running_mean), cpu(t.running_mean))
    assert_close(to_torch(g.running_var), cpu(t.running_var))


# ------------------------------------------------------------------ dropout
def test_dropout_modules_train_and_eval():
    x = genesis.ones(100, 100)
    drop = nn.Dropout(0.25)
    y = drop(x).numpy()
    assert abs((y == 0).mean() - 0.25) < 0.02
    assert drop.eval()(x) is x
    assert repr(nn.Dropout(0.25)) == "Dropout(p=0.25, inplace=False)"
    with pytest.raises(ValueError):
        nn.Dropout(-0.1)
    assert nn.Dropout2d(0.5).eval()(x.reshape(1, 100, 10, 10)).shape == (1, 100, 10, 10)
    assert nn.Dropout1d(0.5)(genesis.ones(2, 3, 4)).shape == (2, 3, 4)
    assert nn.AlphaDropout(0.5).eval()(x) is x


# -------------------------------------------------------------- activations
ACTIVATION_MODULES = [
    (nn.ReLU(), tnn.ReLU()), (nn.ReLU6(), tnn.ReLU6()), (nn.GELU(), tnn.GELU()),
    (nn.GELU("tanh"), tnn.GELU("tanh")), (nn.SiLU(), tnn.SiLU()), (nn.Mish(), tnn.Mish()),
    (nn.Sigmoid(), tnn.Sigmoid()), (nn.Tanh(), tnn.Tanh()),
    (nn.LeakyReLU(0.2), tnn.LeakyReLU(0.2)), (nn.ELU(0.7), tnn.ELU(0.7)),
    (nn.CELU(1.3), tnn.CELU(1.3)), (nn.SELU(), tnn.SELU()),
    (nn.Softplus(beta=2.0, threshold=5.0), tnn.Softplus(beta=2.0, threshold=5.0)),
    (nn.Hardtanh(-2.0, 2.0), tnn.Hardtanh(-2.0, 2.0)), (nn.Hardsigmoid(), tnn.Hardsigmoid()),
    (nn.Hardswish(), tnn.Hardswish()), (nn.LogSigmoid(), tnn.LogSigmoid()),
    (nn.Softsign(), tnn.Softsign()), (nn.Tanhshrink(), tnn.Tanhshrink()),
    (nn.Threshold(0.1, 20.0), tnn.Threshold(0.1, 20.0)), (nn.GLU(1), tnn.GLU(1)),
    (nn.Softmax(dim=1), tnn.Softmax(dim=1)), (nn.LogSoftmax(dim=-1), tnn.LogSoftmax(dim=-1)),
    (nn.Softmin(dim=0), tnn.Softmin(dim=0)), (nn.PReLU(), tnn.PReLU()),
    (nn.PReLU(4), tnn.PReLU(4)),
]


@pytest.mark.parametrize("g,t", ACTIVATION_MODULES, ids=[type(g).__name__ for g, _ in
                                                        ACTIVATION_MODULES])
def test_activation_modules(g, t, device):
    compare_module(g, t, randn(3, 4, 5) * 3, device=device)
    assert repr(g) == repr(t)


def test_inplace_relu_module():
    x = genesis.tensor(np.array([-1.0, 1.0], np.float32))
    assert nn.ReLU(inplace=True)(x) is x
    assert repr(nn.ReLU(inplace=True)) == "ReLU(inplace=True)"


# ------------------------------------------------------ small model end to end
def test_mlp_training_steps_match_torch(device):
    def build(lib):
        return lib.Sequential(lib.Linear(4, 16), lib.LayerNorm(16), lib.GELU(),
                              lib.Linear(16, 16), lib.BatchNorm1d(16), lib.SiLU(),
                              lib.Linear(16, 3))

    g, t = build(nn), build(tnn)
    copy_weights(g, t)
    td = torch_device(device)
    g.to(device)
    t.to(td)
    x, y = randn(32, 4), randn(32, 3)
    lr = 0.1
    for _ in range(3):
        g_loss = ((g(genesis.tensor(x, device=device)) - genesis.tensor(y, device=device))
                  ** 2).mean()
        t_loss = ((t(torch.tensor(x, device=td)) - torch.tensor(y, device=td)) ** 2).mean()
        assert_close(to_torch(g_loss), cpu(t_loss))
        g.zero_grad()
        t.zero_grad()
        g_loss.backward()
        t_loss.backward()
        with genesis.no_grad():
            for p in g.parameters():
                p.sub_(p.grad * lr)
        with torch.no_grad():
            for p in t.parameters():
                p.sub_(p.grad * lr)
    for (name, gv), tv in zip(g.state_dict().items(), t.state_dict().values()):
        assert_close(to_torch(gv), cpu(tv), msg=name)


# ----------------------------------------- small model, device against CPU
def _small_model():
    return nn.ModuleDict({
        "emb": nn.Embedding(20, 16, padding_idx=0),
        "enc": nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, activation="gelu",
                                          batch_first=True, norm_first=True),
        "norm": nn.RMSNorm(16),
        "bn": nn.BatchNorm1d(16),
        "head": nn.Sequential(nn.Linear(16, 8), nn.SiLU(), nn.Dropout(0.2), nn.Linear(8, 3)),
    })


def _run_small_model(model, tokens, device):
    x = model["emb"](tokens.to(device))  # (B, S, 16)
    x = model["enc"](x, is_causal=True)
    x = model["norm"](x)
    x = model["bn"](x.transpose(1, 2)).transpose(1, 2)
    return nn.functional.log_softmax(model["head"](x), dim=-1)


def test_small_model_on_device_matches_cpu(device):
    """The same module code runs on every backend: forward, backward, running stats,
    clipping and a state-dict round trip back to the CPU agree with a CPU run."""
    genesis.manual_seed(0)
    cpu_model = _small_model()
    dev = _small_model()
    dev.load_state_dict(cpu_model.state_dict())
    dev.to(device)
    kind = genesis.device(device).type
    assert all(p.device.type == kind for p in dev.parameters())
    assert all(b.device.type == kind for b in dev.buffers())
    tokens = genesis.tensor(RNG.integers(0, 20, (4, 6)))
    outs = {}
    for name, model, where in (("cpu", cpu_model, "cpu"), ("dev", dev, device)):
        model.eval()  # dropout off, so both runs are deterministic...
        model["bn"].train()  # ...but batch statistics (and running-stat updates) on
        out = _run_small_model(model, tokens, where)
        out.sum().backward()
        outs[name] = out
    # Looser than torch's float32 default (1.3e-6, 1e-5): a GPU sums reductions and matmuls
    # in another order, and the differences compound through attention, two norms, batch
    # norm, three linears and log_softmax (forward and backward).
    tol = {"atol": 1e-3, "rtol": 1e-3}
    assert_close(to_torch(outs["dev"]), to_torch(outs["cpu"]), **tol)
    dev_params = dict(dev.named_parameters())
    for name, p in cpu_model.named_parameters():
        assert_close(to_torch(dev_params[name].grad), to_torch(p.grad), **tol, msg=name)
    assert not to_torch(dev["emb"].weight.grad)[0].any()  # padding row
    assert_close(to_torch(dev["bn"].running_var), to_torch(cpu_model["bn"].running_var), **tol)
    norm_dev = nn.utils.clip_grad_norm_(dev.parameters(), 0.5)
    norm_cpu = nn.utils.clip_grad_norm_(cpu_model.parameters(), 0.5)
    assert norm_dev.device.type == kind
    assert_close(to_torch(norm_dev), to_torch(norm_cpu), **tol)
    dev.train()
    assert _run_small_model(dev, tokens, device).shape == (4, 6, 3)  # dropout on the device
    back = _small_model()
    back.load_state_dict(dev.state_dict())  # copies device -> host
    for (name, a), b in zip(back.state_dict().items(), dev.state_dict().values()):
        np.testing.assert_array_equal(a.numpy(), b.cpu().numpy(), err_msg=name)
