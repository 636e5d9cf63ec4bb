"""genesis.nn.functional against torch.nn.functional: forward values and gradients."""

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from device_params import cpu, to_genesis, to_torch, torch_device
from torch.testing import assert_close

import genesis
import genesis.nn.functional as F
from genesis.autograd import gradcheck

RNG = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def compare(g_fn, t_fn, *arrays, grad=True, device="cpu", **tol):
    """Run ``g_fn`` on genesis tensors on ``device`` and ``t_fn`` on torch tensors (on
    ``torch_device(device)``) made from ``arrays``; compare outputs and, with ``grad``, the
    gradients of every floating input for a random output gradient."""
    td = torch_device(device)

    def wants_grad(a):
        return grad and isinstance(a, np.ndarray) and a.dtype.kind == "f"

    g_in = [genesis.tensor(a, device=device, requires_grad=wants_grad(a))
            if isinstance(a, np.ndarray) else a for a in arrays]
    t_in = [torch.tensor(a, device=td, requires_grad=wants_grad(a))
            if isinstance(a, np.ndarray) else a for a in arrays]
    g_out, t_out = g_fn(*g_in), t_fn(*t_in)
    assert tuple(g_out.shape) == tuple(t_out.shape)
    assert g_out.device.type == genesis.device(device).type
    assert_close(to_torch(g_out), cpu(t_out), **tol)
    if grad:
        go = torch.randn_like(t_out)
        t_out.backward(go)
        g_out.backward(to_genesis(go, device))
        for g, t in zip(g_in, t_in):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                assert g.grad is not None
                assert_close(to_torch(g.grad), cpu(t.grad), **tol)
    return g_out, t_out


# ----------------------------------------------------------- activations
ACTIVATIONS = [
    ("relu", F.relu, TF.relu),
    ("relu6", F.relu6, TF.relu6),
    ("gelu", F.gelu, TF.gelu),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"),
     lambda x: TF.gelu(x, approximate="tanh")),
    ("silu", F.silu, TF.silu),
    ("mish", F.mish, TF.mish),
    ("sigmoid", F.sigmoid, torch.sigmoid),
    ("tanh", F.tanh, torch.tanh),
    ("leaky_relu", F.leaky_relu, TF.leaky_relu),
    ("leaky_relu_0.2", lambda x: F.leaky_relu(x, 0.2), lambda x: TF.leaky_relu(x, 0.2)),
    ("elu", F.elu, TF.elu),
    ("elu_alpha", lambda x: F.elu(x, 0.5), lambda x: TF.elu(x, 0.5)),
    ("celu", lambda x: F.celu(x, 1.5), lambda x: TF.celu(x, 1.5)),
    ("selu", F.selu, TF.selu),
    ("softplus", F.softplus, TF.softplus),
    ("softplus_beta", lambda x: F.softplus(x, beta=2.0, threshold=3.0),
     lambda x: TF.softplus(x, beta=2.0, threshold=3.0)),
    ("hardtanh", F.hardtanh, TF.hardtanh),
    ("hardsigmoid", F.hardsigmoid, TF.hardsigmoid),
    ("hardswish", F.hardswish, TF.hardswish),
    ("logsigmoid", F.logsigmoid, TF.logsigmoid),
    ("softsign", F.softsign, TF.softsign),
    ("tanhshrink", F.tanhshrink, TF.tanhshrink),
    ("threshold", lambda x: F.threshold(x, 0.5, -2.0), lambda x: TF.threshold(x, 0.5, -2.0)),
    ("glu", F.glu, TF.glu),
]


@pytest.mark.parametrize("name,g_fn,t_fn", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activation_matches_torch(name, g_fn, t_fn, device):
    x = randn(4, 6) * 3
    x[0, :3] = [30.0, -30.0, 0.5]  # saturated regions and a non-tie point
    compare(g_fn, t_fn, x, device=device)


@pytest.mark.parametrize("name,g_fn,t_fn", ACTIVATIONS[:16], ids=[a[0] for a in ACTIVATIONS[:16]])
def test_activation_float64(name, g_fn, t_fn, device):
    compare(g_fn, t_fn, randn(3, 4, dtype=np.float64), device=device)


def test_extreme_inputs_have_finite_gradients():
    x = np.array([-100.0, -30.0, 0.3, 30.0, 100.0], dtype=np.float32)
    for fn in (F.elu, F.softplus, F.selu, F.logsigmoid, F.mish, F.celu):
        t = genesis.tensor(x, requires_grad=True)
        fn(t).sum().backward()
        assert np.isfinite(t.grad.numpy()).all(), fn.__name__


def test_prelu_matches_torch(device):
    compare(F.prelu, TF.prelu, randn(2, 3, 4), np.array([0.1, 0.2, 0.3], np.float32), device=device)
    compare(F.prelu, TF.prelu, randn(2, 3), np.array([0.25], np.float32), device=device)


def test_inplace_activations_write_input():
    x = genesis.tensor(np.array([-1.0, 2.0], np.float32))
    out = F.relu(x, inplace=True)
    assert out is x and x.numpy().tolist() == [0.0, 2.0]
    y = genesis.tensor(np.array([-1.0, 2.0], np.float32))
    F.leaky_relu(y, 0.5, inplace=True)
    assert y.numpy().tolist() == [-0.5, 2.0]


def test_gelu_bad_approximate():
    with pytest.raises(ValueError, match="approximate"):
        F.gelu(genesis.zeros(2), approximate="fast")


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_log_softmax_softmin(dim, device):
    x = randn(3, 5, 4)
    compare(lambda t: F.softmax(t, dim), lambda t: TF.softmax(t, dim), x, device=device)
    compare(lambda t: F.log_softmax(t, dim), lambda t: TF.log_softmax(t, dim), x, device=device)
    compare(lambda t: F.softmin(t, dim), lambda t: TF.softmin(t, dim), x, device=device)


def test_softmax_dtype_argument(device):
    x = randn(2, 3)
    g, t = compare(lambda t: F.softmax(t, -1, dtype=genesis.float64),
                   lambda t: TF.softmax(t, -1, dtype=torch.float64), x, device=device)
    assert g.dtype is genesis.float64
    compare(lambda t: F.log_softmax(t, 1, dtype=genesis.float64),
            lambda t: TF.log_softmax(t, 1, dtype=torch.float64), x, device=device)


def test_softmax_implicit_dim_warns_like_torch():
    with pytest.warns(UserWarning, match="Implicit dimension"):
        out = F.softmax(genesis.tensor(randn(2, 3)))
    assert_close(to_torch(out).sum(1), torch.ones(2))


# ------------------------------------------------------------------ linear
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(5,), (4, 5), (2, 3, 5)])
def test_linear(bias, shape, device):
    args = [randn(*shape), randn(7, 5)] + ([randn(7)] if bias else [])
    compare(F.linear, TF.linear, *args, device=device)


def test_bilinear(device):
    compare(F.bilinear, TF.bilinear, randn(4, 3), randn(4, 5), randn(2, 3, 5), randn(2),
            device=device)


# ----------------------------------------------------------- normalisation
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("nshape", [(6,), (4, 6)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm(affine, nshape, dtype, device):
    x = randn(3, 4, 6, dtype=dtype) * 2 + 1
    extra = [randn(*nshape, dtype=dtype), randn(*nshape, dtype=dtype)] if affine else []
    compare(lambda x, *wb: F.layer_norm(x, nshape, *wb, eps=1e-5),
            lambda x, *wb: TF.layer_norm(x, nshape, *wb, eps=1e-5), x, *extra, device=device)


@pytest.mark.parametrize("eps", [None, 1e-6])
def test_rms_norm(eps, device):
    compare(lambda x, w: F.rms_norm(x, (8,), w, eps), lambda x, w: TF.rms_norm(x, (8,), w, eps),
            randn(2, 3, 8), randn(8), device=device)
    compare(lambda x: F.rms_norm(x, 8, eps=eps), lambda x: TF.rms_norm(x, (8,), eps=eps),
            randn(5, 8), device=device)


# (4, 6) in float64: its groups hold 2 and 3 values, and the gradient of a group whose values
# nearly agree grows as 1/sqrt(eps) (~300x): for an unlucky float32 draw the two libraries'
# roundings then differ by more than float32's tolerance (it failed once on an H200)
@pytest.mark.parametrize(("shape", "dtype"), [((4, 6), np.float64), ((2, 6, 5), np.float32),
                                              ((2, 6, 3, 3), np.float32)])
def test_group_norm(shape, dtype, device):
    compare(lambda x, w, b: F.group_norm(x, 3, w, b), lambda x, w, b: TF.group_norm(x, 3, w, b),
            randn(*shape, dtype=dtype) * 3 + 2, randn(6, dtype=dtype), randn(6, dtype=dtype),
            device=device)
    compare(lambda x: F.group_norm(x, 2), lambda x: TF.group_norm(x, 2),
            randn(*shape, dtype=dtype), device=device)


def test_group_norm_bad_groups():
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(genesis.zeros(2, 5, 3), 2)


def test_instance_norm(device):
    compare(lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
            lambda x, w, b: TF.instance_norm(x, weight=w, bias=b),
            randn(2, 3, 4, 5), randn(3), randn(3), device=device)


@pytest.mark.parametrize("shape", [(8, 3), (4, 3, 5), (2, 3, 4, 4)])
def test_batch_norm_training_updates_running_stats(shape, device):
    x = randn(*shape) * 2 + 0.5
    w, b = randn(3), randn(3)
    td = torch_device(device)
    g_rm, g_rv = genesis.zeros(3, device=device), genesis.ones(3, device=device)
    t_rm, t_rv = torch.zeros(3, device=td), torch.ones(3, device=td)
    compare(lambda x, w, b: F.batch_norm(x, g_rm, g_rv, w, b, training=True, momentum=0.3),
            lambda x, w, b: TF.batch_norm(x, t_rm, t_rv, w, b, training=True, momentum=0.3),
            x, w, b, device=device)
    assert_close(to_torch(g_rm), cpu(t_rm))
    assert_close(to_torch(g_rv), cpu(t_rv))
    compare(lambda x, w, b: F.batch_norm(x, g_rm, g_rv, w, b, training=False),
            lambda x, w, b: TF.batch_norm(x, t_rm, t_rv, w, b, training=False), x, w, b,
            device=device)


def test_batch_norm_without_running_stats_and_errors(device):
    compare(lambda x: F.batch_norm(x, None, None, training=True),
            lambda x: TF.batch_norm(x, None, None, training=True), randn(5, 4), device=device)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(genesis.zeros(1, 3), None, None, training=True)


def test_normalize(device):
    compare(F.normalize, TF.normalize, randn(4, 5), device=device)
    compare(lambda x: F.normalize(x, p=1.0, dim=0), lambda x: TF.normalize(x, p=1.0, dim=0),
            randn(4, 5), device=device)


@pytest.mark.parametrize("fn", [
    lambda x: F.gelu(x), lambda x: F.gelu(x, approximate="tanh"), lambda x: F.softplus(x, 2.0),
    lambda x: F.elu(x), lambda x: F.silu(x),
    lambda x: F.group_norm(x, 2), lambda x: F.layer_norm(x, (4, 2)),
    lambda x: F.rms_norm(x, (2,)),
    lambda x: F.batch_norm(x, None, None, training=True), lambda x: F.mish(x),
], ids=["gelu", "gelu_tanh", "softplus", "elu", "silu", "group_norm", "layer_norm", "rms_norm",
        "batch_norm", "mish"])
def test_composites_float64_gradcheck(fn):
    x = genesis.tensor(randn(3, 4, 2, dtype=np.float64), requires_grad=True)
    assert gradcheck(fn, (x,))


# ------------------------------------------------------------------ dropout
def test_dropout_eval_and_p0_are_identity():
    x = genesis.tensor(randn(10))
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0, training=True) is x
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(x, 1.5)


def test_dropout_masks_scale_and_gradient():
    x = genesis.ones(200, 100, requires_grad=True)
    out = F.dropout(x, p=0.3)
    vals = out.detach().numpy()
    kept = vals != 0
    assert abs(kept.mean() - 0.7) < 0.02
    np.testing.assert_allclose(vals[kept], 1 / 0.7, rtol=1e-6)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), vals, rtol=1e-6)  # same mask in backward


def test_dropout_reproducible_with_manual_seed():
    genesis.manual_seed(123)
    a = F.dropout(genesis.ones(50), 0.5).numpy()
    genesis.manual_seed(123)
    b = F.dropout(genesis.ones(50), 0.5).numpy()
    np.testing.assert_array_equal(a, b)


def test_dropout_p1_zeros_and_feature_dropout():
    x = genesis.ones(3, 4, requires_grad=True)
    out = F.dropout(x, 1.0)
    assert not out.detach().numpy().any()
    y = F.dropout2d(genesis.ones(8, 16, 5, 5), 0.5).numpy()
    per_channel = y.reshape(8, 16, 25)
    # Whole channels are kept or dropped together.
    assert ((per_channel == 0).all(-1) | (per_channel == 2.0).all(-1)).all()
    with pytest.raises(RuntimeError, match="Expected 3D or 4D"):
        F.dropout2d(genesis.ones(2, 3), 0.5)
    z = F.dropout1d(genesis.ones(4, 6, 7), 0.5).numpy()
    assert ((z == 0).all(-1) | (z == 2.0).all(-1)).all()


def test_alpha_dropout_keeps_moments():
    genesis.manual_seed(0)
    x = genesis.tensor(randn(200000))
    out = F.alpha_dropout(x, 0.2, training=True).numpy()
    assert abs(out.mean()) < 0.02 and abs(out.std() - 1.0) < 0.03


# ---------------------------------------------------------------- embedding
def test_embedding_and_padding_idx_grad(device):
    weight = randn(6, 4)
    idx = np.array([[0, 2, 5], [2, 2, 1]], dtype=np.int64)
    g_idx = genesis.tensor(idx, device=device)
    t_idx = torch.tensor(idx, device=torch_device(device))
    compare(lambda w: F.embedding(g_idx, w), lambda w: TF.embedding(t_idx, w), weight,
            device=device)
    g, _ = compare(lambda w: F.embedding(g_idx, w, padding_idx=2),
                   lambda w: TF.embedding(t_idx, w, padding_idx=2), weight, device=device)
    compare(lambda w: F.embedding(g_idx, w, padding_idx=-1),
            lambda w: TF.embedding(t_idx, w, padding_idx=-1), weight, device=device)


def test_embedding_max_norm_renormalises_rows_in_place(device):
    td = torch_device(device)
    weight = randn(5, 3) * 5
    g_w, t_w = genesis.tensor(weight, device=device), torch.tensor(weight, device=td)
    idx = np.array([1, 3, 3], dtype=np.int64)
    g = F.embedding(genesis.tensor(idx, device=device), g_w, max_norm=1.0)
    t = TF.embedding(torch.tensor(idx, device=td), t_w, max_norm=1.0)
    assert_close(to_torch(g), cpu(t))
    assert_close(to_torch(g_w), cpu(t_w))


def test_one_hot(device):
    idx = np.array([[0, 3], [1, 1]], dtype=np.int64)
    g = F.one_hot(genesis.tensor(idx, device=device), 5)
    assert g.dtype is genesis.int64 and g.device.type == genesis.device(device).type
    assert_close(to_torch(g), TF.one_hot(torch.tensor(idx), 5))
    assert_close(to_torch(F.one_hot(genesis.tensor(idx, device=device))),
                 TF.one_hot(torch.tensor(idx)))
    with pytest.raises(RuntimeError, match="LongTensor"):
        F.one_hot(genesis.zeros(3), 3)


# ------------------------------------------------------------------ padding
@pytest.mark.parametrize("pad", [(1, 2), (0, 0, 2, 1), (2, 0, 1, 1), (-1, 2), (1, -2, 0, 1),
                                 (1, 1, 1, 1, 1, 1)])
def test_pad_constant(pad, device):
    compare(lambda x: F.pad(x, pad), lambda x: TF.pad(x, pad), randn(2, 3, 4, 5), device=device)
    compare(lambda x: F.pad(x, pad, value=1.5), lambda x: TF.pad(x, pad, value=1.5),
            randn(2, 3, 4, 5), device=device)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pad", [(1, 2), (2, 1, 1, 3)])
def test_pad_index_modes(mode, pad, device):
    shape = (2, 3, 5) if len(pad) == 2 else (2, 3, 4, 5)  # torch's supported ranks
    compare(lambda x: F.pad(x, pad, mode=mode), lambda x: TF.pad(x, pad, mode=mode),
            randn(*shape), device=device)


def test_pad_errors():
    x = genesis.zeros(2, 3)
    with pytest.raises(ValueError, match="divisible by 2"):
        F.pad(x, (1,))
    with pytest.raises(RuntimeError, match="Padding size should be less"):
        F.pad(genesis.zeros(1, 2, 3), (3, 0), mode="reflect")
    with pytest.raises(NotImplementedError):
        F.pad(x, (1, 1), mode="wrap")


# ---------------------------------------------------------------- distances
@pytest.mark.parametrize("dim", [1, -1, 0])
def test_cosine_similarity(dim, device):
    def g_fn(a, b):
        return F.cosine_similarity(a, b, dim)

    def t_fn(a, b):
        return TF.cosine_similarity(a, b, dim)

    compare(g_fn, t_fn, randn(4, 5, 3), randn(4, 5, 3), device=device)
    # broadcasting, in float64: at dim 0 the reduction runs along b's broadcast dimension, and
    # b's gradient is a sum of four terms of size 1/(|a| |b|) that nearly cancel; in float32
    # the two libraries' summation orders left 2.3e-5 between them for some random draws
    # (twice on an H200), which is rounding, not a wrong formula
    compare(g_fn, t_fn, randn(4, 5, 3, dtype=np.float64), randn(1, 5, 3, dtype=np.float64),
            device=device)


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0])
def test_pairwise_distance(p, device):
    compare(lambda a, b: F.pairwise_distance(a, b, p),
            lambda a, b: TF.pairwise_distance(a, b, p), randn(6, 4), randn(6, 4), device=device)
    compare(lambda a, b: F.pairwise_distance(a, b, p, keepdim=True),
            lambda a, b: TF.pairwise_distance(a, b, p, keepdim=True), randn(2, 6, 4), randn(4),
            device=device)


# -------------------------------------------------------------- losses
def test_losses_reexported():
    for name in ("cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss",
                 "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
                 "conv1d", "conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"):
        assert callable(getattr(F, name)), name
