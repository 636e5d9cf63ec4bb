"""Constraints: the sets a distribution's parameters and samples must lie in.

Each constraint answers ``check(value)`` with a bool tensor (per element, or per event for
the simplex) and names itself in ``repr`` the way torch's do, so validation errors read
the same: ``Real()``, ``GreaterThan(lower_bound=0.0)``, ``Interval(lower_bound=0.0,
upper_bound=1.0)``, ``Simplex()``, ``IntegerInterval(lower_bound=0, upper_bound=3)``.
"""

from __future__ import annotations

__all__ = ["Constraint", "boolean", "dependent", "greater_than", "half_open_interval",
           "integer_interval", "interval", "is_dependent", "positive", "real", "simplex",
           "unit_interval"]


class Constraint:
    """A region of values. ``is_discrete`` for integer supports; ``event_dim``: how many
    rightmost dims form one event (checked together)."""

    is_discrete = False
    event_dim = 0

    def check(self, value):
        """A bool tensor: where ``value`` satisfies the constraint."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__.lstrip('_')}()"


class _Dependent(Constraint):
    """A placeholder for a support that depends on other parameters (never checked)."""

    def check(self, value):
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint) -> bool:
    """Whether ``constraint`` is the ``dependent`` placeholder."""
    return isinstance(constraint, _Dependent)


class _Real(Constraint):
    def check(self, value):
        return value == value  # False only at nan


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value):
        return (value == 0) | (value == 1)


class _GreaterThan(Constraint):
    def __init__(self, lower_bound) -> None:
        self.lower_bound = lower_bound

    def check(self, value):
        return self.lower_bound < value

    def __repr__(self) -> str:
        return f"GreaterThan(lower_bound={self.lower_bound})"


class _Interval(Constraint):
    def __init__(self, lower_bound, upper_bound) -> None:
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        return (self.lower_bound <= value) & (value <= self.upper_bound)

    def __repr__(self) -> str:
        return f"Interval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _HalfOpenInterval(_Interval):
    def check(self, value):
        return (self.lower_bound <= value) & (value < self.upper_bound)

    def __repr__(self) -> str:
        return f"HalfOpenInterval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _IntegerInterval(_Interval):
    is_discrete = True

    def check(self, value):
        return (value % 1 == 0) & super().check(value)

    def __repr__(self) -> str:
        return f"IntegerInterval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _Simplex(Constraint):
    """Non-negative vectors summing to 1 (along the last dim)."""

    event_dim = 1

    def check(self, value):
        return (value >= 0).all(dim=-1) & ((value.sum(-1) - 1).abs() < 1e-6)


dependent = _Dependent()
real = _Real()
boolean = _Boolean()
positive = _GreaterThan(0.0)
unit_interval = _Interval(0.0, 1.0)
simplex = _Simplex()
greater_than = _GreaterThan
interval = _Interval
half_open_interval = _HalfOpenInterval
integer_interval = _IntegerInterval
