"""Dropout: zero random elements (or whole channels) while training, rescaling the rest.

Masks are drawn from genesis's RNG on the input's device, so ``genesis.manual_seed`` makes
them reproducible.
"""

from __future__ import annotations

import genesis
from genesis import Tensor

__all__ = ["dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout"]


def _check_p(p: float) -> None:
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _apply_mask(input: Tensor, mask_shape: tuple, p: float, inplace: bool) -> Tensor:
    if p == 1.0:
        out = input * 0.0  # keeps the graph (and NaNs become 0 * NaN = NaN, as in torch)
        return input.copy_(out) if inplace else out
    keep = genesis.rand(mask_shape, device=input.device) >= p  # bool, P(keep) = 1 - p
    scale = keep.to(input.dtype) * (1.0 / (1.0 - p))
    out = input * scale
    return input.copy_(out) if inplace else out


def dropout(input: Tensor, p: float = 0.5, training: bool = True,
            inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    Args:
        input: any floating tensor.
        p: drop probability.
        training: apply dropout (otherwise return ``input`` unchanged).
        inplace: write the result into ``input``.

    Returns:
        A tensor of ``input``'s shape (``input`` itself when ``inplace``).

    Example::

        >>> F.dropout(genesis.ones(4), p=0.5, training=False)
        tensor([1., 1., 1., 1.])
    """
    _check_p(p)
    if not training or p == 0.0:
        return input
    return _apply_mask(input, tuple(input.shape), p, inplace)


def _feature_dropout(input: Tensor, p: float, training: bool, inplace: bool,
                     spatial: int, name: str) -> Tensor:
    _check_p(p)
    if input.ndim not in (spatial + 1, spatial + 2):
        raise RuntimeError(
            f"{name}: Expected {spatial + 1}D or {spatial + 2}D input, but received a "
            f"{input.ndim}D input of shape {tuple(input.shape)}"
        )
    if not training or p == 0.0:
        return input
    # One draw per (sample, channel): every spatial position of a channel shares it.
    mask_shape = tuple(input.shape[: input.ndim - spatial]) + (1,) * spatial
    return _apply_mask(input, mask_shape, p, inplace)


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True,
              inplace: bool = False) -> Tensor:
    """Zero whole channels of ``(N, C, L)`` or ``(C, L)`` input with probability ``p``.

    Args:
        input: the input tensor.
        p: the probability of dropping a channel.
        training: apply dropout (otherwise return ``input`` unchanged).
        inplace: write the result into ``input``.

    Returns:
        A tensor of ``input``'s shape (``input`` itself when ``inplace``).
    """
    return _feature_dropout(input, p, training, inplace, 1, "dropout1d")


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True,
              inplace: bool = False) -> Tensor:
    """Zero whole channels of ``(N, C, H, W)`` or ``(C, H, W)`` input with probability ``p``.

    Args:
        input: the input tensor.
        p: the probability of dropping a channel.
        training: apply dropout (otherwise return ``input`` unchanged).
        inplace: write the result into ``input``.

    Returns:
        A tensor of ``input``'s shape (``input`` itself when ``inplace``).
    """
    return _feature_dropout(input, p, training, inplace, 2, "dropout2d")


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True,
              inplace: bool = False) -> Tensor:
    """Zero whole channels of ``(N, C, D, H, W)`` or ``(C, D, H, W)`` input with
    probability ``p``.

    Args:
        input: the input tensor.
        p: the probability of dropping a channel.
        training: apply dropout (otherwise return ``input`` unchanged).
        inplace: write the result into ``input``.

    Returns:
        A tensor of ``input``'s shape (``input`` itself when ``inplace``).
    """
    return _feature_dropout(input, p, training, inplace, 3, "dropout3d")


_SELU_ALPHA_PRIME = -1.0507009873554804934193349852946 * 1.6732632423543772848170429916717


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False,
                  inplace: bool = False) -> Tensor:
    """Dropout that keeps SELU's zero mean and unit variance (dropped values are set to
    SELU's negative saturation, then an affine map restores the moments).

    Args:
        input: the input tensor.
        p: the drop probability.
        training: apply dropout (otherwise return ``input`` unchanged).
        inplace: write the result into ``input``.

    Returns:
        A tensor of ``input``'s shape (``input`` itself when ``inplace``).
    """
    _check_p(p)
    if not training or p == 0.0:
        return input
    if p == 1.0:
        out = input * 0.0
        return input.copy_(out) if inplace else out
    keep = (genesis.rand(tuple(input.shape), device=input.device) >= p).to(input.dtype)
    a = ((1.0 - p) * (1.0 + p * _SELU_ALPHA_PRIME ** 2)) ** -0.5
    b = -a * _SELU_ALPHA_PRIME * p
    out = (input * keep + _SELU_ALPHA_PRIME * (1.0 - keep)) * a + b
    return input.copy_(out) if inplace else out
