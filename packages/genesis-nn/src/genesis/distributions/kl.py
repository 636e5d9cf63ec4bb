"""``kl_divergence(p, q)``: closed forms registered per pair of distribution types."""

from __future__ import annotations

from collections.abc import Callable

import genesis
import genesis.nn.functional as F
from genesis.distributions.bernoulli import Bernoulli
from genesis.distributions.categorical import Categorical
from genesis.distributions.distribution import Distribution
from genesis.distributions.normal import Normal
from genesis.distributions.uniform import Uniform

_KL_REGISTRY: dict[tuple[type, type], Callable] = {}


def register_kl(type_p: type, type_q: type) -> Callable:
    """Decorator: register ``fn(p, q)`` as ``KL(p || q)`` for ``p`` of ``type_p`` and ``q``
    of ``type_q`` (subclasses match too; the most specific registration wins).

    Args:
        type_p, type_q: subclasses of ``Distribution``.

    Returns:
        The decorator.

    Example:
        >>> @register_kl(MyDist, MyDist)
        ... def _kl_my(p, q):
        ...     return ...
    """
    if not (isinstance(type_p, type) and issubclass(type_p, Distribution)
            and isinstance(type_q, type) and issubclass(type_q, Distribution)):
        raise TypeError(f"Expected type_p and type_q to be subclasses of Distribution, got "
                        f"{type_p} and {type_q}")

    def decorator(fn: Callable) -> Callable:
        _KL_REGISTRY[type_p, type_q] = fn
        return fn

    return decorator


def kl_divergence(p: Distribution, q: Distribution):
    """The Kullback-Leibler divergence ``KL(p || q) = E_p[log p(x) - log q(x)]``, per batch
    element.

    Args:
        p, q: distributions with matching batch shapes.

    Returns:
        A tensor of the batch shape.

    Raises:
        NotImplementedError: no closed form is registered for the pair of types.

    Example:
        >>> kl_divergence(Normal(0.0, 1.0), Normal(1.0, 2.0))
    """
    matches = [(tp, tq) for tp, tq in _KL_REGISTRY
               if isinstance(p, tp) and isinstance(q, tq)]
    if not matches:
        raise NotImplementedError(f"No KL(p || q) is implemented for p of type "
                                  f"{type(p).__name__} and q of type {type(q).__name__}")
    best = min(matches, key=lambda pair: (type(p).__mro__.index(pair[0]),
                                          type(q).__mro__.index(pair[1])))
    return _KL_REGISTRY[best](p, q)


@register_kl(Normal, Normal)
def _kl_normal_normal(p: Normal, q: Normal):
    var_ratio = (p.scale / q.scale).pow(2)
    t1 = ((p.loc - q.loc) / q.scale).pow(2)
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p: Bernoulli, q: Bernoulli):
    inf = float("inf")
    # p log(p / q) and (1 - p) log((1 - p) / (1 - q)) through logits (stable); a term is
    # infinite where q rules out what p allows, and 0 where p itself gives it no mass
    t1 = p.probs * (F.softplus(-q.logits) - F.softplus(-p.logits))
    t1 = genesis.where(q.probs == 0, inf, t1)
    t1 = genesis.where(p.probs == 0, 0.0, t1)
    t2 = (1 - p.probs) * (F.softplus(q.logits) - F.softplus(p.logits))
    t2 = genesis.where(q.probs == 1, inf, t2)
    t2 = genesis.where(p.probs == 1, 0.0, t2)
    return t1 + t2


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p: Categorical, q: Categorical):
    t = p.probs * (p.logits - q.logits)
    t = genesis.where((q.probs == 0).expand_as(t), float("inf"), t)
    t = genesis.where((p.probs == 0).expand_as(t), 0.0, t)
    return t.sum(-1)


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p: Uniform, q: Uniform):
    result = ((q.high - q.low) / (p.high - p.low)).log()
    outside = (q.low > p.low) | (q.high < p.high)
    return genesis.where(outside, float("inf"), result)
