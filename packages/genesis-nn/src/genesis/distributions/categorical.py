"""The categorical distribution: one of ``K`` categories per batch element."""

from __future__ import annotations

import functools
import math

import genesis
from genesis.distributions import constraints
from genesis.distributions.distribution import Distribution
from genesis.distributions.utils import clamp_to_lowest, logits_to_probs, probs_to_logits


class Categorical(Distribution):
    """A categorical distribution over ``0 .. K-1``, as ``torch.distributions.Categorical``;
    give ``probs`` (non-negative weights, normalised along the last dim) or ``logits``
    (unnormalised log-weights), not both.

    Mass and moments (``p_k`` the normalised probabilities)::

        log p(k) = logits[k] - logsumexp(logits)
        entropy  = -sum_k p_k log p_k

    Samples are drawn with ``genesis.multinomial``: reproducible under
    ``genesis.manual_seed``, but not the indices torch draws from the same seed.

    Args:
        probs: ``(..., K)`` event weights.
        logits: ``(..., K)`` event log-weights.
        validate_args: check the parameters and ``log_prob`` values.

    Example:
        >>> d = genesis.distributions.Categorical(logits=genesis.randn(4, 10))
        >>> d.sample().shape, d.log_prob(genesis.tensor([1, 2, 3, 4])).shape
        (genesis.Size([4]), genesis.Size([4]))
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            if probs.ndim < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
            param = self.probs
        else:
            if logits.ndim < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(dim=-1, keepdim=True)
            param = self.logits
        self._param = param
        self._num_events = param.shape[-1]
        super().__init__(param.shape[:-1], validate_args=validate_args)

    @functools.cached_property
    def probs(self):
        """The normalised probabilities (from ``logits`` when those were given)."""
        return logits_to_probs(self.logits)

    @functools.cached_property
    def logits(self):
        """The normalised log-probabilities (from ``probs`` when those were given)."""
        return probs_to_logits(self.probs)

    @property
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @property
    def param_shape(self):
        return self._param.shape

    @property
    def mean(self):
        return genesis.full(self._extended_shape(), float("nan"), dtype=self._param.dtype,
                            device=self._param.device)

    @property
    def mode(self):
        return self.probs.argmax(dim=-1)

    @property
    def variance(self):
        return self.mean

    def sample(self, sample_shape=()):
        sample_shape = tuple(sample_shape)
        probs_2d = self.probs.reshape(-1, self._num_events)  # (B, K)
        draws = genesis.multinomial(probs_2d, math.prod(sample_shape), True)  # (B, S)
        return draws.t().reshape(self._extended_shape(sample_shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = value.long().unsqueeze(-1)
        value, log_pmf = genesis.broadcast_tensors(value, self.logits)
        return log_pmf.gather(-1, value[..., :1]).squeeze(-1)

    def entropy(self):
        p_log_p = clamp_to_lowest(self.logits) * self.probs
        return -p_log_p.sum(-1)

    def enumerate_support(self, expand: bool = True):
        """``0 .. K-1`` along a new leading dim (expanded over the batch when ``expand``)."""
        values = genesis.arange(self._num_events, dtype=genesis.int64,
                                device=self._param.device)
        values = values.reshape((-1,) + (1,) * len(self.batch_shape))
        return values.expand((self._num_events,) + tuple(self.batch_shape)) if expand \
            else values
