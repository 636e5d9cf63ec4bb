"""The Bernoulli distribution: one coin flip per batch element."""

from __future__ import annotations

import functools

import genesis
import genesis.nn.functional as F
from genesis.distributions import constraints
from genesis.distributions.distribution import Distribution
from genesis.distributions.utils import broadcast_all, logits_to_probs, probs_to_logits


class Bernoulli(Distribution):
    """A Bernoulli distribution (1 with probability ``probs``), as
    ``torch.distributions.Bernoulli``; give ``probs`` or ``logits``, not both.

    Mass and moments (``l`` the logit, ``softplus(l) = log(1 + exp(l))``)::

        log p(x) = x * l - softplus(l)       (= -binary_cross_entropy_with_logits(l, x))
        entropy  = softplus(l) - p * l
        mean = p,  variance = p * (1 - p)

    Args:
        probs: the probability of a 1, in ``[0, 1]`` (tensor or number).
        logits: its log-odds ``log(p / (1 - p))`` (tensor or number).
        validate_args: check the parameters and ``log_prob`` values.

    Example:
        >>> d = genesis.distributions.Bernoulli(logits=genesis.tensor([0.0, 2.0]))
        >>> d.sample((5,)).shape
        genesis.Size([5, 2])
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        given = probs if probs is not None else logits
        (param,) = broadcast_all(given)
        if probs is not None:
            self.probs = param
        else:
            self.logits = param
        self._param = param
        batch_shape = () if isinstance(given, (int, float)) else param.shape
        super().__init__(batch_shape, validate_args=validate_args)

    @functools.cached_property
    def probs(self):
        """The probability of a 1 (from ``logits`` when those were given)."""
        return logits_to_probs(self.logits, is_binary=True)

    @functools.cached_property
    def logits(self):
        """The log-odds of a 1 (from ``probs`` when those were given)."""
        return probs_to_logits(self.probs, is_binary=True)

    @property
    def param_shape(self):
        return self._param.shape

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        mode = (self.probs >= 0.5).to(self.probs.dtype)
        return genesis.where(self.probs == 0.5, float("nan"), mode)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        with genesis.no_grad():
            return genesis.bernoulli(self.probs.expand(shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -F.binary_cross_entropy_with_logits(logits, value.to(logits.dtype),
                                                   reduction="none")

    def entropy(self):
        return F.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand: bool = True):
        """``[0, 1]`` along a new leading dim (expanded over the batch when ``expand``)."""
        values = genesis.arange(2, dtype=self._param.dtype, device=self._param.device)
        values = values.reshape((-1,) + (1,) * len(self.batch_shape))
        return values.expand((2,) + tuple(self.batch_shape)) if expand else values
