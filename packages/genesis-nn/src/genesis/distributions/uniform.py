"""The continuous uniform distribution on ``[low, high)``."""

from __future__ import annotations

import genesis
from genesis.distributions import constraints
from genesis.distributions.distribution import Distribution
from genesis.distributions.utils import broadcast_all


class Uniform(Distribution):
    """A uniform distribution on ``[low, high)``, as ``torch.distributions.Uniform``.

    Densities and moments::

        log p(x) = -log(high - low)  for low <= x < high, else -inf
        entropy  = log(high - low)
        mean = (low + high) / 2,  variance = (high - low)**2 / 12
        rsample  = low + (high - low) * u,   u ~ U[0, 1)    (gradients reach low and high)

    Args:
        low: the lower bound, inclusive (tensor or number).
        high: the upper bound, exclusive (tensor or number); ``low < high`` is checked
            when validating.
        validate_args: check the parameters and ``log_prob`` values.

    Example:
        >>> d = genesis.distributions.Uniform(0.0, 2.0)
        >>> d.log_prob(genesis.tensor(1.0))    # log(1/2)
    """

    arg_constraints = {"low": constraints.dependent, "high": constraints.dependent}
    has_rsample = True

    def __init__(self, low, high, validate_args: bool | None = None) -> None:
        self.low, self.high = broadcast_all(low, high)
        super().__init__(self.low.shape, validate_args=validate_args)
        if self._validate_args and not bool((self.low < self.high).all()):
            raise ValueError("Uniform is not defined when low>= high")

    @property
    def support(self):
        return constraints.interval(self.low, self.high)

    @property
    def mean(self):
        return (self.high + self.low) / 2

    @property
    def mode(self):
        return self.high * float("nan")

    @property
    def stddev(self):
        return (self.high - self.low) / 12**0.5

    @property
    def variance(self):
        return (self.high - self.low).pow(2) / 12

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        u = genesis.rand(shape, dtype=self.low.dtype, device=self.low.device)
        return self.low + u * (self.high - self.low)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        inside = (self.low <= value).to(self.low.dtype) * (self.high > value).to(self.low.dtype)
        return inside.log() - (self.high - self.low).log()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return ((value - self.low) / (self.high - self.low)).clamp(min=0, max=1)

    def icdf(self, value):
        return value * (self.high - self.low) + self.low

    def entropy(self):
        return (self.high - self.low).log()

