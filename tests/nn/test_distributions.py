"""``genesis.distributions`` against ``torch.distributions``: log_prob, entropy, moments,
cdf/icdf and shapes, their gradients, the reparameterised ``rsample``'s gradients, sample
statistics on fixed seeds, validation errors, and ``kl_divergence``."""

from __future__ import annotations

import pytest
import torch
import torch.distributions as td
from device_params import to_genesis, to_torch
from torch.testing import assert_close

import genesis
import genesis.distributions as gd
from genesis.testing import gradcheck

F64 = torch.float64


def _t(values):
    return torch.tensor(values, dtype=F64)


# (name, torch parameters as kwargs, values to score)
CASES = [
    ("Normal", {"loc": _t([0.0, 1.5, -2.0]), "scale": _t([1.0, 0.5, 3.0])},
     _t([[0.3, 1.0, -7.0], [2.0, 1.5, 0.0]])),
    ("Normal", {"loc": _t([[0.0], [1.0]]), "scale": _t([0.5, 2.0])}, _t([0.25, -1.0])),
    ("Uniform", {"low": _t([0.0, -1.0]), "high": _t([2.0, 3.0])}, _t([[0.5, 2.5], [1.9, -1.0]])),
    ("Bernoulli", {"probs": _t([0.2, 0.5, 0.9])}, _t([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])),
    ("Bernoulli", {"logits": _t([[-1.0, 0.0], [3.0, 0.5]])}, _t([1.0, 0.0])),
    ("Categorical", {"probs": _t([[0.1, 0.2, 0.7], [1.0, 1.0, 2.0]])}, torch.tensor([[2, 0]])),
    ("Categorical", {"logits": _t([0.5, -1.0, 2.0, 0.0])}, torch.tensor([[3], [1]])),
]
IDS = [f"{c[0]}-{'-'.join(c[1])}-{i}" for i, c in enumerate(CASES)]


def _pair(name, params, requires_grad=False):
    ours = {k: to_genesis(v, requires_grad=requires_grad) for k, v in params.items()}
    theirs = {k: v.clone().requires_grad_(requires_grad) for k, v in params.items()}
    return getattr(gd, name)(**ours), getattr(td, name)(**theirs), ours, theirs


@pytest.mark.parametrize("name,params,values", CASES, ids=IDS)
def test_scores_moments_and_shapes_match_torch(name, params, values):
    ours, theirs, _, _ = _pair(name, params)
    assert tuple(ours.batch_shape) == tuple(theirs.batch_shape)
    assert tuple(ours.event_shape) == tuple(theirs.event_shape)
    assert_close(to_torch(ours.log_prob(to_genesis(values))), theirs.log_prob(values))
    assert_close(to_torch(ours.entropy()), theirs.entropy())
    for moment in ("mean", "variance", "stddev", "mode"):
        assert_close(to_torch(getattr(ours, moment)), getattr(theirs, moment),
                     equal_nan=True, check_dtype=moment != "mode")
    if name in ("Normal", "Uniform"):
        assert_close(to_torch(ours.cdf(to_genesis(values))), theirs.cdf(values))
        probs = _t([0.1, 0.5])[:, None].expand(2, *theirs.batch_shape)
        assert_close(to_torch(ours.icdf(to_genesis(probs))), theirs.icdf(probs))
    if name in ("Bernoulli", "Categorical"):
        assert_close(to_torch(ours.probs), theirs.probs)
        assert_close(to_torch(ours.logits), theirs.logits)
        assert_close(to_torch(ours.enumerate_support()), theirs.enumerate_support(),
                     check_dtype=False)
    assert ours.has_rsample == theirs.has_rsample
    assert tuple(ours.sample((4, 2)).shape) == tuple(theirs.sample((4, 2)).shape)


@pytest.mark.parametrize("name,params,values", CASES, ids=IDS)
def test_gradients_of_log_prob_and_entropy_match_torch(name, params, values):
    ours, theirs, g_params, t_params = _pair(name, params, requires_grad=True)
    (ours.log_prob(to_genesis(values)).sum() + ours.entropy().sum()).backward()
    (theirs.log_prob(values).sum() + theirs.entropy().sum()).backward()
    for key in params:
        assert_close(to_torch(g_params[key].grad), t_params[key].grad)


@pytest.mark.parametrize("name,params", [
    ("Normal", {"loc": _t([0.0, 1.5]), "scale": _t([1.0, 0.5])}),
    ("Uniform", {"low": _t([0.0, -1.0]), "high": _t([2.0, 3.0])}),
])
def test_rsample_is_differentiable_through_the_reparameterisation(name, params):
    """d sample / d loc = 1 and / d scale = eps (Normal); d / d low = 1 - u and
    / d high = u (Uniform): the draws' own noise, checked per element and by gradcheck."""
    inputs = tuple(to_genesis(v, requires_grad=True) for v in params.values())

    def draw(*args):
        genesis.manual_seed(0)  # the same noise on every call gradcheck makes
        return getattr(gd, name)(*args).rsample((3,))

    assert gradcheck(draw, inputs)
    sample = draw(*inputs)
    sample.sum().backward()
    first, second = (p.detach() for p in inputs)
    noise = (sample.detach() - first) / (second - (first if name == "Uniform" else 0))
    expected_second = noise.sum(0)
    expected_first = 3 - expected_second if name == "Uniform" else genesis.full_like(first, 3)
    assert_close(to_torch(inputs[0].grad), to_torch(expected_first))
    assert_close(to_torch(inputs[1].grad), to_torch(expected_second))


def test_sample_statistics_on_a_fixed_seed():
    genesis.manual_seed(0)
    n = 20000
    normal = gd.Normal(genesis.tensor([1.0, -2.0]), genesis.tensor([0.5, 2.0])).sample((n,))
    assert_close(to_torch(normal.mean(0)), torch.tensor([1.0, -2.0]), atol=0.05, rtol=0)
    assert_close(to_torch(normal.std(0)), torch.tensor([0.5, 2.0]), atol=0.05, rtol=0)
    bern = gd.Bernoulli(probs=genesis.tensor([0.1, 0.8])).sample((n,))
    assert_close(to_torch(bern.mean(0)), torch.tensor([0.1, 0.8]), atol=0.02, rtol=0)
    cat = gd.Categorical(probs=genesis.tensor([0.2, 0.3, 0.5])).sample((n,))
    assert cat.dtype is genesis.int64 and cat.shape == (n,)
    freq = [cat.tolist().count(k) / n for k in range(3)]
    assert max(abs(f - p) for f, p in zip(freq, [0.2, 0.3, 0.5])) < 0.02
    uni = gd.Uniform(-1.0, 3.0).sample((n,))
    assert -1 <= uni.min().item() and uni.max().item() < 3
    assert abs(uni.mean().item() - 1.0) < 0.05


def _message(exc_info) -> str:
    """The message up to where torch prints shapes as torch.Size (genesis: tuples)."""
    text = str(exc_info.value)
    for cut in (" of distribution ", " of the distribution ", "event_shape:"):
        text = text.split(cut)[0]
    return text


@pytest.mark.parametrize("name,params", [
    ("Normal", {"loc": _t([0.0, 1.0]), "scale": _t([1.0, -1.0])}),
    ("Normal", {"loc": _t([float("nan"), 1.0]), "scale": _t([1.0, 1.0])}),
    ("Bernoulli", {"probs": _t([0.5, 1.5])}),
    ("Categorical", {"probs": _t([0.5, -0.5, 1.0])}),
])
def test_invalid_parameters_raise_like_torch(name, params):
    with pytest.raises(ValueError) as theirs:
        getattr(td, name)(**params)
    with pytest.raises(ValueError) as ours:
        getattr(gd, name)(**{k: to_genesis(v) for k, v in params.items()})
    assert _message(ours) == _message(theirs)
    constraint = str(theirs.value).split("to satisfy the constraint ")[1].split(",")[0]
    assert f"to satisfy the constraint {constraint}" in str(ours.value)
    getattr(gd, name)(**{k: to_genesis(v) for k, v in params.items()}, validate_args=False)


@pytest.mark.parametrize("name,params,value", [
    ("Bernoulli", {"probs": _t([0.5, 0.5])}, _t([1.0, 2.0])),
    ("Categorical", {"logits": _t([0.0, 0.0, 0.0])}, torch.tensor(3)),
    ("Uniform", {"low": _t(0.0), "high": _t(1.0)}, _t(1.5)),
    ("Normal", {"loc": _t([0.0, 0.0]), "scale": _t([1.0, 1.0])}, _t([1.0, 2.0, 3.0])),
])
def test_values_outside_the_support_or_shape_raise_like_torch(name, params, value):
    with pytest.raises(ValueError) as theirs:
        getattr(td, name)(**params).log_prob(value)
    with pytest.raises(ValueError) as ours:
        getattr(gd, name)(**{k: to_genesis(v) for k, v in params.items()}).log_prob(
            to_genesis(value))
    assert _message(ours) == _message(theirs)


def test_constructor_errors():
    with pytest.raises(ValueError, match="Either `probs` or `logits` must be specified"):
        gd.Bernoulli()
    with pytest.raises(ValueError, match="but not both"):
        gd.Categorical(probs=genesis.ones(2), logits=genesis.ones(2))
    with pytest.raises(ValueError, match="at least one-dimensional"):
        gd.Categorical(probs=genesis.tensor(1.0))
    with pytest.raises(ValueError, match="Uniform is not defined when low>= high"):
        gd.Uniform(1.0, 1.0)
    with pytest.raises(ValueError, match="must be a Tensor"):
        gd.Normal(0.0, 1.0).log_prob(0.5)


@pytest.mark.parametrize("name,p,q", [
    ("Normal", {"loc": _t([0.0, 1.0]), "scale": _t([1.0, 0.5])},
     {"loc": _t([0.5, -1.0]), "scale": _t([2.0, 0.5])}),
    ("Bernoulli", {"probs": _t([0.3, 0.0, 1.0, 0.5])}, {"probs": _t([0.6, 0.2, 0.4, 0.0])}),
    ("Categorical", {"probs": _t([[0.2, 0.8, 0.0], [0.5, 0.25, 0.25]])},
     {"probs": _t([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])}),
    ("Uniform", {"low": _t([0.0, 0.0]), "high": _t([1.0, 2.0])},
     {"low": _t([-1.0, 0.5]), "high": _t([2.0, 3.0])}),
])
def test_kl_divergence_matches_torch(name, p, q):
    ours = gd.kl_divergence(getattr(gd, name)(**{k: to_genesis(v) for k, v in p.items()}),
                            getattr(gd, name)(**{k: to_genesis(v) for k, v in q.items()}))
    theirs = td.kl_divergence(getattr(td, name)(**p), getattr(td, name)(**q))
    assert_close(to_torch(ours), theirs)


def test_kl_divergence_of_an_unregistered_pair_and_register_kl():
    with pytest.raises(NotImplementedError, match="Normal.*Bernoulli"):
        gd.kl_divergence(gd.Normal(0.0, 1.0), gd.Bernoulli(0.5))

    class Shifted(gd.Normal):
        pass

    @gd.register_kl(Shifted, gd.Normal)
    def _kl_shifted(p, q):
        return genesis.zeros(p.batch_shape)

    assert gd.kl_divergence(Shifted(0.0, 1.0), gd.Normal(5.0, 1.0)).item() == 0.0
    assert gd.kl_divergence(gd.Normal(0.0, 1.0), Shifted(0.0, 1.0)).item() == 0.0
    with pytest.raises(TypeError, match="subclasses of Distribution"):
        gd.register_kl(int, gd.Normal)


def test_every_distribution_runs_on_the_device(device):
    """Sampling and scoring on ``device`` agree with the same distribution on the CPU."""
    genesis.manual_seed(0)
    made = {
        "Normal": lambda dev: gd.Normal(genesis.tensor([0.0, 1.0], device=dev),
                                        genesis.tensor([1.0, 2.0], device=dev)),
        "Uniform": lambda dev: gd.Uniform(genesis.tensor([0.0, 1.0], device=dev),
                                          genesis.tensor([1.0, 3.0], device=dev)),
        "Bernoulli": lambda dev: gd.Bernoulli(logits=genesis.tensor([0.3, -1.0], device=dev)),
        "Categorical": lambda dev: gd.Categorical(
            probs=genesis.tensor([[0.2, 0.8], [0.6, 0.4]], device=dev)),
    }
    for name, make in made.items():
        here, cpu = make(device), make("cpu")
        draws = here.sample((5,))
        assert draws.device == genesis.device(device) and draws.shape == (5, 2), name
        assert_close(to_torch(here.log_prob(draws)), to_torch(cpu.log_prob(draws.cpu())))
        assert_close(to_torch(here.entropy()), to_torch(cpu.entropy()))


@pytest.mark.parametrize("name,params", [
    ("Normal", {"loc": _t([0.0, 1.0]), "scale": _t([1.0, 2.0])}),
    ("Bernoulli", {"logits": _t([0.3, -1.0])}),
    ("Categorical", {"probs": _t([[0.2, 0.8], [0.5, 0.5]])}),
    ("Uniform", {"low": _t([0.0, 1.0]), "high": _t([1.0, 3.0])}),
])
def test_expand_matches_torch(name, params):
    ours, theirs, _, _ = _pair(name, params)
    ours, theirs = ours.expand((3, 2)), theirs.expand((3, 2))
    assert tuple(ours.batch_shape) == tuple(theirs.batch_shape) == (3, 2)
    values = theirs.sample()
    assert_close(to_torch(ours.log_prob(to_genesis(values))), theirs.log_prob(values))
    assert_close(to_torch(ours.entropy()), theirs.entropy())
    assert tuple(ours.sample((4,)).shape) == (4, 3, 2)


def test_reachable_as_attributes_of_genesis():
    import genesis.utils.checkpoint as ckpt

    assert genesis.distributions is gd and genesis.utils.checkpoint is ckpt
