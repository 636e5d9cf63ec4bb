"""F.interpolate and the Upsample layers against torch (forward and input gradient) for every
mode, align_corners, size= and scale_factor=; float64 gradcheck; bad input; and
nn.init.orthogonal_."""

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


def _check(t_fn, g_fn, x: torch.Tensor, device: str):
    t_x = x.detach().clone().to(torch_device(device)).requires_grad_(True)
    g_x = to_genesis(t_x, device, requires_grad=True)
    t_out, g_out = t_fn(t_x), g_fn(g_x)
    assert tuple(g_out.shape) == tuple(t_out.shape)
    assert_close(to_torch(g_out), cpu(t_out))
    cot = torch.randn_like(t_out)
    t_out.backward(cot)
    g_out.backward(to_genesis(cot, device))
    assert_close(to_torch(g_x.grad), cpu(t_x.grad))


CASES = [
    # (input shape, kwargs)
    ((2, 3, 5), {"scale_factor": 2}),
    ((2, 3, 5), {"size": 3}),
    ((2, 3, 7), {"scale_factor": 1.7, "mode": "nearest-exact"}),
    ((2, 3, 5), {"size": 9, "mode": "linear"}),
    ((2, 3, 6), {"scale_factor": 0.5, "mode": "linear", "align_corners": True}),
    ((2, 3, 4, 5), {"scale_factor": 2, "mode": "nearest"}),
    ((2, 3, 4, 5), {"size": (7, 3), "mode": "nearest"}),
    ((2, 3, 4, 5), {"scale_factor": (1.5, 2.5), "mode": "bilinear"}),
    ((2, 3, 4, 5), {"size": (7, 9), "mode": "bilinear", "align_corners": True}),
    ((2, 3, 8, 6), {"size": (3, 4), "mode": "bilinear"}),
    ((2, 3, 4, 5), {"scale_factor": 2, "mode": "bicubic"}),
    ((2, 3, 4, 5), {"size": (6, 3), "mode": "bicubic", "align_corners": True}),
    ((2, 3, 7, 5), {"scale_factor": 0.6, "mode": "bicubic", "recompute_scale_factor": True}),
    ((1, 2, 3, 4, 5), {"scale_factor": 2, "mode": "trilinear"}),
    ((1, 2, 3, 4, 5), {"size": (2, 6, 3), "mode": "nearest"}),
    ((2, 3, 7, 9), {"size": (3, 4), "mode": "area"}),
    ((2, 3, 10), {"scale_factor": 0.5, "mode": "area"}),
]


@pytest.mark.parametrize("shape,kw", CASES)
def test_interpolate_matches_torch(shape, kw, device):
    torch.manual_seed(0)
    _check(lambda x: TF.interpolate(x, **kw), lambda x: F.interpolate(x, **kw),
           torch.randn(*shape), device)


def test_interpolate_float64_and_large_nearest_scale():
    x = torch.randn(1, 2, 13, 11, dtype=torch.float64)
    for kw in ({"scale_factor": 3.3}, {"size": (29, 5)}, {"scale_factor": 1 / 3}):
        assert_close(to_torch(F.interpolate(to_genesis(x), **kw)), TF.interpolate(x, **kw))
        assert_close(to_torch(F.interpolate(to_genesis(x), mode="bilinear", **kw)),
                     TF.interpolate(x, mode="bilinear", **kw))


@pytest.mark.parametrize("cls,kw", [("Upsample", {"scale_factor": 2}),
                                    ("Upsample", {"size": (5, 7), "mode": "bicubic"}),
                                    ("UpsamplingNearest2d", {"scale_factor": 3}),
                                    ("UpsamplingBilinear2d", {"size": (6, 4)})])
def test_upsample_layers_match_torch(cls, kw, device):
    t_mod, g_mod = getattr(torch.nn, cls)(**kw), getattr(nn, cls)(**kw)
    _check(t_mod, g_mod, torch.randn(2, 3, 3, 4), device)
    assert repr(g_mod).startswith(cls)


@pytest.mark.parametrize("mode,size,ac", [("linear", (7,), False), ("nearest", (7,), None),
                                          ("bilinear", (5, 3), True),
                                          ("bicubic", (5, 6), False), ("area", (2, 2), None)])
def test_gradcheck_float64(mode, size, ac):
    genesis.manual_seed(0)
    x = genesis.randn(1, 2, *((4,) if len(size) == 1 else (3, 4)), dtype=genesis.float64,
                      requires_grad=True)
    assert gradcheck(lambda x: F.interpolate(x, size=size, mode=mode, align_corners=ac), (x,))


def test_bad_inputs_have_clear_errors():
    x = genesis.randn(1, 2, 4, 4)
    cases = [
        (ValueError, "only one of size or scale_factor", {"size": 3, "scale_factor": 2}),
        (ValueError, "either size or scale_factor", {}),
        (ValueError, "Got 4D input, but linear mode needs 3D input", {"size": 3,
                                                                        "mode": "linear"}),
        (ValueError, "Got 4D input, but trilinear mode needs 5D", {"size": 3,
                                                                     "mode": "trilinear"}),
        (ValueError, "align_corners option can only be set", {"size": 3,
                                                               "align_corners": True}),
        (ValueError, "same number of spatial dimensions", {"size": (3, 3, 3)}),
        (NotImplementedError, "got bogus", {"size": 3, "mode": "bogus"}),
        (NotImplementedError, "antialias", {"size": 3, "mode": "bilinear",
                                            "antialias": True}),
        (ValueError, "must be positive", {"scale_factor": 0.1}),
    ]
    for exc, pattern, kw in cases:
        with pytest.raises(exc, match=pattern):
            F.interpolate(x, **kw)
    with pytest.raises(ValueError, match="expected a 3-d, 4-d or 5-d input"):
        F.interpolate(genesis.randn(4, 4), size=2)
    with pytest.raises(TypeError, match="mode 'linear' needs a floating-point input"):
        F.interpolate(genesis.ones(1, 1, 4, dtype=genesis.int64), size=2, mode="linear")


def test_nearest_takes_integer_input_like_torch():
    x = torch.arange(12, dtype=torch.uint8).reshape(1, 1, 3, 4)
    got = F.interpolate(to_genesis(x), scale_factor=2)
    assert got.dtype is genesis.uint8
    assert torch.equal(to_torch(got), TF.interpolate(x, scale_factor=2))


# ------------------------------------------------------------------- init.orthogonal_
@pytest.mark.parametrize("shape,gain", [((3, 5), 1.0), ((6, 4), 2.0), ((4, 2, 3), 0.5),
                                        ((5, 5), 1.0)])
def test_orthogonal_fills_a_semi_orthogonal_matrix(shape, gain):
    genesis.manual_seed(0)
    w = nn.init.orthogonal_(genesis.empty(*shape), gain=gain)
    m = to_torch(w).reshape(shape[0], -1).double()
    small = m @ m.T if m.shape[0] <= m.shape[1] else m.T @ m
    assert_close(small, gain ** 2 * torch.eye(small.shape[0], dtype=torch.float64),
                 atol=1e-5, rtol=0)  # float32 storage of an orthogonal matrix
    genesis.manual_seed(0)
    again = nn.init.orthogonal_(genesis.empty(*shape), gain=gain)
    assert genesis.equal(w, again)
    other = nn.init.orthogonal_(genesis.empty(*shape), gain=gain)
    assert not genesis.equal(w, other)


def test_orthogonal_errors_and_grad_free():
    with pytest.raises(ValueError, match="Only tensors with 2 or more dimensions"):
        nn.init.orthogonal_(genesis.empty(4))
    p = nn.Parameter(genesis.empty(3, 3))
    assert nn.init.orthogonal_(p) is p and p.grad_fn is None
    lstm = nn.LSTM(4, 4)
    for name, weight in lstm.named_parameters():
        if name.startswith("weight_hh"):
            nn.init.orthogonal_(weight)  # the usual recurrent-weight recipe
