"""Loss modules: store the options (and class weights as buffers), call the functional loss."""

from __future__ import annotations

from genesis.nn.functional import loss as F
from genesis.nn.modules.module import Module

__all__ = [
    "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCELoss",
    "BCEWithLogitsLoss", "KLDivLoss",
]


class _Loss(Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = reduction

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}" if self.reduction != "mean" else ""


class _WeightedLoss(_Loss):
    """A loss with an optional per-class ``weight``, kept as a buffer so ``.to()`` moves it."""

    def __init__(self, weight=None, reduction: str = "mean") -> None:
        super().__init__(reduction)
        self.register_buffer("weight", weight)


class CrossEntropyLoss(_WeightedLoss):
    """Cross entropy of logits against class indices or class probabilities.

    Args:
        weight: optional (C,) class weights. ignore_index: index target to skip.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``. label_smoothing: in [0, 1].

    Shape:
        input (N, C) / (N, C, d1, ...) / (C,); target (N) / (N, d1, ...) / () int64, or
        probabilities of input's shape. Output: scalar, or target-shaped for ``'none'``.

    Example:
        >>> CrossEntropyLoss()(genesis.randn(3, 5), genesis.tensor([1, 0, 4]))
    """

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0) -> None:
        super().__init__(weight, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_WeightedLoss):
    """Negative log-likelihood of log-probabilities at class indices (see ``nll_loss``).

    Example:
        >>> NLLLoss()(genesis.randn(3, 5).log_softmax(1), genesis.tensor([1, 0, 4]))
    """

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean") -> None:
        super().__init__(weight, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class MSELoss(_Loss):
    """Mean squared error. Example: ``MSELoss()(genesis.randn(3), genesis.zeros(3))``."""

    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """Mean absolute error. Example: ``L1Loss()(genesis.randn(3), genesis.zeros(3))``."""

    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """Smooth L1 loss with quadratic zone ``|d| < beta``.

    Example:
        >>> SmoothL1Loss(beta=0.5)(genesis.randn(3), genesis.zeros(3))
    """

    def __init__(self, reduction: str = "mean", beta: float = 1.0) -> None:
        super().__init__(reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """Huber loss with threshold ``delta``.

    Example:
        >>> HuberLoss(delta=2.0)(genesis.randn(3), genesis.zeros(3))
    """

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class BCELoss(_WeightedLoss):
    """Binary cross entropy of probabilities (logs clamped at -100).

    Example:
        >>> BCELoss()(genesis.rand(4), genesis.ones(4))
    """

    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, weight=self.weight,
                                      reduction=self.reduction)


class BCEWithLogitsLoss(_WeightedLoss):
    """Sigmoid + binary cross entropy, numerically stable; ``pos_weight`` weighs positives.

    Example:
        >>> BCEWithLogitsLoss(pos_weight=genesis.tensor([2.0]))(genesis.randn(4, 1),
        ...                                                      genesis.ones(4, 1))
    """

    def __init__(self, weight=None, reduction: str = "mean", pos_weight=None) -> None:
        super().__init__(weight, reduction)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, weight=self.weight,
                                                  reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class KLDivLoss(_Loss):
    """KL divergence of log-probability input from ``target``.

    Args:
        reduction: ``'none'`` | ``'batchmean'`` | ``'sum'`` | ``'mean'``.
        log_target: ``target`` given as log-probabilities.

    Example:
        >>> KLDivLoss(reduction="batchmean")(genesis.randn(2, 5).log_softmax(1),
        ...                                  genesis.randn(2, 5).softmax(1))
    """

    def __init__(self, reduction: str = "mean", log_target: bool = False) -> None:
        super().__init__(reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)
