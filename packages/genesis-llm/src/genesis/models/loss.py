"""The causal language-modelling loss, in one place so a fused linear + cross-entropy kernel
can replace its body without touching the models."""

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
        A float32 scalar: the mean over the counted positions (as transformers').

    Example::

        >>> loss = causal_lm_loss(genesis.randn(2, 5, 8), genesis.randn(11, 8),
        ...                       genesis.randint(0, 11, (2, 5)))
    """
    if labels.shape != hidden.shape[:2]:
        raise ValueError(f"causal_lm_loss: labels {list(labels.shape)} must match the "
                         f"(batch, seq) of hidden {list(hidden.shape)}")
    logits = F.linear(hidden[:, :-1], lm_head_weight).to(genesis.float32)  # (B, S-1, V)
    targets = labels[:, 1:]  # (B, S-1)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=ignore_index)
