"""Lookups by integer index: ``embedding`` and ``one_hot``."""

from __future__ import annotations

import genesis
from genesis import Tensor

__all__ = ["embedding", "one_hot"]


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of ``weight`` picked by the integer indices in ``input``.

    Shape:
        output: ``(*input.shape, embedding_dim)``.

    Args:
        input: int64 indices of any shape.
        weight: ``(num_embeddings, embedding_dim)``.
        padding_idx: this row gets no gradient (its output is still ``weight[padding_idx]``).
        max_norm: rows looked up are first renormalised in place to at most this norm.
        norm_type: the p of the norm for ``max_norm``.
        scale_grad_by_freq: must be False (not supported).
        sparse: must be False (sparse gradients are not supported).

    Returns:
        A new ``(*input.shape, embedding_dim)`` tensor.

    Example::

        >>> F.embedding(genesis.tensor([[0, 2]]), genesis.randn(3, 4)).shape
        genesis.Size([1, 2, 4])
    """
    if scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding: scale_grad_by_freq and sparse are not supported")
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-D, got shape {list(weight.shape)}")
    if padding_idx is not None:
        num = weight.shape[0]
        if not -num <= padding_idx < num:
            raise ValueError("Padding_idx must be within num_embeddings")
        if padding_idx < 0:
            padding_idx += num
    flat = input.reshape(-1)  # (K,)
    if max_norm is not None:
        _renorm_rows_(weight, flat, max_norm, norm_type)
    out = weight.index_select(0, flat)  # (K, D)
    if padding_idx is not None:
        # Same values, but the padding positions' gradient is cut: the backward of a
        # detached branch is zero, so weight[padding_idx] never learns (torch semantics).
        keep = (flat != padding_idx).unsqueeze(-1)  # (K, 1)
        out = genesis.where(keep, out, out.detach())
    return out.reshape(tuple(input.shape) + (weight.shape[1],))


def _renorm_rows_(weight: Tensor, idx: Tensor, max_norm: float, norm_type: float) -> None:
    """Scale the rows ``weight[idx]`` in place so each has norm at most ``max_norm``."""
    with genesis.no_grad():
        rows = weight.index_select(0, idx)  # (K, D)
        norms = genesis.norm(rows, norm_type, -1, keepdim=True)  # (K, 1)
        scale = (max_norm / (norms + 1e-7)).clamp(max=1.0)
        weight.index_put_((idx,), rows * scale)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot encoding: ``out[..., c] = 1`` where ``tensor[...] == c``.

    Shape:
        output: ``(*tensor.shape, num_classes)``.

    Args:
        tensor: int64 class indices of any shape.
        num_classes: number of classes; ``-1`` means ``tensor.max() + 1`` (reads the value
            back to the host). Core's op; re-exported here where torch has it.

    Returns:
        An int64 tensor with a new last dim of ``num_classes``.

    Example::

        >>> F.one_hot(genesis.tensor([0, 2]), 3)
        tensor([[1, 0, 0],
                [0, 0, 1]])
    """
    return genesis.one_hot(tensor, num_classes)
