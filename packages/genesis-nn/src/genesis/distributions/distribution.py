"""``Distribution``: the base class (shapes, argument and sample validation, derived moments)."""

from __future__ import annotations

import functools
from typing import Any

import genesis
from genesis.distributions import constraints

_default_validate_args = True  # torch's default (its __debug__, on unless python -O)


class Distribution:
    """Base class of probability distributions, as ``torch.distributions.Distribution``.

    A distribution has a ``batch_shape`` (independent distributions side by side) and an
    ``event_shape`` (the shape of one draw); ``sample(sample_shape)`` returns
    ``sample_shape + batch_shape + event_shape``. With ``validate_args`` (on by default, as
    torch's), parameters outside ``arg_constraints`` and ``log_prob`` values outside the
    ``support`` raise ``ValueError`` naming the parameter, its shape and the constraint.

    Args:
        batch_shape: the shape of the batch of distributions.
        event_shape: the shape of one draw.
        validate_args: check parameters and values (the global default when None).

    Subclasses set ``arg_constraints`` and ``support`` and implement ``rsample`` (when
    reparameterisable: ``has_rsample``), ``sample``, ``log_prob``, ``entropy``, ``mean``,
    ``variance``.
    """

    arg_constraints: dict[str, constraints.Constraint] = {}
    support: constraints.Constraint | None = None
    has_rsample = False
    has_enumerate_support = False

    def __init__(self, batch_shape=(), event_shape=(), validate_args: bool | None = None):
        self._batch_shape = genesis.Size(tuple(batch_shape))
        self._event_shape = genesis.Size(tuple(event_shape))
        self._validate_args = _default_validate_args if validate_args is None \
            else bool(validate_args)
        if self._validate_args:
            for name, constraint in self.arg_constraints.items():
                if constraints.is_dependent(constraint) or name not in vars(self) and \
                        isinstance(getattr(type(self), name, None), functools.cached_property):
                    continue  # (the parameterisation not given: probs or logits)
                value = getattr(self, name)
                if not bool(constraint.check(value).all()):
                    raise ValueError(
                        f"Expected parameter {name} ({type(value).__name__} of shape "
                        f"{tuple(value.shape)}) of distribution {self!r} to satisfy the "
                        f"constraint {constraint!r}, but found invalid values:\n{value}")

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Turn validation on or off for distributions made afterwards without
        ``validate_args``.

        Args:
            value: the new default.
        """
        global _default_validate_args
        if value not in (True, False):
            raise ValueError(f"set_default_validate_args expects a bool, got {value!r}")
        _default_validate_args = value

    # ------------------------------------------------------------ shapes
    @property
    def batch_shape(self):
        """The shape over which parameters are batched."""
        return self._batch_shape

    @property
    def event_shape(self):
        """The shape of a single sample (without batching)."""
        return self._event_shape

    def _extended_shape(self, sample_shape=()) -> tuple:
        return tuple(sample_shape) + tuple(self._batch_shape) + tuple(self._event_shape)

    def expand(self, batch_shape, _instance=None):
        """The same distribution with its parameters broadcast to ``batch_shape`` (views).

        Args:
            batch_shape: the new batch shape (the old one must broadcast to it).

        Returns:
            A new distribution of the same type.
        """
        batch_shape = tuple(batch_shape)
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        for name, value in self.__dict__.items():
            if isinstance(value, genesis.Tensor) and (name in self.arg_constraints
                                                      or name == "_param"):
                event = tuple(value.shape[len(self._batch_shape):])
                new.__dict__[name] = value.expand(batch_shape + event)
        new._batch_shape = genesis.Size(batch_shape)
        return new

    # ----------------------------------------------------------- moments
    @property
    def mean(self):
        """The mean of the distribution."""
        raise NotImplementedError(f"{type(self).__name__} does not implement mean")

    @property
    def mode(self):
        """The mode of the distribution."""
        raise NotImplementedError(f"{type(self).__name__} does not implement mode")

    @property
    def variance(self):
        """The variance of the distribution."""
        raise NotImplementedError(f"{type(self).__name__} does not implement variance")

    @property
    def stddev(self):
        """The standard deviation (the square root of ``variance``)."""
        return self.variance.sqrt()

    # ---------------------------------------------------------- sampling
    def sample(self, sample_shape=()):
        """Draw ``sample_shape`` samples, without gradients.

        Args:
            sample_shape: the leading shape of the result.

        Returns:
            A tensor of shape ``sample_shape + batch_shape + event_shape``.
        """
        with genesis.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        """Draw ``sample_shape`` reparameterised samples (gradients flow to the parameters)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement rsample")

    def sample_n(self, n: int):
        """``sample((n,))``."""
        return self.sample((n,))

    def log_prob(self, value):
        """The log of the density (or mass) at ``value``."""
        raise NotImplementedError

    def entropy(self):
        """The entropy, per batch element."""
        raise NotImplementedError

    def perplexity(self):
        """``exp(entropy)``."""
        return self.entropy().exp()

    def cdf(self, value):
        """The cumulative distribution function at ``value``."""
        raise NotImplementedError

    def icdf(self, value):
        """The inverse cumulative distribution function at ``value``."""
        raise NotImplementedError

    def enumerate_support(self, expand: bool = True):
        """Every value of a discrete support, along a new leading dim."""
        raise NotImplementedError

    # -------------------------------------------------------- validation
    def _validate_sample(self, value) -> None:
        """torch's checks of a ``log_prob`` argument: a tensor, broadcastable with
        ``batch_shape + event_shape``, inside the support."""
        if not isinstance(value, genesis.Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")
        event_dims = len(self._event_shape)
        if tuple(value.shape[value.ndim - event_dims:]) != tuple(self._event_shape):
            raise ValueError(f"The right-most size of value must match event_shape: "
                             f"{tuple(value.shape)} vs {tuple(self._event_shape)}.")
        actual, expected = tuple(value.shape), self._extended_shape()
        for i, j in zip(reversed(actual), reversed(expected)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(f"Value is not broadcastable with batch_shape+event_shape: "
                                 f"{actual} vs {expected}.")
        support = self.support
        if support is None or constraints.is_dependent(support):
            return
        if not bool(support.check(value).all()):
            raise ValueError(
                f"Expected value argument ({type(value).__name__} of shape "
                f"{tuple(value.shape)}) to be within the support ({support!r}) of the "
                f"distribution {self!r}, but found invalid values:\n{value}")

    def __repr__(self) -> str:
        names = [k for k in self.arg_constraints if k in vars(self)]
        parts = []
        for name in names:
            value: Any = vars(self)[name]
            parts.append(f"{name}: {value if value.numel() == 1 else tuple(value.shape)}")
        return f"{type(self).__name__}({', '.join(parts)})"

