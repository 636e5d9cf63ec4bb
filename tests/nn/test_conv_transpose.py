"""conv_transpose1d/2d and the ConvTranspose layers against torch (forward, input, weight and
bias gradients), float64 gradcheck, output_size, and bad input."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as TF
from device_params import cpu, to_genesis, to_torch, torch_device
from torch.testing import assert_close

import genesis
import genesis.nn as nn
import genesis.nn.functional as F
from genesis.testing import gradcheck


def _check(t_fn, g_fn, arrays, device, dtype=torch.float32):
    """Both functions on the same leaves; compare the output and every leaf's gradient."""
    td = torch_device(device)
    t_in = [None if a is None else a.to(td, dtype).requires_grad_(True) for a in arrays]
    g_in = [None if a is None else to_genesis(a, device, requires_grad=True) for a in t_in]
    t_out, g_out = t_fn(*t_in), g_fn(*g_in)
    assert tuple(g_out.shape) == tuple(t_out.shape)
    assert_close(to_torch(g_out), cpu(t_out))
    cot = torch.randn_like(t_out)
    t_out.backward(cot)
    g_out.backward(to_genesis(cot, device))
    for t, g in zip(t_in, g_in):
        if t is not None:
            assert_close(to_torch(g.grad), cpu(t.grad))


CASES_2D = [
    # (input shape, weight shape, kwargs)
    ((2, 4, 5, 5), (4, 3, 3, 3), {}),
    ((2, 4, 5, 6), (4, 3, 3, 3), {"stride": 2}),
    ((1, 4, 5, 5), (4, 2, 4, 4), {"stride": 2, "padding": 1}),
    ((2, 4, 4, 5), (4, 3, 3, 2), {"stride": (2, 3), "padding": (1, 0),
                                   "output_padding": (1, 2)}),
    ((2, 4, 5, 5), (4, 2, 3, 3), {"groups": 2, "stride": 2, "output_padding": 1}),
    ((2, 6, 4, 4), (6, 1, 3, 3), {"groups": 6, "dilation": 2, "padding": 2}),
    ((2, 3, 4, 4), (3, 2, 3, 3), {"dilation": (2, 1), "stride": 2, "padding": 3,
                                   "output_padding": 1}),  # padding > d*(k-1): crops
    ((3, 4, 4), (3, 2, 2, 2), {"stride": 2}),  # unbatched
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape,wshape,kw", CASES_2D)
def test_conv_transpose2d_matches_torch(shape, wshape, kw, bias, device):
    torch.manual_seed(0)
    out_ch = wshape[1] * kw.get("groups", 1)
    arrays = [torch.randn(*shape), torch.randn(*wshape), torch.randn(out_ch) if bias else None]
    _check(lambda x, w, b: TF.conv_transpose2d(x, w, b, **kw),
           lambda x, w, b: F.conv_transpose2d(x, w, b, **kw), arrays, device)


@pytest.mark.parametrize("shape,wshape,kw", [
    ((2, 3, 7), (3, 4, 3), {}),
    ((2, 3, 7), (3, 4, 4), {"stride": 3, "padding": 1, "output_padding": 2}),
    ((2, 4, 6), (4, 1, 3), {"groups": 4, "dilation": 2, "stride": 2}),
    ((3, 5), (3, 2, 2), {"stride": 2}),  # unbatched
])
def test_conv_transpose1d_matches_torch(shape, wshape, kw, device):
    torch.manual_seed(1)
    out_ch = wshape[1] * kw.get("groups", 1)
    arrays = [torch.randn(*shape), torch.randn(*wshape), torch.randn(out_ch)]
    _check(lambda x, w, b: TF.conv_transpose1d(x, w, b, **kw),
           lambda x, w, b: F.conv_transpose1d(x, w, b, **kw), arrays, device)


@pytest.mark.parametrize("cls,shape,kw,output_size", [
    ("ConvTranspose2d", (2, 4, 5, 5), {"stride": 2, "padding": 1}, None),
    ("ConvTranspose2d", (2, 4, 5, 5), {"stride": 2, "padding": 1}, (10, 9)),
    ("ConvTranspose2d", (2, 4, 5, 5), {"stride": 3, "groups": 2, "bias": False},
     (2, 6, 17, 15)),
    ("ConvTranspose1d", (2, 4, 5), {"stride": 2, "dilation": 2}, [14]),
])
def test_layers_match_torch_with_copied_weights(cls, shape, kw, output_size, device):
    torch.manual_seed(2)
    t_mod = getattr(torch.nn, cls)(4, 6, 3, **kw).to(torch_device(device))
    g_mod = getattr(nn, cls)(4, 6, 3, **kw, device=device)
    assert tuple(g_mod.weight.shape) == tuple(t_mod.weight.shape)
    g_mod.load_state_dict({k: to_genesis(v, device) for k, v in t_mod.state_dict().items()})
    x = torch.randn(*shape)
    _check(lambda x: t_mod(x, output_size), lambda x: g_mod(x, output_size), [x], device)
    for name, p in t_mod.named_parameters():
        assert_close(to_torch(g_mod.get_parameter(name).grad), cpu(p.grad), msg=name)


def test_layer_default_init_matches_torch_bounds():
    g = nn.ConvTranspose2d(8, 4, 3, groups=2)
    fan_in = 2 * 9  # weight (8, 2, 3, 3): dim 1 times the kernel, as torch computes it
    assert float(g.bias.abs().max()) <= 1 / fan_in ** 0.5
    assert float(g.weight.abs().max()) <= 1 / fan_in ** 0.5  # kaiming_uniform(a=sqrt(5))
    assert "stride=(1, 1)" in repr(g) and "groups=2" in repr(g)


@pytest.mark.parametrize("fn,shapes", [
    (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
     [(1, 2, 3, 3), (2, 2, 3, 3), (2,)]),
    (lambda x, w: F.conv_transpose2d(x, w, stride=(1, 2), groups=2, dilation=(2, 1)),
     [(1, 4, 3, 2), (4, 1, 2, 2)]),
    (lambda x, w, b: F.conv_transpose1d(x, w, b, stride=3, padding=2, output_padding=1),
     [(2, 2, 4), (2, 3, 3), (3,)]),
])
def test_gradcheck_float64(fn, shapes):
    genesis.manual_seed(0)
    leaves = tuple(genesis.randn(*s, dtype=genesis.float64, requires_grad=True) for s in shapes)
    assert gradcheck(fn, leaves)


def test_bad_inputs_have_clear_errors():
    x, w = genesis.randn(1, 4, 5, 5), genesis.randn(4, 2, 3, 3)
    with pytest.raises(ValueError, match=r"expected input\[1, 3, 5, 5\] to have 4 channels"):
        F.conv_transpose2d(genesis.randn(1, 3, 5, 5), w)
    with pytest.raises(ValueError, match="output padding must be smaller than either stride"):
        F.conv_transpose2d(x, w, stride=2, output_padding=2)
    with pytest.raises(ValueError, match="expected bias to be 1-dimensional with 2 elements"):
        F.conv_transpose2d(x, w, genesis.randn(4))
    with pytest.raises(ValueError, match="divisible by 3 at dimension 0"):
        F.conv_transpose2d(x, w, groups=3)
    with pytest.raises(TypeError, match="dtype"):
        F.conv_transpose2d(x.double(), w)
    with pytest.raises(ValueError, match="expected 2D .unbatched. or 3D"):
        F.conv_transpose1d(x, genesis.randn(4, 2, 3))
    with pytest.raises(ValueError, match="not positive"):
        F.conv_transpose2d(genesis.randn(1, 4, 1, 1), genesis.randn(4, 2, 1, 1), padding=1)
    layer = nn.ConvTranspose2d(4, 2, 3, stride=2)
    with pytest.raises(ValueError, match=r"valid sizes range from \[11, 11\] to \[12, 12\]"):
        layer(x, output_size=(13, 11))
    with pytest.raises(ValueError, match='Only "zeros" padding mode'):
        nn.ConvTranspose2d(4, 2, 3, padding_mode="reflect")
