"""``linear`` and ``bilinear``: affine maps of the last dimension."""

from __future__ import annotations

import genesis
from genesis import Tensor
from genesis.ops.linalg import linear as _linear

__all__ = ["linear", "bilinear"]


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``y = x W^T + b`` over the last dimension of ``input``.

    Shape:
        output: ``(*, out_features)``.

    Args:
        input: ``(*, in_features)``.
        weight: ``(out_features, in_features)``.
        bias: ``(out_features,)`` or ``None``.

    Returns:
        A new ``(*, out_features)`` tensor.

    Example::

        >>> F.linear(genesis.ones(2, 3), genesis.ones(4, 3)).shape
        genesis.Size([2, 4])
    """
    return _linear(input, weight, bias)


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor,
             bias: Tensor | None = None) -> Tensor:
    """``y_k = x1^T W_k x2 + b_k``.

    Shape:
        output: ``(*, out)``.

    Args:
        input1: ``(*, in1)``.
        input2: ``(*, in2)``.
        weight: ``(out, in1, in2)``.
        bias: ``(out,)`` or ``None``.

    Returns:
        A new ``(*, out)`` tensor.
    """
    # (*, 1, 1, in1) @ (out, in1, in2) -> (*, out, 1, in2); then dot with x2.
    left = genesis.matmul(input1.unsqueeze(-2).unsqueeze(-2), weight)  # (*, out, 1, in2)
    out = (left.squeeze(-2) * input2.unsqueeze(-2)).sum(-1)  # (*, out)
    if bias is not None:
        out = out + bias
    return out
