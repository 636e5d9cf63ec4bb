"""Adagrad: per-coordinate learning rates from the sum of squared gradients."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import genesis
from genesis.optim.optimizer import Optimizer


class Adagrad(Optimizer):
    """Adagrad (Duchi et al.), as ``torch.optim.Adagrad``.

    For each parameter, at step ``t`` with gradient ``g`` (negated when ``maximize``)::

        g = g + weight_decay * p
        clr = lr / (1 + (t - 1) * lr_decay)
        s = s + g * g
        p = p - clr * g / (sqrt(s) + eps)

    State is created for every parameter at construction (``s`` starts at
    ``initial_accumulator_value``), as torch does.

    Args:
        params: parameters (or parameter groups) to optimize.
        lr: learning rate.
        lr_decay: learning-rate decay per step.
        weight_decay: L2 penalty added to the gradient.
        initial_accumulator_value: starting value of the squared-gradient sum.
        eps: term added to the denominator for numerical stability.
        maximize: ascend the objective instead of descending it.
        foreach: accepted for PyTorch compatibility.
        fused: like ``foreach``.

    Example::

        >>> opt = genesis.optim.Adagrad(model.parameters(), lr=0.1, lr_decay=1e-4)
    """

    def __init__(self, params: Iterable, lr: float = 1e-2, lr_decay: float = 0.0,
                 weight_decay: float = 0.0, initial_accumulator_value: float = 0.0,
                 eps: float = 1e-10, foreach: bool | None = None, *, maximize: bool = False,
                 fused: bool | None = None) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if lr_decay < 0.0:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if initial_accumulator_value < 0.0:
            raise ValueError(f"Invalid initial_accumulator_value value: "
                             f"{initial_accumulator_value}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        defaults = {"lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": weight_decay,
                    "initial_accumulator_value": initial_accumulator_value,
                    "maximize": maximize}
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for p in group["params"]:
            self.init_state(p, self.state[p], group)

    def init_state(self, param, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["step"] = 0
        state["sum"] = genesis.full_like(param, group["initial_accumulator_value"])

    def update(self, param, grad, state: dict[str, Any], group: dict[str, Any]) -> None:
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        if group["weight_decay"] != 0:
            grad = grad.add(param, alpha=group["weight_decay"])
        clr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        state_sum = state["sum"]
        state_sum.addcmul_(grad, grad, value=1)
        std = state_sum.sqrt().add_(group["eps"])
        param.addcdiv_(grad, std, value=-clr)
