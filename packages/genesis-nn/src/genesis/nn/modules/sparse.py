"""``Embedding``: a lookup table of learned vectors."""

from __future__ import annotations

import genesis
from genesis import Tensor
from genesis.nn import functional as F
from genesis.nn import init
from genesis.nn.modules.module import Module
from genesis.nn.parameter import Parameter

__all__ = ["Embedding"]


class Embedding(Module):
    """A table of ``num_embeddings`` vectors of size ``embedding_dim``, indexed by integers.

    Args:
        num_embeddings: size of the table.
        embedding_dim: size of each vector.
        padding_idx: this entry is initialised to zeros and never receives a gradient (a
            "pad" token).
        max_norm: looked-up rows with a larger norm are renormalised in place to it.
        norm_type: the p of the norm for ``max_norm``.
        _weight: use this tensor as the table instead of a fresh ``N(0, 1)`` one.
        _freeze: make the table not require gradients.

    Shape:
        input: int64 ``(*)``; output: ``(*, embedding_dim)``.

    Example::

        >>> emb = genesis.nn.Embedding(10, 3, padding_idx=0)
        >>> emb(genesis.tensor([[1, 2, 0]])).shape
        genesis.Size([1, 3, 3])
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, sparse: bool = False,
                 _weight: Tensor | None = None, _freeze: bool = False, device=None,
                 dtype=None) -> None:
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("Padding_idx must be within num_embeddings")
            if padding_idx < 0:
                padding_idx += num_embeddings
        self.padding_idx = padding_idx
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse
        if _weight is None:
            self.weight = Parameter(genesis.empty((num_embeddings, embedding_dim),
                                                  device=device, dtype=dtype),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise AssertionError("Shape of weight does not match num_embeddings and "
                                     "embedding_dim")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        self._fill_padding_idx_with_zero()

    def _fill_padding_idx_with_zero(self) -> None:
        if self.padding_idx is not None:
            with genesis.no_grad():
                self.weight[self.padding_idx].fill_(0)

    def forward(self, input: Tensor) -> Tensor:
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm,
                           self.norm_type, self.scale_grad_by_freq, self.sparse)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        return s

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True,
                        padding_idx: int | None = None, max_norm: float | None = None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        sparse: bool = False) -> Embedding:
        """An ``Embedding`` whose table is ``embeddings`` (2-D); frozen unless
        ``freeze=False``.

        Example::

            >>> emb = genesis.nn.Embedding.from_pretrained(genesis.eye(3))
            >>> emb(genesis.tensor([1])).tolist()
            [[0.0, 1.0, 0.0]]
        """
        if embeddings.ndim != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        return cls(rows, cols, _weight=embeddings, _freeze=freeze, padding_idx=padding_idx,
                   max_norm=max_norm, norm_type=norm_type,
                   scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)
