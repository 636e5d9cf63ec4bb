"""Activation functions: ``relu``, ``gelu``, ``silu``, ``softmax`` and friends.

Composites of core ops (their gradients come from autograd); ``softmax``/``log_softmax`` use
core's fused Functions, which call the backend's fused kernels.
"""

from __future__ import annotations

import math
import warnings

import genesis
from genesis import Tensor

__all__ = [
    "relu", "relu_", "relu6", "leaky_relu", "leaky_relu_", "elu", "elu_", "selu", "celu",
    "gelu", "silu", "mish", "sigmoid", "tanh", "hardtanh", "hardtanh_", "hardsigmoid",
    "hardswish", "logsigmoid", "softplus", "softsign", "tanhshrink", "threshold", "glu",
    "prelu", "softmax", "log_softmax", "softmin",
]

_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """``max(x, 0)`` elementwise.

    Args:
        input: any tensor.
        inplace: overwrite ``input`` with the result.

    Returns:
        A tensor of ``input``'s shape (``input`` itself when ``inplace``).

    Example::

        >>> F.relu(genesis.tensor([-1.0, 2.0])).tolist()
        [0.0, 2.0]
    """
    return input.relu_() if inplace else input.relu()


def relu_(input: Tensor) -> Tensor:
    """In-place ``relu``.

    Args:
        input: the input tensor.

    Returns:
        ``input``, changed in place.
    """
    return input.relu_()


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """``min(max(x, 0), 6)`` elementwise.

    Args:
        input: the input tensor.
        inplace: write the result into ``input``.

    Returns:
        A tensor of ``input``'s shape (``input`` itself when ``inplace``).
    """
    return hardtanh(input, 0.0, 6.0, inplace)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Tensor:
    """``x`` clamped to ``[min_val, max_val]``.

    Args:
        input: the input tensor.
        min_val: the lower bound.
        max_val: the upper bound.
        inplace: write the result into ``input``.

    Returns:
        A tensor of ``input``'s shape (``input`` itself when ``inplace``).
    """
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return input.clamp_(min_val, max_val) if inplace else input.clamp(min_val, max_val)


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """In-place ``hardtanh``.

    Args:
        input: the input tensor.
        min_val: the lower bound.
        max_val: the upper bound.

    Returns:
        ``input``, changed in place.
    """
    return hardtanh(input, min_val, max_val, inplace=True)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """``x`` where ``x > 0`` else ``negative_slope * x``.

    Args:
        input: the input tensor.
        negative_slope: the slope for negative inputs.
        inplace: write the result into ``input``.

    Returns:
        A tensor of ``input``'s shape (``input`` itself when ``inplace``).

    Example::

        >>> F.leaky_relu(genesis.tensor([-1.0, 2.0]), 0.5).tolist()
        [-0.5, 2.0]
    """
    out = genesis.where(input > 0, input, input * negative_slope)
    return input.copy_(out) if inplace else out


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    """In-place ``leaky_relu``.

    Args:
        input: the input tensor.
        negative_slope: the slope for negative inputs.

    Returns:
        ``input``, changed in place.
    """
    return leaky_relu(input, negative_slope, inplace=True)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``x`` where ``x > 0`` else ``alpha * (exp(x) - 1)``.

    Args:
        input: the input tensor.
        alpha: the scale of the negative part.
        inplace: write the result into ``input``.

    Returns:
        A tensor of ``input``'s shape (``input`` itself when ``inplace``).

    Example::

        >>> F.elu(genesis.tensor([0.0, 1.0]))
        tensor([0., 1.])
    """
    # exp of the clamped value: the unused branch must stay finite or its zero gradient
    # would become 0 * inf = nan.
    neg = input.clamp(max=0.0).expm1() * alpha
    out = genesis.where(input > 0, input, neg)
    return input.copy_(out) if inplace else out


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    """In-place ``elu``.

    Args:
        input: the input tensor.
        alpha: the scale of the negative part.

    Returns:
        ``input``, changed in place.
    """
    return elu(input, alpha, inplace=True)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``.

    Args:
        input: the input tensor.
        alpha: the scale of the negative part.
        inplace: write the result into ``input``.

    Returns:
        A tensor of ``input``'s shape (``input`` itself when ``inplace``).
    """
    neg = (input.clamp(max=0.0) / alpha).expm1() * alpha
    out = genesis.where(input > 0, input, neg)
    return input.copy_(out) if inplace else out


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """``scale * elu(x, alpha)`` with the self-normalising constants.

    Args:
        input: the input tensor.
        inplace: write the result into ``input``.

    Returns:
        A tensor of ``input``'s shape (``input`` itself when ``inplace``).
    """
    out = elu(input, _SELU_ALPHA) * _SELU_SCALE
    return input.copy_(out) if inplace else out


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit: ``x * Phi(x)``.

    Args:
        input: any floating tensor.
        approximate: ``"none"`` for the exact erf form, ``"tanh"`` for
            ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.

    Returns:
        A new tensor of ``input``'s shape.

    Example::

        >>> F.gelu(genesis.tensor([0.0]))
        tensor([0.])
    """
    if approximate == "none":
        return input * 0.5 * (1.0 + (input * _SQRT_HALF).erf())
    if approximate == "tanh":
        inner = (input + input * input * input * 0.044715) * _SQRT_2_OVER_PI
        return input * 0.5 * (1.0 + inner.tanh())
    raise ValueError(f"approximate argument must be either none or tanh, got {approximate!r}")


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * sigmoid(x)`` (also called swish).

    One declared op (``genesis.silu``): it saves only ``input`` for the backward, as torch's
    does, where ``input * input.sigmoid()`` would keep ``sigmoid(input)`` as well.

    Args:
        input: the input tensor.
        inplace: write the result into ``input``.

    Returns:
        A tensor of ``input``'s shape (``input`` itself when ``inplace``).

    Example:
        >>> h = F.silu(gate) * up
    """
    out = genesis.silu(input)
    return input.copy_(out) if inplace else out


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * tanh(softplus(x))``.

    Args:
        input: the input tensor.
        inplace: write the result into ``input``.

    Returns:
        A tensor of ``input``'s shape (``input`` itself when ``inplace``).
    """
    out = input * softplus(input).tanh()
    return input.copy_(out) if inplace else out


def sigmoid(input: Tensor) -> Tensor:
    """``1 / (1 + exp(-x))`` elementwise.

    Args:
        input: the input tensor.

    Returns:
        A new tensor of ``input``'s shape.
    """
    return input.sigmoid()


def tanh(input: Tensor) -> Tensor:
    """Hyperbolic tangent elementwise.

    Args:
        input: the input tensor.

    Returns:
        A new tensor of ``input``'s shape.
    """
    return input.tanh()


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """``clamp(x / 6 + 1/2, 0, 1)``.

    Args:
        input: the input tensor.
        inplace: write the result into ``input``.

    Returns:
        A tensor of ``input``'s shape (``input`` itself when ``inplace``).
    """
    out = (input / 6.0 + 0.5).clamp(0.0, 1.0)
    return input.copy_(out) if inplace else out


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """``x * hardsigmoid(x)``.

    Args:
        input: the input tensor.
        inplace: write the result into ``input``.

    Returns:
        A tensor of ``input``'s shape (``input`` itself when ``inplace``).
    """
    out = input * hardsigmoid(input)
    return input.copy_(out) if inplace else out


def logsigmoid(input: Tensor) -> Tensor:
    """``log(sigmoid(x))``, computed stably as ``-softplus(-x)``.

    Args:
        input: the input tensor.

    Returns:
        A new tensor of ``input``'s shape.
    """
    return -softplus(-input)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, and ``x`` itself where ``beta * x > threshold``.

    Args:
        input: any floating tensor.
        beta: sharpness.
        threshold: above ``beta * x > threshold`` the result is linear.

    Returns:
        A new tensor of ``input``'s shape.

    Example::

        >>> F.softplus(genesis.tensor([0.0]))
        tensor([0.6931])
    """
    scaled = input * beta
    # Clamp before exp so the branch `where` discards stays finite (no 0 * inf in backward).
    soft = scaled.clamp(max=threshold).exp().log1p() / beta
    return genesis.where(scaled > threshold, input, soft)


def softsign(input: Tensor) -> Tensor:
    """``x / (1 + |x|)``.

    Args:
        input: the input tensor.

    Returns:
        A new tensor of ``input``'s shape.
    """
    return input / (input.abs() + 1.0)


def tanhshrink(input: Tensor) -> Tensor:
    """``x - tanh(x)``.

    Args:
        input: the input tensor.

    Returns:
        A new tensor of ``input``'s shape.
    """
    return input - input.tanh()


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """``x`` where ``x > threshold`` else ``value``.

    Args:
        input: the input tensor.
        threshold: the value ``input`` must exceed to be kept.
        value: the replacement for the other elements.
        inplace: write the result into ``input``.

    Returns:
        A tensor of ``input``'s shape (``input`` itself when ``inplace``).
    """
    out = genesis.where(input > threshold, input, genesis.full_like(input, value))
    return input.copy_(out) if inplace else out


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """Gated linear unit: ``a * sigmoid(b)`` for the two halves ``a, b`` of ``dim``.

    Args:
        input: the input tensor.
        dim: the dim to halve (its size must be even).

    Returns:
        A new tensor with ``dim`` halved.
    """
    if input.shape[dim] % 2:
        raise RuntimeError(
            f"Halving dimension must be even, but dimension {dim} is size {input.shape[dim]}"
        )
    a, b = input.chunk(2, dim)
    return a * b.sigmoid()


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """``x`` where ``x > 0`` else ``weight * x``; ``weight`` has 1 or C (dim 1) entries.

    Args:
        input: the input tensor.
        weight: the learned slopes: one, or one per channel (dim 1).

    Returns:
        A new tensor of ``input``'s shape.
    """
    if weight.numel() != 1 and input.ndim >= 2:
        weight = weight.reshape((1, -1) + (1,) * (input.ndim - 2))
    return genesis.where(input > 0, input, input * weight)


def _legacy_softmax_dim(name: str, ndim: int) -> int:
    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. Change the call to include "
        "dim=X as an argument.",
        stacklevel=3,
    )
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
            dtype=None) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``dim``.

    Args:
        input: a floating tensor.
        dim: the dimension that sums to one.
        dtype: if given, ``input`` is cast to it first (e.g. to compute half inputs in float32).

    Returns:
        A new tensor of ``input``'s shape.

    Example::

        >>> F.softmax(genesis.tensor([0.0, 0.0]), dim=0).tolist()
        [0.5, 0.5]
    """
    if dim is None:
        dim = _legacy_softmax_dim("softmax", input.ndim)
    if dtype is not None:
        input = input.to(dtype)
    return input.softmax(dim)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
                dtype=None) -> Tensor:
    """``log(softmax(x))`` along ``dim``, computed stably in one fused op.

    Args:
        input: a floating tensor.
        dim: the dimension to normalise over.
        dtype: if given, ``input`` is cast to it first.

    Returns:
        A new tensor of ``input``'s shape.
    """
    if dim is None:
        dim = _legacy_softmax_dim("log_softmax", input.ndim)
    if dtype is not None:
        input = input.to(dtype)
    return input.log_softmax(dim)


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
            dtype=None) -> Tensor:
    """``softmax(-x)`` along ``dim``.

    Args:
        input: the input tensor.
        dim: the dim to normalise over.
        dtype: cast ``input`` to this dtype first.

    Returns:
        A new tensor of ``input``'s shape.
    """
    if dim is None:
        dim = _legacy_softmax_dim("softmin", input.ndim)
    if dtype is not None:
        input = input.to(dtype)
    return (-input).softmax(dim)
