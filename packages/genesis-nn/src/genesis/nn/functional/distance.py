"""Distances between vectors: ``cosine_similarity`` and ``pairwise_distance``."""

from __future__ import annotations

import genesis
from genesis import Tensor

__all__ = ["cosine_similarity", "pairwise_distance"]


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """``sum(x1/|x1| * x2/|x2|)`` along ``dim``, each norm clamped below at ``eps``.

    Shape:
        output: the broadcast shape without ``dim``.

    Args:
        x1: any shape broadcastable with ``x2``.
        x2: any shape broadcastable with ``x1``.
        dim: the vector dimension.
        eps: lower bound of each norm (avoids division by zero).

    Returns:
        A new tensor of the broadcast shape without ``dim``.

    Example::

        >>> F.cosine_similarity(genesis.ones(4, 8), genesis.ones(4, 8)).shape
        genesis.Size([4])
    """
    if x1.shape != x2.shape:  # norms of the broadcast vectors, as torch
        shape = genesis.broadcast_shapes(x1.shape, x2.shape)
        x1, x2 = x1.expand(shape), x2.expand(shape)
    n1 = genesis.norm(x1, 2, dim, keepdim=True).clamp(min=eps)
    n2 = genesis.norm(x2, 2, dim, keepdim=True).clamp(min=eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Tensor:
    """The ``p``-norm of ``x1 - x2 + eps`` along the last dimension.

    Args:
        x1: ``(*, D)``.
        x2: broadcastable with ``x1``.
        p: the norm's order.
        eps: added to the difference (keeps the gradient finite at zero distance).
        keepdim: keep the reduced dimension.

    Returns:
        A new tensor: the broadcast shape without the last dim (kept with ``keepdim``).

    Example::

        >>> F.pairwise_distance(genesis.zeros(2, 3), genesis.ones(2, 3)).shape
        genesis.Size([2])
    """
    return genesis.norm(x1 - x2 + eps, p, max(x1.ndim, x2.ndim) - 1, keepdim=keepdim)
