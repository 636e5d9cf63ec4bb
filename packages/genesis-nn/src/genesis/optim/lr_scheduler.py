"""``genesis.optim.lr_scheduler``: learning-rate schedules, step for step equal to PyTorch's.

Each scheduler rewrites ``group["lr"]`` of its optimizer's parameter groups when
``step()`` is called (once per epoch or per batch, after ``optimizer.step()``). The
"chainable" schedulers compute the new rate from the current one exactly as torch does
(same formulas, same floating-point order), so the sequences match torch's to the last bit.
The base class is in ``lr_scheduler_base.py``; the one-cycle, warm-restart, chained and
plateau schedulers are in ``lr_scheduler_cyclic.py``; all are re-exported here.
"""

from __future__ import annotations

import math
import types
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from genesis.optim.lr_scheduler_base import LRScheduler
from genesis.optim.lr_scheduler_cyclic import (
    ChainedScheduler,
    CosineAnnealingWarmRestarts,
    OneCycleLR,
    ReduceLROnPlateau,
    _check_schedulers,
    _per_group,
)
from genesis.optim.optimizer import Optimizer


def _lr_lambdas(optimizer: Optimizer, lr_lambda) -> list:
    """One function per parameter group (``_per_group`` with torch's message for a list
    of the wrong length)."""
    if isinstance(lr_lambda, (list, tuple)) and len(lr_lambda) != len(optimizer.param_groups):
        raise ValueError(f"Expected {len(optimizer.param_groups)} lr_lambdas, "
                         f"but got {len(lr_lambda)}")
    return _per_group("lr_lambda", optimizer, lr_lambda)


class LambdaLR(LRScheduler):
    """Set each group's rate to ``initial_lr * lr_lambda(epoch)``.

    Args:
        optimizer: the optimizer.
        lr_lambda: a function of the epoch (an int), or one function per group.
        last_epoch: index of the last epoch (``-1`` starts the schedule).

    Example::

        >>> sched = LambdaLR(opt, lambda epoch: 0.95**epoch)
    """

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float]
                 | list[Callable[[int], float]], last_epoch: int = -1) -> None:
        self.optimizer = optimizer
        self.lr_lambdas = _lr_lambdas(optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def state_dict(self) -> dict[str, Any]:
        """State without the lambdas; callable objects contribute their ``__dict__``."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
        state["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else
                               fn.__dict__.copy() for fn in self.lr_lambdas]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        lambdas = state.pop("lr_lambdas")
        self.__dict__.update(state)
        for fn, saved in zip(self.lr_lambdas, lambdas):
            if saved is not None:
                fn.__dict__.update(saved)

    def get_lr(self) -> list[float]:
        return [base_lr * fn(self.last_epoch)
                for fn, base_lr in zip(self.lr_lambdas, self.base_lrs, strict=True)]


class StepLR(LRScheduler):
    """Multiply the rate by ``gamma`` every ``step_size`` epochs.

    Args:
        optimizer: the optimizer.
        step_size: period of the decay, in epochs.
        gamma: multiplicative factor.
        last_epoch: index of the last epoch.

    Example::

        >>> sched = StepLR(opt, step_size=30, gamma=0.1)  # lr 0.05 -> 0.005 at epoch 30
    """

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._current_lrs()
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * self.gamma ** (self.last_epoch // self.step_size)
                for base_lr in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the rate by ``gamma`` at each milestone epoch.

    Args:
        optimizer: the optimizer.
        milestones: epochs at which to decay (a repeated milestone decays repeatedly).
        gamma: multiplicative factor.
        last_epoch: index of the last epoch.

    Example::

        >>> sched = MultiStepLR(opt, milestones=[30, 80], gamma=0.1)
    """

    def __init__(self, optimizer: Optimizer, milestones: Iterable[int], gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.milestones = Counter(milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["milestones"] = dict(self.milestones)  # a plain dict saves without pickle
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.milestones = Counter(self.milestones)

    def get_lr(self) -> list[float]:
        if self.last_epoch not in self.milestones:
            return self._current_lrs()
        factor = self.gamma ** self.milestones[self.last_epoch]
        return [group["lr"] * factor for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        milestones = sorted(self.milestones.elements())
        return [base_lr * self.gamma ** bisect_right(milestones, self.last_epoch)
                for base_lr in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply the rate by ``gamma`` every epoch.

    Args:
        optimizer: the optimizer.
        gamma: multiplicative factor.
        last_epoch: index of the last epoch.

    Example::

        >>> sched = ExponentialLR(opt, gamma=0.9)
    """

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self._is_initial:
            return self._current_lrs()
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * self.gamma**self.last_epoch for base_lr in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale the rate by a factor moving linearly from ``start_factor`` to ``end_factor``.

    Args:
        optimizer: the optimizer.
        start_factor: factor at epoch 0 (in ``(0, 1]``).
        end_factor: factor from epoch ``total_iters`` on (in ``[0, 1]``).
        total_iters: number of epochs of the ramp.
        last_epoch: index of the last epoch.

    Example::

        >>> sched = LinearLR(opt, start_factor=0.1, total_iters=100)  # linear warm-up
    """

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3,
                 end_factor: float = 1.0, total_iters: int = 5, last_epoch: int = -1) -> None:
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError("Starting multiplicative factor expected to be greater than 0 "
                             "and less or equal to 1.")
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError("Ending multiplicative factor expected to be between 0 and 1.")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0:
            return [group["lr"] * self.start_factor for group in self.optimizer.param_groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._current_lrs()
        delta = self.end_factor - self.start_factor
        factor = 1.0 + delta / (self.total_iters * self.start_factor
                                + (self.last_epoch - 1) * delta)
        return [group["lr"] * factor for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * (self.start_factor + (self.end_factor - self.start_factor)
                           * min(self.total_iters, self.last_epoch) / self.total_iters)
                for base_lr in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Anneal the rate from its initial value to ``eta_min`` along a half cosine.

    ``lr_t = eta_min + (base_lr - eta_min) * (1 + cos(pi * t / T_max)) / 2``, computed
    with torch's recursive (chainable) formula so the sequence matches torch's exactly;
    past ``T_max`` the rate goes back up (the cosine continues).

    Args:
        optimizer: the optimizer.
        T_max: number of epochs of the half period.
        eta_min: minimum learning rate.
        last_epoch: index of the last epoch.

    Example::

        >>> sched = CosineAnnealingLR(opt, T_max=100, eta_min=1e-5)
    """

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,  # noqa: N803
                 last_epoch: int = -1) -> None:
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        t, t_max, eta_min = self.last_epoch, self.T_max, self.eta_min
        groups = self.optimizer.param_groups
        if self._is_initial:
            return self._current_lrs()
        if self._step_count == 1 and t > 0:
            return [eta_min + (base_lr - eta_min) * (1 + math.cos(t * math.pi / t_max)) / 2
                    for base_lr in self.base_lrs]
        if (t - 1 - t_max) % (2 * t_max) == 0:
            return [group["lr"] + (base_lr - eta_min) * (1 - math.cos(math.pi / t_max)) / 2
                    for base_lr, group in zip(self.base_lrs, groups, strict=True)]
        return [(1 + math.cos(math.pi * t / t_max)) / (1 + math.cos(math.pi * (t - 1) / t_max))
                * (group["lr"] - eta_min) + eta_min for group in groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [self.eta_min + (base_lr - self.eta_min)
                * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base_lr in self.base_lrs]


class MultiplicativeLR(LRScheduler):
    """Multiply each group's rate by ``lr_lambda(epoch)`` every epoch (after the first).

    Args:
        optimizer: the optimizer.
        lr_lambda: a function of the epoch giving the factor, or one function per group.
        last_epoch: index of the last epoch.

    Example::

        >>> sched = MultiplicativeLR(opt, lambda epoch: 0.95)
    """

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float]
                 | list[Callable[[int], float]], last_epoch: int = -1) -> None:
        self.optimizer = optimizer
        self.lr_lambdas = _lr_lambdas(optimizer, lr_lambda)
        for fn in self.lr_lambdas:
            if not callable(fn):
                raise TypeError(f"lr_lambda should be a function, but got {type(fn).__name__}")
        super().__init__(optimizer, last_epoch)

    state_dict = LambdaLR.state_dict
    load_state_dict = LambdaLR.load_state_dict

    def get_lr(self) -> list[float]:
        if self._is_initial:
            return self._current_lrs()
        return [group["lr"] * fn(self.last_epoch)
                for fn, group in zip(self.lr_lambdas, self.optimizer.param_groups, strict=True)]


class ConstantLR(LRScheduler):
    """Scale the rate by ``factor`` for the first ``total_iters`` epochs, then restore it.

    Args:
        optimizer: the optimizer.
        factor: the scale (in ``[0, 1]``).
        total_iters: number of epochs at the reduced rate.
        last_epoch: index of the last epoch.

    Example::

        >>> sched = ConstantLR(opt, factor=0.5, total_iters=4)
    """

    def __init__(self, optimizer: Optimizer, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1) -> None:
        if factor > 1.0 or factor < 0:
            raise ValueError("Constant multiplicative factor expected to be between 0 and 1.")
        self.factor = factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0:
            return [group["lr"] * self.factor for group in self.optimizer.param_groups]
        if self.last_epoch != self.total_iters:
            return self._current_lrs()
        return [group["lr"] * (1.0 / self.factor) for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * (self.factor + (self.last_epoch >= self.total_iters)
                           * (1 - self.factor)) for base_lr in self.base_lrs]


class PolynomialLR(LRScheduler):
    """Decay the rate as ``(1 - epoch / total_iters) ** power`` down to 0 at ``total_iters``.

    Args:
        optimizer: the optimizer.
        total_iters: number of epochs of the decay.
        power: exponent of the polynomial.
        last_epoch: index of the last epoch.

    Example::

        >>> sched = PolynomialLR(opt, total_iters=100, power=2.0)
    """

    def __init__(self, optimizer: Optimizer, total_iters: int = 5, power: float = 1.0,
                 last_epoch: int = -1) -> None:
        self.total_iters = total_iters
        self.power = power
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._current_lrs()
        factor = ((1.0 - self.last_epoch / self.total_iters)
                  / (1.0 - (self.last_epoch - 1) / self.total_iters)) ** self.power
        return [group["lr"] * factor for group in self.optimizer.param_groups]

    def _get_closed_form_lr(self) -> list[float]:
        return [base_lr * (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters)
                ** self.power for base_lr in self.base_lrs]


class SequentialLR(LRScheduler):
    """Run schedulers one after another, switching at the milestone epochs.

    Args:
        optimizer: the optimizer (shared by every scheduler).
        schedulers: the schedulers, in order.
        milestones: epochs where the next scheduler takes over (one fewer than schedulers).
        last_epoch: index of the last epoch.

    Example::

        >>> warm = LinearLR(opt, start_factor=0.01, total_iters=5)
        >>> cos = CosineAnnealingLR(opt, T_max=95)
        >>> sched = SequentialLR(opt, [warm, cos], milestones=[5])
    """

    def __init__(self, optimizer: Optimizer, schedulers: list[LRScheduler],
                 milestones: list[int], last_epoch: int = -1) -> None:
        if len(schedulers) < 1:
            raise ValueError(f"{type(self).__name__} expects at least one scheduler")
        _check_schedulers(type(self).__name__, schedulers, optimizer)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                "Sequential Schedulers expects number of schedulers provided to be one more "
                f"than the number of milestone points, but got number of schedulers "
                f"{len(schedulers)} and the number of milestones to be equal to "
                f"{len(milestones)}")
        self._schedulers = schedulers
        self._milestones = milestones
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        # Every scheduler already took its initial step; undo them and restart the first.
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        self._recursive_undo()
        idx = bisect_right(self._milestones, 0)
        self._schedulers[idx]._initial_step()
        self._last_lr = schedulers[idx].get_last_lr()

    def _recursive_undo(self, sched=None) -> None:
        sched = self if sched is None else sched
        if hasattr(sched, "_schedulers"):
            for s in sched._schedulers:
                self._recursive_undo(s)
        elif hasattr(sched, "last_epoch"):
            sched.last_epoch -= 1

    def step(self) -> None:  # type: ignore[override]
        """Advance by one epoch, handing over to the next scheduler at a milestone."""
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        sched = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            sched._update_lr(0)
        else:
            sched.step()
        self._last_lr = sched.get_last_lr()

    state_dict = ChainedScheduler.state_dict
    load_state_dict = ChainedScheduler.load_state_dict


def get_cosine_schedule_with_warmup(optimizer: Optimizer, warmup_steps: int, total_steps: int,
                                    min_lr_ratio: float = 0.0,
                                    last_epoch: int = -1) -> LambdaLR:
    """Linear warm-up from 0 to the base rate, then a cosine decay to ``min_lr_ratio * base``.

    The factor at step ``s`` is ``s / warmup_steps`` during warm-up, then
    ``min_lr_ratio + (1 - min_lr_ratio) * (1 + cos(pi * progress)) / 2`` with
    ``progress = (s - warmup_steps) / (total_steps - warmup_steps)`` clipped to ``[0, 1]``.
    Step it once per optimizer step.

    Args:
        optimizer: the optimizer.
        warmup_steps: number of warm-up steps (0 for none).
        total_steps: total number of steps (warm-up included).
        min_lr_ratio: final rate as a fraction of the base rate.
        last_epoch: index of the last step (to resume).

    Returns:
        A :class:`LambdaLR`.

    Example::

        >>> sched = get_cosine_schedule_with_warmup(opt, warmup_steps=100, total_steps=10_000)
    """
    if warmup_steps < 0 or total_steps <= 0 or warmup_steps > total_steps:
        raise ValueError(f"need 0 <= warmup_steps <= total_steps and total_steps > 0, got "
                         f"warmup_steps={warmup_steps}, total_steps={total_steps}")
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio}")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / warmup_steps
        decay_steps = max(1, total_steps - warmup_steps)
        progress = min(1.0, (step - warmup_steps) / decay_steps)
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor, last_epoch)

__all__ = [
    "LRScheduler", "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR",
    "ExponentialLR", "LinearLR", "PolynomialLR", "CosineAnnealingLR", "SequentialLR",
    "ChainedScheduler", "OneCycleLR", "CosineAnnealingWarmRestarts", "ReduceLROnPlateau",
    "get_cosine_schedule_with_warmup",
]
