"""Adam (and AMSGrad): adaptive moment estimation."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import genesis
from genesis.optim.optimizer import Optimizer


class Adam(Optimizer):
    """Adam, as ``torch.optim.Adam`` (same update, same order of operations).

    For each parameter, at step ``t`` with gradient ``g`` (negated when ``maximize``)::

        g = g + weight_decay * p                 (or p = p * (1 - lr * wd), decoupled)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        v_hat = max(v_hat, v)                    (amsgrad only; used instead of v)
        p = p - lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)

    Args:
        params: parameters (or parameter groups) to optimize.
        lr: learning rate.
        betas: decay rates of the first and second moment averages.
        eps: term added to the denominator for numerical stability.
        weight_decay: L2 penalty (added to the gradient unless ``decoupled_weight_decay``).
        amsgrad: use the running maximum of the second moment (AMSGrad).
        maximize: ascend the objective instead of descending it.
        decoupled_weight_decay: decay the weights directly, as AdamW.
        foreach, fused, capturable: accepted for PyTorch compatibility.

    Example::

        >>> opt = genesis.optim.Adam(model.parameters(), lr=3e-4, betas=(0.9, 0.95))
    """

    def __init__(self, params: Iterable, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *, maximize: bool = False,
                 decoupled_weight_decay: bool = False, foreach: bool | None = None,
                 fused: bool | None = None, capturable: bool = False) -> None:
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
                    "amsgrad": amsgrad, "maximize": maximize,
                    "decoupled_weight_decay": decoupled_weight_decay}
        super().__init__(params, defaults)

    def init_state(self, param, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["step"] = 0
        state["exp_avg"] = genesis.zeros_like(param)
        state["exp_avg_sq"] = genesis.zeros_like(param)
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = genesis.zeros_like(param)

    def update(self, param, grad, state: dict[str, Any], group: dict[str, Any]) -> None:
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
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
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias_correction1 = 1 - beta1**step
        bias_correction2_sqrt = (1 - beta2**step) ** 0.5
        step_size = lr / bias_correction1
        if group["amsgrad"]:
            max_sq = state["max_exp_avg_sq"]
            max_sq.copy_(genesis.maximum(max_sq, exp_avg_sq))
            denom = (max_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        else:
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        param.addcdiv_(exp_avg, denom, value=-step_size)
