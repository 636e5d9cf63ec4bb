"""Convolutions and pooling against torch: forward and backward with copied inputs/weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from device_params import cpu, to_torch, torch_device
from device_params import to_genesis as _to_genesis
from torch.testing import assert_close

import genesis
import genesis.nn as nn
import genesis.nn.functional as F

DTYPES = [torch.float32, torch.float64]


def to_genesis(t: torch.Tensor, requires_grad: bool | None = None, device: str = "cpu"):
    g = _to_genesis(t, device)
    if requires_grad if requires_grad is not None else t.requires_grad:
        g.requires_grad_(True)
    return g


def check_fn(torch_fn, genesis_fn, *inputs, grad=True, device="cpu"):
    """Run both functions on copies of ``inputs`` (torch tensors, None, or other values) —
    genesis on ``device``, torch on ``torch_device(device)`` — compare outputs, then
    backward a random cotangent and compare input gradients."""
    td = torch_device(device)
    t_in = [x.detach().clone().to(td).requires_grad_(grad and x.is_floating_point())
            if isinstance(x, torch.Tensor) else x for x in inputs]
    g_in = [to_genesis(x, device=device) if isinstance(x, torch.Tensor) else x for x in t_in]
    t_out, g_out = torch_fn(*t_in), genesis_fn(*g_in)
    assert tuple(g_out.shape) == tuple(t_out.shape)
    assert g_out.device.type == genesis.device(device).type
    assert_close(to_torch(g_out), cpu(t_out))
    if not grad:
        return
    cot = torch.randn_like(t_out)
    t_out.backward(cot)
    g_out.backward(to_genesis(cot, device=device))
    for t, g in zip(t_in, g_in):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            assert g.grad is not None
            assert_close(to_torch(g.grad), cpu(t.grad))


# ------------------------------------------------------------------------------- conv2d
CONV2D_CASES = [
    # (input shape, out channels, kernel, kwargs)
    ((2, 3, 8, 8), 4, (3, 3), {}),
    ((2, 3, 8, 8), 4, (3, 3), {"padding": 1}),
    ((1, 2, 9, 7), 5, (3, 2), {"stride": 2, "padding": (1, 0)}),
    ((2, 4, 10, 10), 6, (3, 3), {"dilation": 2, "padding": 2}),
    ((2, 4, 8, 8), 6, (3, 3), {"groups": 2, "padding": 1}),
    ((2, 4, 8, 8), 4, (3, 3), {"groups": 4}),  # depthwise
    ((2, 3, 7, 6), 2, (4, 3), {"padding": "same"}),  # even kernel: asymmetric padding
    ((2, 3, 7, 6), 2, (3, 3), {"padding": "same", "dilation": (2, 1)}),
    ((2, 3, 7, 6), 2, (3, 3), {"padding": "valid"}),
    ((3, 5, 6), 2, (2, 2), {"stride": (1, 2)}),  # unbatched
    ((2, 1, 1, 5), 3, (1, 1), {}),
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")  # torch's own note on even kernels
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape,out_ch,kernel,kw", CONV2D_CASES)
def test_conv2d_matches_torch(shape, out_ch, kernel, kw, bias, dtype, device):
    torch.manual_seed(0)
    groups = kw.get("groups", 1)
    x = torch.randn(shape, dtype=dtype)
    w = torch.randn(out_ch, shape[-3] // groups, *kernel, dtype=dtype)
    b = torch.randn(out_ch, dtype=dtype) if bias else None
    check_fn(lambda x, w, b: TF.conv2d(x, w, b, **kw), lambda x, w, b: F.conv2d(x, w, b, **kw),
             x, w, b, device=device)


CONV1D_CASES = [
    ((2, 3, 10), 4, 3, {}),
    ((2, 3, 10), 4, 3, {"padding": 1, "stride": 2}),
    ((2, 4, 12), 4, 3, {"dilation": 3, "groups": 2}),
    ((2, 3, 10), 4, 4, {"padding": "same"}),
    ((3, 9), 2, 2, {}),  # unbatched
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,out_ch,k,kw", CONV1D_CASES)
def test_conv1d_matches_torch(shape, out_ch, k, kw, dtype, device):
    torch.manual_seed(1)
    groups = kw.get("groups", 1)
    x = torch.randn(shape, dtype=dtype)
    w = torch.randn(out_ch, shape[-2] // groups, k, dtype=dtype)
    b = torch.randn(out_ch, dtype=dtype)
    check_fn(lambda x, w, b: TF.conv1d(x, w, b, **kw), lambda x, w, b: F.conv1d(x, w, b, **kw),
             x, w, b, device=device)


def test_conv2d_noncontiguous_input(device):
    torch.manual_seed(2)
    x = torch.randn(2, 8, 8, 3).permute(0, 3, 1, 2)  # channels-last view
    w = torch.randn(4, 3, 3, 3)
    check_fn(lambda x, w: TF.conv2d(x, w, padding=1), lambda x, w: F.conv2d(x, w, padding=1),
             x, w, device=device)


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("cls", ["Conv1d", "Conv2d"])
def test_conv_modules_match_torch(cls, mode, device):
    torch.manual_seed(3)
    kw = {"padding": 2, "stride": 1, "padding_mode": mode}
    tm = getattr(torch.nn, cls)(4, 6, 3, groups=2, **kw).double()
    gm = getattr(nn, cls)(4, 6, 3, groups=2, **kw).double()
    gm.load_state_dict({k: to_genesis(v) for k, v in tm.state_dict().items()})
    tm.to(torch_device(device))
    gm.to(device)
    shape = (2, 4, 9) if cls == "Conv1d" else (2, 4, 7, 6)
    x = torch.randn(shape, dtype=torch.float64)
    check_fn(tm, gm, x, device=device)
    for (name, tp), gp in zip(tm.named_parameters(), gm.parameters()):
        assert_close(to_torch(gp.grad), cpu(tp.grad), msg=name)


def test_conv2d_module_defaults_and_repr():
    m = nn.Conv2d(3, 8, 3, padding=1)
    assert tuple(m.weight.shape) == (8, 3, 3, 3) and tuple(m.bias.shape) == (8,)
    bound = 1 / np.sqrt(3 * 9)  # kaiming_uniform(a=sqrt(5)) and the bias share this bound
    assert np.abs(m.weight.detach().numpy()).max() <= bound + 1e-6
    assert np.abs(m.bias.detach().numpy()).max() <= bound + 1e-6
    assert m.weight.detach().numpy().std() > bound / 4  # actually random
    assert "Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))" in repr(m)
    assert nn.Conv2d(2, 4, 1, bias=False).bias is None
    out = m(genesis.randn(2, 3, 5, 5))
    assert tuple(out.shape) == (2, 8, 5, 5)


def test_conv_errors():
    x, w = genesis.randn(2, 4, 5, 5), genesis.randn(8, 3, 3, 3)
    with pytest.raises(ValueError, match=r"weight of size \[8, 3, 3, 3\].*input\[2, 4, 5, 5\]"
                                         r".*3 channels, but got 4"):
        F.conv2d(x, w)
    with pytest.raises(ValueError, match=r"input of size: \[4, 5\]"):
        F.conv2d(genesis.randn(4, 5), w)
    with pytest.raises(ValueError, match="not supported for strided"):
        F.conv2d(genesis.randn(2, 3, 5, 5), w, stride=2, padding="same")
    with pytest.raises(ValueError, match="invalid padding string"):
        F.conv2d(genesis.randn(2, 3, 5, 5), w, padding="full")
    with pytest.raises(ValueError, match=r"Kernel size can't be greater"):
        F.conv2d(genesis.randn(2, 3, 2, 2), w)
    with pytest.raises(ValueError, match=r"bias .*8 elements, but got bias of size \[7\]"):
        F.conv2d(genesis.randn(2, 3, 5, 5), w, genesis.randn(7))
    with pytest.raises(ValueError, match="divisible by 3"):
        F.conv2d(genesis.randn(2, 3, 5, 5), genesis.randn(8, 1, 3, 3), groups=3)
    with pytest.raises(TypeError, match="dtype"):
        F.conv2d(genesis.randn(2, 3, 5, 5, dtype=genesis.float64), w)
    with pytest.raises(ValueError, match=r"input\[2, 5, 7\].*3 channels"):
        F.conv1d(genesis.randn(2, 5, 7), genesis.randn(4, 3, 3))
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv2d(3, 4, 3, padding_mode="mirror")


# ------------------------------------------------------------------------------ pooling
MAXPOOL_CASES = [
    ((2, 3, 8, 8), {"kernel_size": 2}),
    ((1, 2, 9, 7), {"kernel_size": (2, 3)}),  # tiles with a ragged edge (dropped)
    ((2, 3, 9, 7), {"kernel_size": 3, "stride": 2}),
    ((2, 3, 9, 7), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((2, 3, 9, 7), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    ((1, 2, 10, 11), {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 1),
                      "ceil_mode": True}),
    ((1, 2, 10, 10), {"kernel_size": 3, "dilation": 2, "padding": 1}),
    ((3, 6, 6), {"kernel_size": 2}),  # unbatched
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,kw", MAXPOOL_CASES)
def test_max_pool2d_matches_torch(shape, kw, dtype, device):
    torch.manual_seed(4)
    x = torch.randn(shape, dtype=dtype)
    check_fn(lambda x: TF.max_pool2d(x, **kw), lambda x: F.max_pool2d(x, **kw), x, device=device)
    _, t_idx = TF.max_pool2d(x, return_indices=True, **kw)
    g_out, g_idx = F.max_pool2d(to_genesis(x, device=device), return_indices=True, **kw)
    assert_close(to_torch(g_idx), t_idx)
    assert_close(to_torch(g_out), TF.max_pool2d(x, **kw))


@pytest.mark.parametrize("kw", [{"kernel_size": 3, "stride": 1}, {"kernel_size": 2}],
                         ids=["overlapping", "tiles"])
def test_max_pool2d_ties_route_gradient_like_torch(kw, device):
    x = torch.ones(1, 1, 4, 4, dtype=torch.float64)  # every window is a tie
    check_fn(lambda x: TF.max_pool2d(x, **kw), lambda x: F.max_pool2d(x, **kw), x, device=device)


def test_max_pool2d_module(device):
    torch.manual_seed(5)
    x = torch.randn(2, 3, 8, 8)
    check_fn(torch.nn.MaxPool2d(3, 2, 1), nn.MaxPool2d(3, 2, 1), x, device=device)
    out, idx = nn.MaxPool2d(2, return_indices=True)(to_genesis(x, device=device))
    assert tuple(idx.shape) == (2, 3, 4, 4)


AVGPOOL_CASES = [
    ((2, 3, 8, 8), {"kernel_size": 2}),
    ((1, 2, 9, 7), {"kernel_size": (2, 3)}),  # tiles with a ragged edge (dropped)
    ((2, 3, 9, 7), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((2, 3, 9, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}),
    ((2, 3, 9, 7), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    ((1, 2, 10, 11), {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 1),
                      "ceil_mode": True}),
    ((1, 2, 10, 11), {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 1),
                      "ceil_mode": True, "count_include_pad": False}),
    ((2, 2, 6, 6), {"kernel_size": 3, "divisor_override": 4}),
    ((3, 6, 6), {"kernel_size": 2}),  # unbatched
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,kw", AVGPOOL_CASES)
def test_avg_pool2d_matches_torch(shape, kw, dtype, device):
    torch.manual_seed(6)
    x = torch.randn(shape, dtype=dtype)
    check_fn(lambda x: TF.avg_pool2d(x, **kw), lambda x: F.avg_pool2d(x, **kw), x, device=device)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,out", [
    ((2, 3, 8, 8), 1), ((2, 3, 8, 8), (4, 2)), ((2, 3, 7, 5), (3, 2)), ((2, 3, 5, 7), (5, 9)),
    ((3, 10, 6), (4, None)), ((1, 2, 6, 6), (None, 4)),
])
def test_adaptive_avg_pool2d_matches_torch(shape, out, dtype, device):
    torch.manual_seed(7)
    x = torch.randn(shape, dtype=dtype)
    check_fn(lambda x: TF.adaptive_avg_pool2d(x, out), lambda x: F.adaptive_avg_pool2d(x, out), x,
             device=device)


def test_pool_modules(device):
    torch.manual_seed(8)
    x = torch.randn(2, 3, 7, 7)
    check_fn(torch.nn.AvgPool2d(3, 2, 1, count_include_pad=False),
             nn.AvgPool2d(3, 2, 1, count_include_pad=False), x, device=device)
    check_fn(torch.nn.AdaptiveAvgPool2d((3, 2)), nn.AdaptiveAvgPool2d((3, 2)), x, device=device)


def test_pool_errors():
    with pytest.raises(ValueError, match="at most half"):
        F.max_pool2d(genesis.randn(1, 1, 5, 5), 2, padding=2)
    with pytest.raises(ValueError, match="at most half"):
        F.avg_pool2d(genesis.randn(1, 1, 5, 5), 3, padding=2)
    with pytest.raises(ValueError, match=r"input of size: \[5, 5\]"):
        F.max_pool2d(genesis.randn(5, 5), 2)
    with pytest.raises(ValueError, match="too small"):
        F.max_pool2d(genesis.randn(1, 1, 2, 2), 3)
    with pytest.raises(ValueError, match="output_size"):
        F.adaptive_avg_pool2d(genesis.randn(1, 1, 4, 4), 0)


# ----------------------------------------------------------------- float64 gradcheck
def _f64(*shape):
    return genesis.randn(*shape, dtype=genesis.float64, requires_grad=True)


@pytest.mark.parametrize("name,fn,shapes", [
    ("conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2)),
     [(1, 2, 5, 6), (3, 2, 2, 3), (3,)]),
    ("conv2d_groups", lambda x, w: F.conv2d(x, w, padding="same", groups=2),
     [(1, 4, 4, 4), (4, 2, 2, 2)]),
    ("conv1d", lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1), [(2, 2, 7), (3, 2, 3),
                                                                        (3,)]),
    ("max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), [(1, 2, 6, 5)]),
    ("max_pool2d_tiles", lambda x: F.max_pool2d(x, 2), [(1, 2, 4, 4)]),
    ("avg_pool2d", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
     [(1, 2, 6, 5)]),
    ("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (3, 2)), [(1, 2, 5, 7)]),
])
def test_gradcheck_float64(name, fn, shapes):
    from genesis.testing import gradcheck

    genesis.manual_seed(0)
    assert gradcheck(fn, tuple(_f64(*s) for s in shapes))


def test_conv_under_autocast_takes_low_activations_and_float32_weights():
    torch.manual_seed(13)
    m = nn.Conv2d(4, 6, 3, padding=1)
    g = nn.Conv2d(6, 6, 3, groups=2)
    x = genesis.randn(2, 4, 6, 6)
    with genesis.autocast("cpu", dtype=genesis.bfloat16):
        y = m(x)                  # float32 in, bfloat16 out
        z = g(y)                  # bfloat16 activation, float32 weights
        assert y.dtype is genesis.bfloat16 and z.dtype is genesis.bfloat16
        w = F.conv1d(genesis.randn(2, 4, 7).bfloat16(), genesis.randn(3, 4, 3))
        assert w.dtype is genesis.bfloat16
    z.float().sum().backward()
    assert m.weight.grad.dtype is genesis.float32 and g.bias.grad.dtype is genesis.float32
    tm, tg = torch.nn.Conv2d(4, 6, 3, padding=1), torch.nn.Conv2d(6, 6, 3, groups=2)
    tm.load_state_dict({k: to_torch(v) for k, v in m.state_dict().items()})
    tg.load_state_dict({k: to_torch(v) for k, v in g.state_dict().items()})
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tz = tg(tm(to_torch(x)))
    # bfloat16 has an 8-bit mantissa: compare at bfloat16's tolerance, not float32's
    assert_close(to_torch(z.float()), tz.float(), rtol=1.6e-2, atol=1e-2)
