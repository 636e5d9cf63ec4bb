"""``CosineSimilarity`` and ``PairwiseDistance``."""

from __future__ import annotations

from genesis import Tensor
from genesis.nn import functional as F
from genesis.nn.modules.module import Module

__all__ = ["CosineSimilarity", "PairwiseDistance"]


class CosineSimilarity(Module):
    """Cosine similarity of ``x1`` and ``x2`` along ``dim``; see
    ``genesis.nn.functional.cosine_similarity``.

    Example::

        >>> cos = genesis.nn.CosineSimilarity(dim=1)
        >>> cos(genesis.randn(4, 8), genesis.randn(4, 8)).shape
        genesis.Size([4])
    """

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """``p``-norm distance of ``x1`` and ``x2`` along the last dim; see
    ``genesis.nn.functional.pairwise_distance``.

    Example::

        >>> genesis.nn.PairwiseDistance()(genesis.zeros(4, 3), genesis.ones(4, 3)).shape
        genesis.Size([4])
    """

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm = p
        self.eps = eps
        self.keepdim = keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)
