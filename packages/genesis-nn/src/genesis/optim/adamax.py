"""Adamax: Adam with the infinity norm in place of the second moment."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import genesis
from genesis.optim.optimizer import Optimizer


class Adamax(Optimizer):
    """Adamax (Kingma and Ba, section 7), as ``torch.optim.Adamax``.

    For each parameter, at step ``t`` with gradient ``g`` (negated when ``maximize``)::

        g = g + weight_decay * p
        m = beta1 * m + (1 - beta1) * g
        u = max(beta2 * u, |g| + eps)                 (a decaying infinity norm)
        p = p - lr / (1 - beta1**t) * m / u

    Args:
        params: parameters (or parameter groups) to optimize.
        lr: learning rate.
        betas: decay rates of the first moment and of the infinity norm.
        eps: term added to ``|g|`` (keeps ``u`` positive).
        weight_decay: L2 penalty added to the gradient.
        foreach: accepted for PyTorch compatibility (one update either way).
        maximize: ascend the objective instead of descending it.

    Example::

        >>> opt = genesis.optim.Adamax(model.parameters(), lr=2e-3)
    """

    def __init__(self, params: Iterable, lr: float = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, foreach: bool | None = None, *,
                 maximize: bool = False) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                    "foreach": foreach, "maximize": maximize}
        super().__init__(params, defaults)

    def init_state(self, param, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["step"] = 0
        state["exp_avg"] = genesis.zeros_like(param)
        state["exp_inf"] = genesis.zeros_like(param)

    def update(self, param, grad, state: dict[str, Any], group: dict[str, Any]) -> None:
        beta1, beta2 = group["betas"]
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        if group["weight_decay"] != 0:
            grad = grad.add(param, alpha=group["weight_decay"])
        exp_avg, exp_inf = state["exp_avg"], state["exp_inf"]
        exp_avg.lerp_(grad, 1 - beta1)
        exp_inf.copy_(genesis.maximum(exp_inf.mul_(beta2), grad.abs().add_(group["eps"])))
        step_size = float(group["lr"]) / (1 - beta1 ** state["step"])
        param.addcdiv_(exp_avg, exp_inf, value=-step_size)
