"""genesis.nn.init: fan computation, gains, distributions' moments and bounds,
reproducibility under genesis.manual_seed."""

import math

import numpy as np
import pytest
import torch

import genesis
import genesis.nn as nn
import genesis.nn.init as init


def test_calculate_gain_matches_torch():
    for name in ("linear", "conv1d", "conv2d", "sigmoid", "tanh", "relu", "leaky_relu", "selu"):
        assert init.calculate_gain(name) == pytest.approx(torch.nn.init.calculate_gain(name))
    assert init.calculate_gain("leaky_relu", 0.2) == pytest.approx(
        torch.nn.init.calculate_gain("leaky_relu", 0.2))
    with pytest.raises(ValueError, match="Unsupported nonlinearity"):
        init.calculate_gain("swishy")
    with pytest.raises(ValueError, match="not a valid number"):
        init.calculate_gain("leaky_relu", "0.2")


@pytest.mark.parametrize("shape", [(5, 3), (8, 4, 3), (16, 2, 3, 3), (4, 4, 2, 2, 2)])
def test_fan_in_fan_out_matches_torch(shape):
    assert init._calculate_fan_in_and_fan_out(genesis.empty(shape)) == \
        torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))


def test_fan_needs_two_dims():
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init._calculate_fan_in_and_fan_out(genesis.empty(5))


def test_constant_fills_and_returns_tensor():
    t = genesis.empty(2, 3)
    assert init.constant_(t, 2.5) is t
    assert (t.numpy() == 2.5).all()
    assert (init.zeros_(t).numpy() == 0).all()
    assert (init.ones_(t).numpy() == 1).all()
    eye = init.eye_(genesis.empty(3, 4)).numpy()
    np.testing.assert_array_equal(eye, np.eye(3, 4))


def test_init_on_parameter_does_not_record_graph():
    p = nn.Parameter(genesis.empty(4, 4))
    init.kaiming_uniform_(p)
    assert p.is_leaf and p.requires_grad and p.grad_fn is None


def _sample(fn, shape=(400, 500), **kwargs):
    t = genesis.empty(shape)
    fn(t, **kwargs)
    return t.numpy()


def test_uniform_and_normal_moments():
    u = _sample(init.uniform_, a=-2.0, b=3.0)
    assert u.min() >= -2.0 and u.max() < 3.0
    assert u.mean() == pytest.approx(0.5, abs=0.02)
    n = _sample(init.normal_, mean=1.0, std=0.5)
    assert n.mean() == pytest.approx(1.0, abs=0.01)
    assert n.std() == pytest.approx(0.5, rel=0.01)


def test_xavier_bounds_and_std():
    fan_in, fan_out = 500, 400
    std = math.sqrt(2.0 / (fan_in + fan_out))
    u = _sample(init.xavier_uniform_, gain=2.0)
    assert np.abs(u).max() <= 2.0 * math.sqrt(3) * std
    assert u.std() == pytest.approx(2.0 * std, rel=0.02)
    n = _sample(init.xavier_normal_)
    assert n.std() == pytest.approx(std, rel=0.02)


@pytest.mark.parametrize("mode,fan", [("fan_in", 500), ("fan_out", 400)])
def test_kaiming_std(mode, fan):
    gain = math.sqrt(2.0)
    u = _sample(init.kaiming_uniform_, mode=mode, nonlinearity="relu")
    assert np.abs(u).max() <= gain * math.sqrt(3.0 / fan)
    assert u.std() == pytest.approx(gain / math.sqrt(fan), rel=0.02)
    n = _sample(init.kaiming_normal_, mode=mode, nonlinearity="relu")
    assert n.std() == pytest.approx(gain / math.sqrt(fan), rel=0.02)
    a = 0.3
    u = _sample(init.kaiming_uniform_, a=a, mode=mode)
    assert u.std() == pytest.approx(math.sqrt(2 / (1 + a * a)) / math.sqrt(fan), rel=0.02)
    with pytest.raises(ValueError, match="Mode"):
        init.kaiming_normal_(genesis.empty(3, 3), mode="fan_avg")


def test_kaiming_zero_element_tensor_warns():
    with pytest.warns(UserWarning, match="zero-element"):
        init.kaiming_uniform_(genesis.empty(0, 3))


def test_trunc_normal_bounds_and_moments():
    t = _sample(init.trunc_normal_, mean=0.5, std=1.0, a=-1.0, b=2.0)
    assert t.min() >= -1.0 and t.max() <= 2.0
    ref = torch.nn.init.trunc_normal_(torch.empty(400, 500), mean=0.5, std=1.0, a=-1.0, b=2.0)
    assert t.mean() == pytest.approx(ref.mean().item(), abs=0.01)
    assert t.std() == pytest.approx(ref.std().item(), rel=0.02)


def test_manual_seed_makes_init_reproducible():
    def draw():
        genesis.manual_seed(7)
        return [init.kaiming_normal_(genesis.empty(3, 4)).numpy(),
                init.xavier_uniform_(genesis.empty(3, 4)).numpy(),
                nn.Linear(4, 2).weight.detach().numpy()]

    for a, b in zip(draw(), draw()):
        np.testing.assert_array_equal(a, b)


def test_generator_argument():
    g1 = genesis.Generator().manual_seed(3)
    g2 = genesis.Generator().manual_seed(3)
    a = init.normal_(genesis.empty(10), generator=g1).numpy()
    b = init.normal_(genesis.empty(10), generator=g2).numpy()
    np.testing.assert_array_equal(a, b)


def test_dirac_makes_identity_conv_weight():
    w = init.dirac_(genesis.empty(4, 4, 3, 3)).numpy()
    ref = torch.nn.init.dirac_(torch.empty(4, 4, 3, 3)).numpy()
    np.testing.assert_array_equal(w, ref)
