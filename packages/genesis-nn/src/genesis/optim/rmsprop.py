"""RMSprop: gradients divided by a running root mean square."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import genesis
from genesis.optim.optimizer import Optimizer


class RMSprop(Optimizer):
    """RMSprop (Hinton), as ``torch.optim.RMSprop``.

    For each parameter, with gradient ``g`` (negated when ``maximize``)::

        g = g + weight_decay * p
        v = alpha * v + (1 - alpha) * g * g
        avg = sqrt(v - mean_g**2) if centered else sqrt(v)    (mean_g: running mean of g)
        b = momentum * b + g / (avg + eps);  p = p - lr * b   (momentum > 0)
        p = p - lr * g / (avg + eps)                          (otherwise)

    Args:
        params: parameters (or parameter groups) to optimize.
        lr: learning rate.
        alpha: smoothing constant of the squared-gradient average.
        eps: term added to the denominator for numerical stability.
        weight_decay: L2 penalty added to the gradient.
        momentum: momentum factor.
        centered: normalise by an estimate of the gradient's variance instead.
        maximize: ascend the objective instead of descending it.
        foreach: accepted for PyTorch compatibility.
        capturable: like ``foreach``.

    Example::

        >>> opt = genesis.optim.RMSprop(model.parameters(), lr=1e-3, momentum=0.9)
    """

    def __init__(self, params: Iterable, lr: float = 1e-2, alpha: float = 0.99,
                 eps: float = 1e-8, weight_decay: float = 0.0, momentum: float = 0.0,
                 centered: bool = False, capturable: bool = False,
                 foreach: bool | None = None, maximize: bool = False) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if alpha < 0.0:
            raise ValueError(f"Invalid alpha value: {alpha}")
        defaults = {"lr": lr, "alpha": alpha, "eps": eps, "weight_decay": weight_decay,
                    "momentum": momentum, "centered": centered, "maximize": maximize}
        super().__init__(params, defaults)

    def init_state(self, param, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["step"] = 0
        state["square_avg"] = genesis.zeros_like(param)
        if group["momentum"] > 0:
            state["momentum_buffer"] = genesis.zeros_like(param)
        if group["centered"]:
            state["grad_avg"] = genesis.zeros_like(param)

    def update(self, param, grad, state: dict[str, Any], group: dict[str, Any]) -> None:
        alpha = group["alpha"]
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        if group["weight_decay"] != 0:
            grad = grad.add(param, alpha=group["weight_decay"])
        square_avg = state["square_avg"]
        square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
        if group["centered"]:
            grad_avg = state["grad_avg"]
            grad_avg.lerp_(grad, 1 - alpha)
            avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()
        else:
            avg = square_avg.sqrt()
        avg = avg.add_(group["eps"])
        if group["momentum"] > 0:
            buf = state["momentum_buffer"]
            buf.mul_(group["momentum"]).addcdiv_(grad, avg)
            param.add_(buf, alpha=-group["lr"])
        else:
            param.addcdiv_(grad, avg, value=-group["lr"])
