"""The causal language-modelling loss through the fused linear + cross-entropy
(``F.linear_cross_entropy``): training never materialises the ``(B, S, vocab)`` logits."""

from __future__ import annotations

import genesis
import genesis.nn.functional as F
from genesis import Tensor

__all__ = ["causal_lm_loss"]


def causal_lm_loss(hidden: Tensor, lm_head_weight: Tensor, labels: Tensor,
                   ignore_index: int = -100) -> Tensor:
    """Mean next-token cross-entropy: position ``t`` of ``hidden`` predicts ``labels[:, t+1]``.

    Args:
        hidden: ``(B, S, H)`` final hidden states.
        lm_head_weight: ``(V, H)`` output projection.
        labels: ``(B, S)`` int64 token ids; ``ignore_index`` positions do not count.
        ignore_index: label value to skip.

    Returns:
        A float32 scalar (float64 for float64 ``hidden``): the mean over the counted
        positions (as transformers').

    Example::

        >>> loss = causal_lm_loss(genesis.randn(2, 5, 8), genesis.randn(11, 8),
        ...                       genesis.randint(0, 11, (2, 5)))
    """
    if labels.shape != hidden.shape[:2]:
        raise ValueError(f"causal_lm_loss: labels {list(labels.shape)} must match the "
                         f"(batch, seq) of hidden {list(hidden.shape)}")
    # Shift the labels rather than the hidden states: hidden stays contiguous and its
    # gradient needs no slice backward; the last position predicts nothing (ignored).
    b = labels.shape[0]
    ignored = genesis.full((b, 1), ignore_index, dtype=labels.dtype, device=labels.device)
    targets = genesis.cat([labels[:, 1:], ignored], dim=1)  # (B, S)
    if hidden.dtype.itemsize >= 4:
        return F.linear_cross_entropy(hidden, lm_head_weight, targets, ignore_index=ignore_index)
    # Half-precision hidden states: the fused op computes in float32 but returns its input's
    # dtype outside autocast. Autocast at that same dtype runs the same matmuls and returns
    # the float32 loss (transformers upcasts its logits likewise), not one rounded to bf16.
    with genesis.autocast(hidden.device.type, dtype=hidden.dtype):
        return F.linear_cross_entropy(hidden, lm_head_weight, targets,
                                      ignore_index=ignore_index)
