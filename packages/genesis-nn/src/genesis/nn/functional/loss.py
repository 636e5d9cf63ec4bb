"""Loss functions with torch's exact semantics, composed from core ops (autograd does backward).

Classification losses take the class dimension as dim 1 (or dim 0 for a single unbatched
sample), as torch does: input (N, C) or (N, C, d1, ...) or (C,), target (N) or (N, d1, ...) or
(). Values are read on the host only where torch refuses bad ones (class indices out of
range, binary cross entropy outside [0, 1]), and only for CPU tensors unless
``GENESIS_DEVICE_CHECKS=1`` (``genesis.ops.common.checks_values``): on an accelerator such a read
would synchronise every step, and torch reports these errors asynchronously there.
"""

from __future__ import annotations

import warnings

import genesis
from genesis.nn.functional.cross_entropy_rows import _reduce_rows, cross_entropy_rows
from genesis.ops.common import checks_values

__all__ = [
    "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
]

_REDUCTIONS = ("none", "mean", "sum")


def _fp32(*tensors):
    """Under ``genesis.autocast`` losses run in float32 (torch's policy): cast floating
    low-precision operands up; outside autocast return them unchanged."""
    first = tensors[0]
    if not genesis.is_autocast_enabled(first.device.type):
        return tensors
    return tuple(t.float() if t is not None and t.is_floating_point()
                 and t.dtype is not genesis.float32 and t.dtype is not genesis.float64
                 else t for t in tensors)


def _check_reduction(name: str, reduction: str, allowed=_REDUCTIONS) -> None:
    if reduction not in allowed:
        raise ValueError(f"{name}: {reduction!r} is not a valid value for reduction; "
                         f"expected one of {', '.join(repr(r) for r in allowed)}")


def _reduce(loss, reduction: str):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _is_floating(t) -> bool:
    return t.dtype.is_floating_point


def _class_view(weight, ndim: int, class_dim: int):
    """View a (C,) class weight so it broadcasts along ``class_dim`` of an ``ndim`` tensor."""
    shape = [1] * ndim
    shape[class_dim] = weight.shape[0]
    return weight.reshape(*shape)


# --------------------------------------------------------------------- classification
def _check_nll_shapes(name: str, input, target, weight) -> int:
    """Validate (input, target, weight) for index targets; returns the class count."""
    if input.ndim < 1:
        raise ValueError(f"{name}: input must have at least 1 dimension (C) or (N, C, ...), "
                         f"got input of size {list(input.shape)}")
    if input.ndim == 1:
        if target.ndim != 0:
            raise ValueError(f"{name}: for unbatched input of size {list(input.shape)} the "
                             f"target must be 0-d, got target of size {list(target.shape)}")
    else:
        if target.ndim != input.ndim - 1:
            raise ValueError(f"{name}: expected target of size {list(input.shape[:1])}"
                             f"{'+' + str(list(input.shape[2:])) if input.ndim > 2 else ''} "
                             f"for input of size {list(input.shape)}, got target of size "
                             f"{list(target.shape)}")
        if input.shape[0] != target.shape[0]:
            raise ValueError(f"{name}: expected input batch_size ({input.shape[0]}) to match "
                             f"target batch_size ({target.shape[0]})")
        if tuple(input.shape[2:]) != tuple(target.shape[1:]):
            raise ValueError(f"{name}: expected target of size "
                             f"{[input.shape[0]] + list(input.shape[2:])}, got "
                             f"{list(target.shape)} (input of size {list(input.shape)})")
    if _is_floating(target) or target.dtype == genesis.bool:
        raise TypeError(f"{name}: expected an integer (int64) class-index target, got dtype "
                        f"{target.dtype}")
    n_classes = input.shape[0 if input.ndim == 1 else 1]
    if weight is not None and (weight.ndim != 1 or weight.shape[0] != n_classes):
        raise ValueError(f"{name}: weight tensor should be defined either for all "
                         f"{n_classes} classes or no classes but got weight tensor of shape: "
                         f"{list(weight.shape)}")
    return n_classes


def _take(weight, index):
    """``weight[index]`` for a (C,) weight and an int64 index tensor of any shape."""
    return weight.index_select(0, index.reshape(-1)).reshape(index.shape)


def _weighted_mean(total, denom):
    """``total / denom`` as torch's reductions do it: nan when ``denom`` is 0 (every target
    ignored), yet a zero gradient then (the nan is added as a constant, not divided through)."""
    empty = denom == 0
    safe = genesis.where(empty, 1.0, denom)
    nan = genesis.where(empty, float("nan"), 0.0)
    return total / safe + nan


def _check_targets_in_range(safe, n_classes: int, ignore_index: int) -> None:
    """torch's "Target 7 is out of bounds." (not the internal gather's message), with the
    class count; one host read of the targets' min and max, where ``checks_values`` allows
    it (CPU tensors; on an accelerator only with ``GENESIS_DEVICE_CHECKS=1``)."""
    if not safe.numel() or not checks_values(safe):
        return
    lo, hi = genesis.stack([safe.min(), safe.max()]).tolist()
    if lo < 0 or hi >= n_classes:
        raise IndexError(f"Target {lo if lo < 0 else hi} is out of bounds. Expected class "
                         f"indices in [0, {n_classes}) for {n_classes} classes, or "
                         f"ignore_index ({ignore_index}).")


def _nll(input, target, weight, ignore_index: int, reduction: str):
    """Validated nll_loss body: (per-element loss or reduction) without shape checks."""
    class_dim = 0 if input.ndim == 1 else 1
    keep = target != ignore_index                              # (N, ...) bool
    safe = genesis.where(keep, target, 0)
    _check_targets_in_range(safe, input.shape[class_dim], ignore_index)
    picked = input.gather(class_dim, safe.unsqueeze(class_dim)).squeeze(class_dim)
    mask = keep.to(input.dtype)
    w = mask if weight is None else _take(weight, safe) * mask  # (N, ...)
    loss = -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return _weighted_mean(loss.sum(), w.sum())


def nll_loss(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean"):
    """Negative log-likelihood of log-probabilities ``input`` at class indices ``target``.

    Args:
        input: (N, C), (N, C, d1, ...) or (C,) log-probabilities.
        target: (N), (N, d1, ...) or () int64 class indices in ``[0, C)``.
        weight: optional (C,) per-class rescaling.
        ignore_index: targets equal to it contribute 0 and are left out of the mean.
        reduction: ``'none'`` | ``'mean'`` (divided by the summed weights of the kept
            targets) | ``'sum'``.

    Returns:
        A scalar, or the per-element loss of ``target``'s shape for ``'none'``.

    Example:
        >>> nll_loss(genesis.randn(3, 5).log_softmax(1), genesis.tensor([1, 0, 4]))
    """
    _check_reduction("nll_loss", reduction)
    input, weight = _fp32(input, weight)
    _check_nll_shapes("nll_loss", input, target, weight)
    return _nll(input, target, weight, ignore_index, reduction)


def _cross_entropy_probs(logp, target, weight, reduction, label_smoothing, class_dim,
                         n_classes):
    if label_smoothing > 0.0:
        target = target * (1.0 - label_smoothing) + label_smoothing / n_classes
    prod = logp * target
    if weight is not None:
        prod = prod * _class_view(weight, logp.ndim, class_dim)
    if reduction == "none":
        return -prod.sum(dim=class_dim)
    if reduction == "sum":
        return -prod.sum()
    return -prod.sum() / (logp.numel() / n_classes)  # mean over samples (nan when empty)


def cross_entropy(input, target, weight=None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0):
    """Cross entropy between logits ``input`` and class indices or class probabilities.

    Args:
        input: (N, C), (N, C, d1, ...) or (C,) unnormalised logits.
        target: int64 class indices of shape (N), (N, d1, ...) or (); or floating class
            probabilities of ``input``'s shape.
        weight: optional (C,) per-class rescaling.
        ignore_index: with index targets, targets equal to it are skipped (also in the
            label-smoothing term and the mean's denominator).
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``. With index targets and ``weight``,
            ``'mean'`` divides by the summed weights of the kept targets.
        label_smoothing: in [0, 1]; mixes the target with the uniform distribution.

    Returns:
        A scalar, or the per-sample loss for ``'none'``.

    Example:
        >>> loss = cross_entropy(genesis.randn(4, 10), genesis.tensor([1, 2, 3, 4]))
    """
    _check_reduction("cross_entropy", reduction)
    if (weight is None and input.ndim == 2 and input.dtype in _HALF
            and not _is_floating(target) and 0.0 <= label_smoothing <= 1.0):
        # Half-precision (N, C) logits, e.g. a language model's: the backend's fused rows
        # read them as they are (no float32 copy, even under autocast).
        _check_nll_shapes("cross_entropy", input, target, weight)
        return _half_cross_entropy(input, target, ignore_index, reduction, label_smoothing)
    input, target, weight = _fp32(input, target, weight)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be between 0.0 and 1.0, got "
                         f"{label_smoothing}")
    if input.ndim < 1:
        raise ValueError("cross_entropy: input must have at least 1 dimension, got input of "
                         f"size {list(input.shape)}")
    class_dim = 0 if input.ndim == 1 else 1
    n_classes = input.shape[class_dim]
    if _is_floating(target):  # class probabilities
        if tuple(target.shape) != tuple(input.shape):
            raise ValueError(f"cross_entropy: probability target of size {list(target.shape)} "
                             f"must match input of size {list(input.shape)}")
        if weight is not None and (weight.ndim != 1 or weight.shape[0] != n_classes):
            raise ValueError(f"cross_entropy: weight tensor should be defined either for all "
                             f"{n_classes} classes or no classes but got weight tensor of "
                             f"shape: {list(weight.shape)}")
        logp = input.log_softmax(class_dim)
        return _cross_entropy_probs(logp, target, weight, reduction, label_smoothing,
                                    class_dim, n_classes)

    _check_nll_shapes("cross_entropy", input, target, weight)
    logp = input.log_softmax(class_dim)
    nll = _nll(logp, target, weight, ignore_index, reduction)
    if label_smoothing == 0.0:
        return nll
    # torch: (1-eps)*nll + eps/C * smooth, smooth = -sum_c w_c logp_c over kept targets
    keep = target != ignore_index
    wl = logp if weight is None else logp * _class_view(weight, logp.ndim, class_dim)
    smooth = -wl.sum(dim=class_dim) * keep.to(logp.dtype)      # (N, ...)
    if reduction == "none":
        pass
    elif reduction == "sum":
        smooth = smooth.sum()
    elif weight is None:
        smooth = _weighted_mean(smooth.sum(), keep.to(logp.dtype).sum())
    else:
        safe = genesis.where(keep, target, genesis.zeros_like(target))
        smooth = _weighted_mean(smooth.sum(), (_take(weight, safe) * keep.to(logp.dtype)).sum())
    return nll * (1.0 - label_smoothing) + smooth * (label_smoothing / n_classes)


_HALF = (genesis.float16, genesis.bfloat16)


def _half_cross_entropy(input, target, ignore_index, reduction, label_smoothing):
    """cross_entropy of half (N, C) logits through ``cross_entropy_rows``: float32
    inside; the result is float32 under autocast (torch's policy), else ``input``'s dtype."""
    rows = cross_entropy_rows(input, target, ignore_index, label_smoothing)  # (N,) float32
    out = _reduce_rows(rows, (target != ignore_index).sum().float(), reduction)
    if genesis.is_autocast_enabled(input.device.type):
        return out
    return out.to(input.dtype)


# ------------------------------------------------------------------------ regression
def _check_same_size(name: str, input, target) -> None:
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn(
            f"{name}: using a target size ({list(target.shape)}) that is different to the "
            f"input size ({list(input.shape)}). This will likely lead to incorrect results "
            "due to broadcasting. Please ensure they have the same size.", stacklevel=3)


def mse_loss(input, target, reduction: str = "mean"):
    """Mean squared error ``(input - target)**2``, reduced.

    Args:
        input: a tensor.
        target: a tensor of ``input``'s shape (broadcasting warns, as in torch).
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.

    Returns:
        A 0-d tensor with ``'mean'`` or ``'sum'`` reduction, else a tensor of ``input``'s shape.

    Example:
        >>> mse_loss(genesis.randn(3), genesis.zeros(3))
    """
    _check_reduction("mse_loss", reduction)
    input, target = _fp32(input, target)
    _check_same_size("mse_loss", input, target)
    diff = input - target
    return _reduce(diff * diff, reduction)


def l1_loss(input, target, reduction: str = "mean"):
    """Mean absolute error ``|input - target|``, reduced.

    Args:
        input: a tensor.
        target: a tensor of ``input``'s shape.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.

    Returns:
        A 0-d tensor with ``'mean'`` or ``'sum'`` reduction, else a tensor of ``input``'s shape.

    Example:
        >>> l1_loss(genesis.randn(3), genesis.zeros(3), reduction="sum")
    """
    _check_reduction("l1_loss", reduction)
    input, target = _fp32(input, target)
    _check_same_size("l1_loss", input, target)
    return _reduce((input - target).abs(), reduction)


def smooth_l1_loss(input, target, reduction: str = "mean", beta: float = 1.0):
    """Smooth L1: ``0.5 d**2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta``.

    Args:
        input: a tensor; ``d = input - target``.
        target: a tensor of ``input``'s shape.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
        beta: the quadratic zone's half-width, >= 0; ``beta=0`` is exactly L1.

    Returns:
        A 0-d tensor with ``'mean'`` or ``'sum'`` reduction, else a tensor of ``input``'s shape.

    Example:
        >>> smooth_l1_loss(genesis.randn(4), genesis.zeros(4), beta=0.5)
    """
    _check_reduction("smooth_l1_loss", reduction)
    input, target = _fp32(input, target)
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
    _check_same_size("smooth_l1_loss", input, target)
    if beta == 0.0:
        return l1_loss(input, target, reduction)
    diff = input - target
    ad = diff.abs()
    loss = genesis.where(ad < beta, diff * diff * (0.5 / beta), ad - 0.5 * beta)
    return _reduce(loss, reduction)


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0):
    """Huber loss: ``0.5 d**2`` where ``|d| < delta``, else ``delta * (|d| - 0.5 delta)``.

    Args:
        input: a tensor.
        target: a tensor of ``input``'s shape.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
        delta: where the loss turns from quadratic to linear.

    Returns:
        A 0-d tensor with ``'mean'`` or ``'sum'`` reduction, else a tensor of ``input``'s shape.

    Example:
        >>> huber_loss(genesis.randn(4), genesis.zeros(4), delta=2.0)
    """
    _check_reduction("huber_loss", reduction)
    input, target = _fp32(input, target)
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    _check_same_size("huber_loss", input, target)
    diff = input - target
    ad = diff.abs()
    loss = genesis.where(ad < delta, diff * diff * 0.5, (ad - 0.5 * delta) * delta)
    return _reduce(loss, reduction)


# ---------------------------------------------------------------------------- binary
def _check_probabilities(input, target) -> None:
    """torch's range check of binary_cross_entropy, both tensors in one host read (NaN fails:
    it is not between 0 and 1), where ``checks_values`` allows it (CPU tensors; on an
    accelerator only with ``GENESIS_DEVICE_CHECKS=1``, as torch reports it asynchronously)."""
    if not input.numel() or not checks_values(input):
        return
    with genesis.no_grad():
        ok = genesis.stack([((input >= 0) & (input <= 1)).all(),
                            ((target >= 0) & (target <= 1)).all()]).tolist()
    for name, fine in zip(("input", "target"), ok):
        if not fine:
            raise RuntimeError(f"binary_cross_entropy: all elements of {name} should be "
                               "between 0 and 1")


def binary_cross_entropy(input, target, weight=None, reduction: str = "mean"):
    """Binary cross entropy of probabilities ``input`` against ``target`` in [0, 1].

    Each log is clamped at -100 (torch's rule), so ``input`` of exactly 0 or 1 gives a finite
    loss. Inputs or targets outside [0, 1] (or NaN) raise, as in torch: one host read (CPU tensors).

    Args:
        input: probabilities, any shape.
        target: same shape as ``input``.
        weight: optional, broadcastable to ``input``; rescales each element.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.

    Returns:
        A 0-d tensor with ``'mean'`` or ``'sum'`` reduction, else a tensor of ``input``'s shape.

    Example:
        >>> binary_cross_entropy(genesis.rand(4), genesis.ones(4))
    """
    _check_reduction("binary_cross_entropy", reduction)
    input, target, weight = _fp32(input, target, weight)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"binary_cross_entropy: using a target size ({list(target.shape)}) "
                         f"that is different to the input size ({list(input.shape)}) is not "
                         "supported; please ensure they have the same size")
    _check_probabilities(input, target)
    log_p = input.log().clamp(min=-100.0)
    log_q = (1.0 - input).log().clamp(min=-100.0)
    loss = -(target * log_p + (1.0 - target) * log_q)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, reduction: str = "mean",
                                     pos_weight=None):
    """Sigmoid + binary cross entropy in one numerically stable expression.

    ``loss = (1 - t) * x - lw * logsigmoid(x)`` with ``lw = 1 + (pos_weight - 1) * t``, and
    ``logsigmoid(x) = min(x, 0) - log1p(exp(-|x|))`` (never overflows).

    Args:
        input: logits, any shape.
        target: same shape, values in [0, 1].
        weight: optional, broadcastable to ``input``.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
        pos_weight: optional weight of positive examples, broadcast along the last dim
            (e.g. (C,) for a multi-label (N, C) problem).

    Returns:
        A 0-d tensor with ``'mean'`` or ``'sum'`` reduction, else a tensor of ``input``'s shape.

    Example:
        >>> binary_cross_entropy_with_logits(genesis.randn(4), genesis.ones(4))
    """
    _check_reduction("binary_cross_entropy_with_logits", reduction)
    input, target, weight, pos_weight = _fp32(input, target, weight, pos_weight)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"binary_cross_entropy_with_logits: target size "
                         f"({list(target.shape)}) must be the same as input size "
                         f"({list(input.shape)})")
    abs_x = input.abs()
    # min(x, 0) written as (x - |x|) / 2: the same value, and at x = 0 the same gradient (1/2)
    log_sig = (input - abs_x) * 0.5 - (-abs_x).exp().log1p()
    if pos_weight is not None:
        log_weight = (pos_weight - 1.0) * target + 1.0
        loss = (1.0 - target) * input - log_weight * log_sig
    else:
        loss = (1.0 - target) * input - log_sig
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


# ------------------------------------------------------------------------ divergence
def kl_div(input, target, reduction: str = "mean", log_target: bool = False):
    """Kullback-Leibler divergence with ``input`` given as log-probabilities.

    Pointwise ``target * (log(target) - input)`` (0 where ``target == 0``), or with
    ``log_target``: ``exp(target) * (target - input)``.

    Args:
        input: log-probabilities, any shape.
        target: probabilities (or log-probabilities when ``log_target``), same shape.
        reduction: ``'none'`` | ``'batchmean'`` (sum / batch size: the true KL divergence) |
            ``'sum'`` | ``'mean'`` (over every element, as torch; warns).
        log_target: whether ``target`` is given in log space.

    Returns:
        A 0-d tensor unless ``reduction='none'`` (then ``input``'s shape).

    Example:
        >>> kl_div(genesis.randn(2, 5).log_softmax(1), genesis.randn(2, 5).softmax(1),
        ...        reduction="batchmean")
    """
    _check_reduction("kl_div", reduction, ("none", "batchmean", "sum", "mean"))
    input, target = _fp32(input, target)
    if reduction == "mean":
        warnings.warn("kl_div: reduction 'mean' divides the total loss by both the batch size "
                      "and the support size; 'batchmean' divides only by the batch size and "
                      "matches the math definition of KL divergence", stacklevel=2)
    if log_target:
        loss = target.exp() * (target - input)
    else:
        positive = target > 0
        safe = genesis.where(positive, target, genesis.ones_like(target))
        xlogx = genesis.where(positive, target * safe.log(), genesis.zeros_like(target))
        loss = xlogx - target * input
    if reduction == "batchmean":
        total = loss.sum()
        return total / input.shape[0] if input.ndim > 0 else total
    return _reduce(loss, reduction)
