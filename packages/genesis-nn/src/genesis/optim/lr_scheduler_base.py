"""The ``LRScheduler`` base class (see ``genesis.optim.lr_scheduler`` for the schedules)."""

from __future__ import annotations

import warnings
from typing import Any

from genesis.optim.optimizer import Optimizer


class LRScheduler:
    """Base class of the learning-rate schedulers.

    Subclasses implement ``get_lr()``: the new rate of every group, computed when
    ``step()`` has just advanced ``last_epoch`` (``get_lr`` may read the current
    ``group["lr"]`` for chainable schedules, or ``base_lrs`` for closed forms).

    Args:
        optimizer: the optimizer whose learning rates are scheduled.
        last_epoch: index of the last epoch; ``-1`` starts a new schedule (and records
            ``initial_lr`` in each group), other values resume one.

    Example::

        >>> sched = genesis.optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
        >>> for epoch in range(100):
        ...     train_one_epoch(); sched.step()
    """

    _get_lr_called_within_step: bool = False
    _is_initial: bool = False

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"param 'initial_lr' is not specified in param_groups[{i}] when "
                        "resuming a scheduler with last_epoch >= 0 (load the optimizer's "
                        "state first, or start a new schedule with last_epoch=-1)"
                    )
        self.base_lrs: list[float] = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        """Reset the step count and take the initial step (epoch 0)."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list[float]:
        """The learning rate of every group for the current ``last_epoch``."""
        raise NotImplementedError

    def get_last_lr(self) -> list[float]:
        """The learning rates set by the last ``step()`` (one per parameter group)."""
        return self._last_lr

    def step(self, epoch: int | None = None) -> None:
        """Advance the schedule by one epoch and write the new rates into the optimizer.

        Args:
            epoch: deprecated in torch; when given, jump to that epoch using the closed
                form where the scheduler has one.
        """
        self._step_count += 1
        if epoch is not None:
            warnings.warn("passing an epoch to scheduler.step() is deprecated; call step() "
                          "once per epoch instead", UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        self._get_lr_called_within_step = True
        try:
            if epoch is None:
                self.last_epoch += 1
                values = self.get_lr()
            else:
                self.last_epoch = epoch
                closed_form = getattr(self, "_get_closed_form_lr", None)
                values = closed_form() if closed_form is not None else self.get_lr()
        finally:
            self._get_lr_called_within_step = False
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state: every attribute except the optimizer."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state returned by ``state_dict()``."""
        self.__dict__.update(state_dict)

    def _current_lrs(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]
