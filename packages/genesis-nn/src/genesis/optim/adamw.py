"""AdamW: Adam with decoupled weight decay."""

from __future__ import annotations

from collections.abc import Iterable

from genesis import Tensor
from genesis.optim.adam import Adam


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter), as ``torch.optim.AdamW``.

    Each step first shrinks the weights, ``p = p * (1 - lr * weight_decay)``, then applies
    the plain Adam update (see :class:`Adam`); the decay never enters the moment averages.

    Args:
        params: parameters (or parameter groups) to optimize.
        lr: learning rate.
        betas: decay rates of the first and second moment averages.
        eps: term added to the denominator for numerical stability.
        weight_decay: decoupled weight decay coefficient (default 0.01, as torch).
        amsgrad: use the running maximum of the second moment (AMSGrad).
        maximize: ascend the objective instead of descending it.
        foreach, fused: the multi-tensor path (see :class:`Adam`).
        capturable: keep the step count on the device, so ``step()`` can be captured in a
            CUDA graph (see :class:`Adam`).

    Example::

        >>> decay = [p for p in model.parameters() if p.ndim >= 2]
        >>> no_decay = [p for p in model.parameters() if p.ndim < 2]
        >>> opt = genesis.optim.AdamW([{"params": decay}, {"params": no_decay,
        ...                            "weight_decay": 0.0}], lr=3e-4, weight_decay=0.1)
    """

    def __init__(self, params: Iterable, lr: float | Tensor = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None,
                 fused: bool | None = None, capturable: bool = False) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, maximize=maximize, decoupled_weight_decay=True,
                         foreach=foreach, fused=fused, capturable=capturable)
