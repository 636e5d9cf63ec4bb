"""Rprop: per-coordinate step sizes adapted from the signs of successive gradients."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import genesis
from genesis.optim.optimizer import Optimizer


class Rprop(Optimizer):
    """Resilient backpropagation (Riedmiller and Braun), as ``torch.optim.Rprop``.

    For each parameter, with gradient ``g`` (negated when ``maximize``) and the previous
    step's ``g_prev`` (0 at first)::

        f = eta_plus    where g * g_prev > 0       (same sign: grow the step)
            eta_minus   where g * g_prev < 0       (sign flip: shrink it, skip this move)
            1           elsewhere
        s = clamp(s * f, step_size_min, step_size_max)    (s starts at lr)
        g = 0 where f == eta_minus
        p = p - sign(g) * s
        g_prev = g

    Only gradients' signs matter, so Rprop suits full-batch training.

    Args:
        params: parameters (or parameter groups) to optimize.
        lr: the initial step size of every coordinate.
        etas: ``(eta_minus, eta_plus)``, the factors that shrink and grow a step size
            (``0 < eta_minus < 1 < eta_plus``).
        step_sizes: ``(min, max)`` bounds of the step sizes.
        foreach: accepted for PyTorch compatibility (one update either way).
        maximize: ascend the objective instead of descending it.

    Example::

        >>> opt = genesis.optim.Rprop(model.parameters(), lr=1e-2, etas=(0.5, 1.2))
    """

    def __init__(self, params: Iterable, lr: float = 1e-2,
                 etas: tuple[float, float] = (0.5, 1.2),
                 step_sizes: tuple[float, float] = (1e-6, 50), *,
                 foreach: bool | None = None, maximize: bool = False) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        defaults = {"lr": lr, "etas": tuple(etas), "step_sizes": tuple(step_sizes),
                    "foreach": foreach, "maximize": maximize}
        super().__init__(params, defaults)

    def init_state(self, param, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["step"] = 0
        state["prev"] = genesis.zeros_like(param)
        state["step_size"] = genesis.full_like(param, float(group["lr"]))

    def update(self, param, grad, state: dict[str, Any], group: dict[str, Any]) -> None:
        eta_minus, eta_plus = group["etas"]
        step_size_min, step_size_max = group["step_sizes"]
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        prev, step_size = state["prev"], state["step_size"]
        sign = (grad * prev).sign()
        flipped = sign < 0  # (where f == eta_minus: eta_minus < 1 < eta_plus tells them apart)
        factor = genesis.where(sign > 0, eta_plus,
                               genesis.where(flipped, eta_minus, genesis.ones_like(sign)))
        step_size.mul_(factor).clamp_(step_size_min, step_size_max)
        grad = genesis.where(flipped, genesis.zeros_like(grad), grad)
        param.addcmul_(grad.sign(), step_size, value=-1)
        prev.copy_(grad)
