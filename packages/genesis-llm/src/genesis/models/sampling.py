"""Choosing the next token from logits: repetition penalty, temperature, top-k, top-p, and a
seedable draw. Every function keeps static shapes and never syncs with the host."""

from __future__ import annotations

import genesis
from genesis import Tensor

__all__ = ["apply_repetition_penalty", "warp_logits", "sample_token"]


def apply_repetition_penalty(logits: Tensor, seen: Tensor, penalty: float) -> Tensor:
    """Make tokens already in the sequence less likely (CTRL's rule, as transformers):
    a seen token's logit is divided by ``penalty`` if positive, multiplied if negative.

    Args:
        logits: ``(B, V)``.
        seen: ``(B, V)`` bool, True for tokens in the sequence so far.
        penalty: > 1 discourages repeats, 1 does nothing.
    """
    penalised = genesis.where(logits < 0, logits * penalty, logits / penalty)
    return genesis.where(seen, penalised, logits)


def warp_logits(logits: Tensor, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None) -> Tensor:
    """Sampling filters, in transformers' order: temperature, then top-k, then top-p.

    Args:
        logits: ``(B, V)`` float.
        temperature: divide the logits by it (> 0).
        top_k: keep the ``top_k`` largest logits (None or 0: all).
        top_p: keep the smallest set of most likely tokens whose probability reaches
            ``top_p`` (None or 1.0: all).

    Returns:
        ``(B, V)`` logits with the removed tokens at ``-inf``.
    """
    if temperature != 1.0:
        logits = logits / temperature
    if top_k:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (B, V)
        probs = sorted_logits.softmax(-1)
        before = probs.cumsum(-1) - probs  # probability of the strictly more likely tokens
        remove_sorted = before >= top_p  # the most likely token always stays
        remove = genesis.zeros_like(remove_sorted).scatter(-1, order, remove_sorted)
        logits = logits.masked_fill(remove, float("-inf"))
    return logits


def sample_token(logits: Tensor, generator=None) -> Tensor:
    """Draw one token per row from ``softmax(logits)`` by inverting the CDF at a uniform draw.

    Args:
        logits: ``(B, V)``.
        generator: a ``genesis.Generator`` for reproducible draws (None: the default one).

    Returns:
        ``(B,)`` int64 token ids.
    """
    probs = logits.to(genesis.float32).softmax(-1)  # (B, V)
    cdf = probs.cumsum(-1)  # (B, V)
    u = genesis.rand((logits.shape[0], 1), generator=generator, device=logits.device)
    u = u * cdf[:, -1:]  # the CDF's last value is 1 up to rounding
    index = (cdf <= u).sum(-1)  # first token whose CDF exceeds u
    return index.clamp(max=logits.shape[-1] - 1).to(genesis.int64)
