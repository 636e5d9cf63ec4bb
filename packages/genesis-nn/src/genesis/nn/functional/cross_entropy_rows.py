"""Cross-entropy rows: the per-row loss and logsumexp of (N, C) logits in one Function.

It runs the fused op ``CROSS_ENTROPY`` of ``genesis.nn.fused_declarations`` (the backend's
``cross_entropy`` / ``cross_entropy_backward`` kernels, else the row's composites), so it runs
on every backend; a fused kernel
reads half-precision logits once and makes no float32 copy of them. ``F.cross_entropy`` of half
logits and ``linear_cross_entropy``'s chunks both go through it.
"""

from __future__ import annotations

from genesis.autograd.function import Function, once_differentiable
from genesis.nn.fused_declarations import CROSS_ENTROPY
from genesis.ops.common import check_same_device, wrap


class CrossEntropyRows(Function):
    """Per-row cross-entropy of logits (M, C) at int64 targets (M,): a float32 (M,) loss,
    0 at ignored rows. Half-precision logits are read as they are (the fused kernel computes
    in float32), so autocast needs no float32 copy of them."""

    @staticmethod
    def forward(ctx, logits, target, ignore_index, label_smoothing):
        loss, lse = CROSS_ENTROPY.forward(logits._backend, logits._data, target._data,
                                          ignore_index, label_smoothing)
        lse = wrap(lse, logits.device)
        ctx.save_for_backward(logits, target, lse)
        ctx.opts = (ignore_index, label_smoothing)
        return wrap(loss, logits.device)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        logits, target, lse = ctx.saved_tensors
        grad = CROSS_ENTROPY.backward(logits._backend, g.float().contiguous()._data,
                                      logits._data, target._data, lse._data, *ctx.opts)
        return wrap(grad, logits.device), None, None, None


def cross_entropy_rows(logits, target, ignore_index: int = -100,
                       label_smoothing: float = 0.0):
    """Per-row cross-entropy (float32, (M,)) of logits (M, C) at int64 class indices (M,);
    rows whose target is ``ignore_index`` give 0. See ``CrossEntropyRows``."""
    check_same_device("cross_entropy", logits, target)
    return CrossEntropyRows.apply(logits.contiguous(), target.contiguous(), int(ignore_index),
                                  float(label_smoothing))


def _reduce_rows(loss, keep_count, reduction: str):
    """Reduce a per-row loss as torch's cross-entropy does (mean over the kept rows)."""
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / keep_count  # 0 / 0 = nan when every row is ignored, as torch
    return loss
