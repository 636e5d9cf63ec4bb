"""genesis.nn.utils: clip_grad_norm_, clip_grad_value_, parameters_to_vector and back."""

import math

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import genesis
import genesis.nn as nn

RNG = np.random.default_rng(2)


def to_torch(t):
    return torch.from_numpy(np.array(t.detach().numpy(), copy=True))


def params_with_grads(shapes, scale=1.0):
    """Matching genesis and torch parameter lists with the same ``.grad`` values."""
    g_params, t_params = [], []
    for shape in shapes:
        data = RNG.standard_normal(shape).astype(np.float32)
        grad = (RNG.standard_normal(shape) * scale).astype(np.float32)
        gp = nn.Parameter(genesis.tensor(data))
        gp.grad = genesis.tensor(grad)
        tp = torch.nn.Parameter(torch.tensor(data))
        tp.grad = torch.tensor(grad)
        g_params.append(gp)
        t_params.append(tp)
    return g_params, t_params


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    g, t = params_with_grads([(3, 4), (5,), (2, 2, 2)])
    g_total = nn.utils.clip_grad_norm_(g, max_norm, norm_type)
    t_total = torch.nn.utils.clip_grad_norm_(t, max_norm, norm_type)
    assert g_total.ndim == 0
    assert_close(to_torch(g_total), t_total)
    for gp, tp in zip(g, t):
        assert_close(to_torch(gp.grad), tp.grad)


def test_clip_grad_norm_single_tensor_skips_missing_grads():
    g, t = params_with_grads([(4,)], scale=10.0)
    extra = nn.Parameter(genesis.zeros(3))  # no grad: ignored
    total = nn.utils.clip_grad_norm_([g[0], extra], 1.0)
    t_total = torch.nn.utils.clip_grad_norm_(t[0], 1.0)
    assert_close(to_torch(total), t_total)
    assert extra.grad is None
    norm = float(np.linalg.norm(g[0].grad.numpy()))
    assert norm == pytest.approx(1.0, rel=1e-5)
    assert float(nn.utils.clip_grad_norm_([extra], 1.0).item()) == 0.0


def test_clip_grad_norm_nonfinite():
    g, _ = params_with_grads([(3,)])
    g[0].grad = genesis.tensor(np.array([1.0, float("inf"), 2.0], np.float32))
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_(g, 1.0, error_if_nonfinite=True)
    total = nn.utils.clip_grad_norm_(g, 1.0)  # no error by default, as torch
    assert math.isinf(float(total.item()))


def test_clip_grad_norm_on_model_generator():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    (model(genesis.ones(16, 4)) * 100).sum().backward()
    total = nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.1)
    assert float(total.item()) > 0.1
    after = math.sqrt(sum(float((p.grad.numpy() ** 2).sum()) for p in model.parameters()))
    assert after == pytest.approx(0.1, rel=1e-4)


def test_get_total_norm_and_clip_with_norm():
    g, t = params_with_grads([(3, 3), (2,)])
    total = nn.utils.get_total_norm([p.grad for p in g])
    assert_close(to_torch(total), torch.nn.utils.get_total_norm([p.grad for p in t]))
    nn.utils.clip_grads_with_norm_(g, 0.5, total)
    torch.nn.utils.clip_grads_with_norm_(t, 0.5, torch.nn.utils.get_total_norm(
        [p.grad for p in t]))
    for gp, tp in zip(g, t):
        assert_close(to_torch(gp.grad), tp.grad)


def test_clip_grad_value_matches_torch():
    g, t = params_with_grads([(4, 5), (3,)], scale=3.0)
    nn.utils.clip_grad_value_(g, 0.7)
    torch.nn.utils.clip_grad_value_(t, 0.7)
    for gp, tp in zip(g, t):
        assert_close(to_torch(gp.grad), tp.grad)
    with pytest.raises(ValueError):
        nn.utils.clip_grad_value_(g, float("nan"))


def test_parameters_to_vector_and_back():
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    vec = nn.utils.parameters_to_vector(model.parameters())
    assert vec.shape == (3 * 4 + 4 + 4 * 2 + 2,)
    expected = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
    np.testing.assert_array_equal(vec.detach().numpy(), expected)
    # Differentiable, as torch's: a loss on the vector reaches every parameter.
    (vec * vec).sum().backward()
    assert all(p.grad is not None for p in model.parameters())

    weight = model[0].weight
    new = genesis.arange(vec.shape[0], dtype=genesis.float32)
    nn.utils.vector_to_parameters(new, model.parameters())
    assert model[0].weight is weight  # copied into the same parameters
    np.testing.assert_array_equal(
        nn.utils.parameters_to_vector(model.parameters()).detach().numpy(), new.numpy())
    with pytest.raises(ValueError, match="elements"):
        nn.utils.vector_to_parameters(genesis.zeros(3), model.parameters())
    with pytest.raises(TypeError):
        nn.utils.vector_to_parameters(np.zeros(26), model.parameters())


@pytest.mark.parametrize("norm_type", [2.0, math.inf])
@pytest.mark.parametrize("foreach", [None, False])
def test_clip_grad_norm_multi_tensor_path_matches_torch(norm_type, foreach):
    # None takes the backend's multi_tensor_norm / multi_tensor_scale_; False the per-grad ops
    g, t = params_with_grads([(30, 4), (5,), (2, 2, 2)], scale=3.0)
    versions = [gp.grad._version for gp in g]
    g_total = nn.utils.clip_grad_norm_(g, 1.0, norm_type, foreach=foreach)
    t_total = torch.nn.utils.clip_grad_norm_(t, 1.0, norm_type, foreach=False)
    assert_close(to_torch(g_total), t_total)
    for gp, tp, v in zip(g, t, versions):
        assert_close(to_torch(gp.grad), tp.grad)
        assert gp.grad._version > v


def test_clip_grad_norm_mixed_dtypes_fall_back_per_tensor():
    a = nn.Parameter(genesis.ones(3))
    b = nn.Parameter(genesis.ones(2, dtype=genesis.float64))
    a.grad, b.grad = genesis.full((3,), 2.0), genesis.full((2,), 2.0, dtype=genesis.float64)
    total = nn.utils.clip_grad_norm_([a, b], 1.0)
    assert_close(float(total.item()), math.sqrt(20.0))
    assert_close(float(a.grad[0].item()), 2.0 / (math.sqrt(20.0) + 1e-6), rtol=1e-6, atol=0)
