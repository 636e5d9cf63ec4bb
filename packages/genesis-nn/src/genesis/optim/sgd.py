"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from genesis.nn.fused_declarations import SGD_STEP
from genesis.optim.optimizer import (
    Optimizer,
    bucket_by_array,
    bump_versions,
    check_foreach_fused,
)
from genesis.tensor import Tensor


class SGD(Optimizer):
    """Stochastic gradient descent, optionally with (Nesterov) momentum, as ``torch.optim.SGD``.

    For each parameter, with ``g`` its gradient (negated when ``maximize``)::

        g = g + weight_decay * p
        b = g                                  (first step)
        b = momentum * b + (1 - dampening) * g (later steps)
        g = g + momentum * b if nesterov else b
        p = p - lr * g

    Args:
        params: parameters (or parameter groups) to optimize.
        lr: learning rate.
        momentum: momentum factor (0 disables the buffer).
        dampening: dampening of the momentum.
        weight_decay: L2 penalty added to the gradient.
        nesterov: use Nesterov momentum (needs ``momentum > 0`` and ``dampening == 0``).
        maximize: ascend the objective instead of descending it.
        foreach, fused: update every parameter of a group in one multi-tensor call (the
            backend's fused ``sgd_step`` kernel where it has one); ``None`` (default) picks
            it for parameters on an accelerator, as torch does. Same update either way.

    Example::

        >>> opt = genesis.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
                 *, maximize: bool = False, foreach: bool | None = None,
                 fused: bool | None = None) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        check_foreach_fused(foreach, fused)
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening,
                    "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize,
                    "foreach": foreach, "fused": fused}
        super().__init__(params, defaults)

    def update(self, param, grad, state: dict[str, Any], group: dict[str, Any]) -> None:
        if group["maximize"]:
            grad = -grad
        if group["weight_decay"] != 0:
            grad = grad.add(param, alpha=group["weight_decay"])
        momentum = group["momentum"]
        if momentum != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = grad.detach().clone()
                state["momentum_buffer"] = buf
            else:
                buf.mul_(momentum).add_(grad, alpha=1 - group["dampening"])
            grad = grad.add(buf, alpha=momentum) if group["nesterov"] else buf
        param.add_(grad, alpha=-group["lr"])

    def multi_update(self, params, grads, states, group: dict[str, Any]) -> None:
        buckets = bucket_by_array(params, grads, states)
        for items in buckets.values():
            ps = [p for p, _, _ in items]
            old = [st.get("momentum_buffer") for _, _, st in items]
            bufs = SGD_STEP.forward(
                ps[0]._backend, [p._data for p in ps], [g._data for _, g, _ in items],
                [None if b is None else b._data for b in old], group["lr"], group["momentum"],
                group["dampening"], group["weight_decay"], group["nesterov"], group["maximize"])
            for (p, _, state), prev, buf in zip(items, old, bufs):
                if prev is None and buf is not None:
                    state["momentum_buffer"] = Tensor._wrap(buf, p.device)
            bump_versions(ps, old)
