"""The normal (Gaussian) distribution."""

from __future__ import annotations

import math

import genesis
from genesis.distributions import constraints
from genesis.distributions.distribution import Distribution
from genesis.distributions.utils import broadcast_all

_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


class Normal(Distribution):
    """A normal distribution ``N(loc, scale**2)``, as ``torch.distributions.Normal``.

    Densities and moments::

        log p(x) = -(x - loc)**2 / (2 scale**2) - log(scale) - log(sqrt(2 pi))
        entropy  = 1/2 + log(sqrt(2 pi)) + log(scale)
        rsample  = loc + scale * eps,   eps ~ N(0, 1)     (gradients reach loc and scale)

    Args:
        loc: the mean (tensor or number).
        scale: the standard deviation, positive (tensor or number).
        validate_args: check the parameters and ``log_prob`` values.

    Example:
        >>> d = genesis.distributions.Normal(genesis.zeros(3), genesis.ones(3))
        >>> d.rsample((2,)).shape
        genesis.Size([2, 3])
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(self.loc.shape, validate_args=validate_args)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.scale.pow(2)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = genesis.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        var = self.scale**2
        return -((value - self.loc) ** 2) / (2 * var) - self.scale.log() - _LOG_SQRT_2PI

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 * (1 + ((value - self.loc) * self.scale.reciprocal()
                           / math.sqrt(2)).erf())

    def icdf(self, value):
        return self.loc + self.scale * (2 * value - 1).erfinv() * math.sqrt(2)

    def entropy(self):
        return 0.5 + _LOG_SQRT_2PI + self.scale.log()
