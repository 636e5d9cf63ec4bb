"""ASGD: stochastic gradient descent with a decaying step and a running average of iterates."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import genesis
from genesis.optim.optimizer import Optimizer


class ASGD(Optimizer):
    """Averaged SGD (Polyak and Juditsky), as ``torch.optim.ASGD``.

    For each parameter, at step ``t`` with gradient ``g`` (negated when ``maximize``);
    ``eta`` starts at ``lr`` and ``mu`` at 1::

        g = g + weight_decay * p
        p = p * (1 - lambd * eta) - eta * g
        ax = ax + mu * (p - ax)                  (ax = p while mu == 1)
        eta = lr / (1 + lambd * lr * t)**alpha
        mu = 1 / max(1, t - t0)                  (averaging starts after t0 steps)

    The averaged parameters are ``optimizer.state[p]["ax"]``; the parameters themselves
    follow plain (decaying-step) SGD, as in torch.

    Args:
        params: parameters (or parameter groups) to optimize.
        lr: learning rate.
        lambd: decay term.
        alpha: power of the step-size decay.
        t0: step at which averaging starts.
        weight_decay: L2 penalty added to the gradient.
        foreach: accepted for PyTorch compatibility (one update either way).
        maximize: ascend the objective instead of descending it.

    ``step``, ``eta`` and ``mu`` are Python numbers in the state (torch keeps 0-d tensors;
    loading torch's state dict converts them).

    Example::

        >>> opt = genesis.optim.ASGD(model.parameters(), lr=1e-2, t0=100)
    """

    def __init__(self, params: Iterable, lr: float = 1e-2, lambd: float = 1e-4,
                 alpha: float = 0.75, t0: float = 1e6, weight_decay: float = 0.0,
                 foreach: bool | None = None, maximize: bool = False) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {"lr": lr, "lambd": lambd, "alpha": alpha, "t0": t0,
                    "weight_decay": weight_decay, "foreach": foreach, "maximize": maximize}
        super().__init__(params, defaults)

    def init_state(self, param, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["step"] = 0
        state["eta"] = float(group["lr"])
        state["mu"] = 1.0
        state["ax"] = genesis.zeros_like(param)

    def update(self, param, grad, state: dict[str, Any], group: dict[str, Any]) -> None:
        lr, lambd = float(group["lr"]), group["lambd"]
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        step = state["step"]
        if group["weight_decay"] != 0:
            grad = grad.add(param, alpha=group["weight_decay"])
        eta, mu = float(state["eta"]), float(state["mu"])  # (float(): a loaded 0-d tensor)
        param.mul_(1 - lambd * eta)
        param.add_(grad, alpha=-eta)
        ax = state["ax"]
        if mu != 1:
            ax.add_((param - ax).mul_(mu))
        else:
            ax.copy_(param)
        state["eta"] = lr / (1 + lambd * lr * step) ** group["alpha"]
        state["mu"] = 1 / max(1, step - group["t0"])
