"""NAdam: Adam with Nesterov momentum."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import genesis
from genesis.optim.optimizer import Optimizer


class NAdam(Optimizer):
    """NAdam (Dozat), as ``torch.optim.NAdam``, with its momentum schedule.

    For each parameter, at step ``t`` with gradient ``g`` (negated when ``maximize``)::

        g = g + weight_decay * p                 (or p = p * (1 - lr * wd), decoupled)
        mu_t = beta1 * (1 - 0.5 * 0.96**(t * momentum_decay))
        P = mu_1 * ... * mu_t                    (the running product, kept in the state)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        d = sqrt(v / (1 - beta2**t)) + eps
        p = p - lr * (1 - mu_t) / (1 - P) * g / d - lr * mu_{t+1} / (1 - P * mu_{t+1}) * m / d

    Args:
        params: parameters (or parameter groups) to optimize.
        lr: learning rate.
        betas: decay rates of the first and second moment averages.
        eps: term added to the denominator for numerical stability.
        weight_decay: L2 penalty (added to the gradient unless ``decoupled_weight_decay``).
        momentum_decay: how fast ``mu_t`` rises towards ``beta1``.
        decoupled_weight_decay: decay the weights directly, as AdamW (NAdamW).
        foreach: accepted for PyTorch compatibility (one update either way).
        maximize: ascend the objective instead of descending it.

    The step count and ``mu_product`` are Python numbers in the state (torch keeps 0-d
    tensors; loading torch's state dict converts them).

    Example::

        >>> opt = genesis.optim.NAdam(model.parameters(), lr=2e-3, momentum_decay=4e-3)
    """

    def __init__(self, params: Iterable, lr: float = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, foreach: bool | None = None,
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
        if momentum_decay < 0.0:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                    "momentum_decay": momentum_decay,
                    "decoupled_weight_decay": decoupled_weight_decay, "maximize": maximize,
                    "foreach": foreach}
        super().__init__(params, defaults)

    def init_state(self, param, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["step"] = 0
        state["mu_product"] = 1.0
        state["exp_avg"] = genesis.zeros_like(param)
        state["exp_avg_sq"] = genesis.zeros_like(param)

    def update(self, param, grad, state: dict[str, Any], group: dict[str, Any]) -> None:
        lr, (beta1, beta2), decay = float(group["lr"]), group["betas"], group["momentum_decay"]
        weight_decay = group["weight_decay"]
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        step = state["step"]
        if weight_decay != 0:
            if group["decoupled_weight_decay"]:
                param.mul_(1 - lr * weight_decay)
            else:
                grad = grad.add(param, alpha=weight_decay)
        mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * decay))
        mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * decay))
        mu_product = float(state["mu_product"]) * mu  # (float(): a loaded 0-d tensor, once)
        state["mu_product"] = mu_product
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = exp_avg_sq.div(1 - beta2**step).sqrt().add_(group["eps"])
        param.addcdiv_(grad, denom, value=-lr * (1.0 - mu) / (1.0 - mu_product))
        param.addcdiv_(exp_avg, denom, value=-lr * mu_next / (1.0 - mu_product * mu_next))
