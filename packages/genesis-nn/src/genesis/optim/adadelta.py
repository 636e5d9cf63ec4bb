"""Adadelta: step sizes from running averages of squared gradients and squared updates."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import genesis
from genesis.optim.optimizer import Optimizer


class Adadelta(Optimizer):
    """Adadelta (Zeiler), as ``torch.optim.Adadelta``.

    For each parameter, with gradient ``g`` (negated when ``maximize``)::

        g = g + weight_decay * p
        v = rho * v + (1 - rho) * g * g               (running mean of squared gradients)
        delta = sqrt(u + eps) / sqrt(v + eps) * g     (u: running mean of squared updates)
        u = rho * u + (1 - rho) * delta * delta
        p = p - lr * delta

    Args:
        params: parameters (or parameter groups) to optimize.
        lr: scale applied to the update (1.0, the method as published).
        rho: decay rate of both running averages.
        eps: term added inside both square roots.
        weight_decay: L2 penalty added to the gradient.
        foreach: accepted for PyTorch compatibility (one update either way).
        maximize: ascend the objective instead of descending it.

    Example::

        >>> opt = genesis.optim.Adadelta(model.parameters(), lr=1.0)
    """

    def __init__(self, params: Iterable, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0, foreach: bool | None = None, *,
                 maximize: bool = False) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {"lr": lr, "rho": rho, "eps": eps, "weight_decay": weight_decay,
                    "maximize": maximize, "foreach": foreach}
        super().__init__(params, defaults)

    def init_state(self, param, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["step"] = 0
        state["square_avg"] = genesis.zeros_like(param)
        state["acc_delta"] = genesis.zeros_like(param)

    def update(self, param, grad, state: dict[str, Any], group: dict[str, Any]) -> None:
        rho, eps = group["rho"], group["eps"]
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        if group["weight_decay"] != 0:
            grad = grad.add(param, alpha=group["weight_decay"])
        square_avg, acc_delta = state["square_avg"], state["acc_delta"]
        square_avg.mul_(rho).addcmul_(grad, grad, value=1 - rho)
        std = (square_avg + eps).sqrt()
        delta = (acc_delta + eps).sqrt() / std * grad
        acc_delta.mul_(rho).addcmul_(delta, delta, value=1 - rho)
        param.add_(delta, alpha=-float(group["lr"]))
