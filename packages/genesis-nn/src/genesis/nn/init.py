"""``genesis.nn.init``: fill parameters in place with standard initial values.

Every function works under ``no_grad``, draws from genesis's RNG (so ``genesis.manual_seed``
makes it reproducible, or pass ``generator=``) and returns the tensor it filled.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

import genesis
from genesis import Tensor

__all__ = [
    "calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_",
    "eye_", "dirac_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
    "kaiming_normal_", "orthogonal_",
]

_LINEAR_FNS = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
               "conv_transpose2d", "conv_transpose3d")


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for a nonlinearity (the factor the std is multiplied by).

    ======================  ==============================
    nonlinearity            gain
    ======================  ==============================
    linear / conv / sigmoid 1
    tanh                    5/3
    relu                    sqrt(2)
    leaky_relu              sqrt(2 / (1 + slope^2))
    selu                    3/4
    ======================  ==============================

    Args:
        nonlinearity: the function's name (``"relu"``, ``"leaky_relu"``, ...).
        param: the negative slope for ``"leaky_relu"`` (default 0.01).

    Example::

        >>> calculate_gain("leaky_relu", 0.2)
        1.3867504905630728
    """
    if nonlinearity in _LINEAR_FNS or nonlinearity == "sigmoid":
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight: ``in * receptive`` and ``out * receptive``, where a
    weight is ``(out, in, *kernel)`` and ``receptive`` is the kernel's size."""
    if tensor.ndim < 2:
        raise ValueError(
            "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions"
        )
    receptive = 1
    for s in tensor.shape[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    """Fill with draws from ``U(a, b)``.

    Example::

        >>> w = genesis.empty(3, 5)
        >>> _ = genesis.nn.init.uniform_(w, -0.1, 0.1)
    """
    with genesis.no_grad():
        return tensor.uniform_(a, b, generator=generator)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    """Fill with draws from ``N(mean, std^2)``."""
    with genesis.no_grad():
        return tensor.normal_(mean, std, generator=generator)


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator=None) -> Tensor:
    """Fill with draws from ``N(mean, std^2)`` truncated to ``[a, b]`` (absolute bounds).

    Uses the inverse-CDF method: uniform draws between the bounds' CDF values are mapped
    back through the normal's inverse CDF (``erfinv``), so every draw is kept.

    Example::

        >>> w = genesis.nn.init.trunc_normal_(genesis.empty(1000), std=0.02, a=-0.04, b=0.04)
    """

    def norm_cdf(x: float) -> float:
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn(
            "mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
            "The distribution of values may be incorrect.",
            stacklevel=2,
        )
    with genesis.no_grad():
        lo = norm_cdf((a - mean) / std)
        hi = norm_cdf((b - mean) / std)
        tensor.uniform_(2 * lo - 1, 2 * hi - 1, generator=generator)
        tensor.erfinv_()
        tensor.mul_(std * math.sqrt(2.0))
        tensor.add_(mean)
        tensor.clamp_(min=a, max=b)
        return tensor


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill with the value ``val``."""
    with genesis.no_grad():
        return tensor.fill_(val)


def ones_(tensor: Tensor) -> Tensor:
    """Fill with ones."""
    return constant_(tensor, 1.0)


def zeros_(tensor: Tensor) -> Tensor:
    """Fill with zeros."""
    with genesis.no_grad():
        return tensor.zero_()


def eye_(tensor: Tensor) -> Tensor:
    """Fill a 2-D tensor with the identity matrix (ones on the diagonal)."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    with genesis.no_grad():
        eye = genesis.eye(tensor.shape[0], tensor.shape[1], dtype=tensor.dtype,
                          device=tensor.device)
        return tensor.copy_(eye)


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """Fill a 3/4/5-D conv weight so the convolution is the identity (per group)."""
    if tensor.ndim not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    out_per_group = tensor.shape[0] // groups
    min_dim = min(out_per_group, tensor.shape[1])
    with genesis.no_grad():
        tensor.zero_()
        centre = tuple(s // 2 for s in tensor.shape[2:])
        for g in range(groups):
            for d in range(min_dim):
                tensor[(g * out_per_group + d, d) + centre] = 1.0
    return tensor


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot uniform: ``U(-a, a)`` with ``a = gain * sqrt(6 / (fan_in + fan_out))``.

    Example::

        >>> w = genesis.nn.init.xavier_uniform_(genesis.empty(3, 5),
        ...                                     gain=genesis.nn.init.calculate_gain("relu"))
    """
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot normal: ``N(0, std^2)`` with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def _kaiming_std(tensor: Tensor, a: float, mode: str, nonlinearity: str) -> float | None:
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return None
    fan = _calculate_correct_fan(tensor, mode)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator=None) -> Tensor:
    """He uniform: ``U(-bound, bound)`` with ``bound = gain * sqrt(3 / fan_mode)``.

    Args:
        tensor: a weight of at least 2 dims.
        a: the negative slope of the following leaky ReLU (for its gain).
        mode: ``"fan_in"`` keeps the forward variance, ``"fan_out"`` the backward one.
        nonlinearity: the following function's name, for ``calculate_gain``.
        generator: the RNG to draw from (default: the device's default generator).

    Example::

        >>> w = genesis.nn.init.kaiming_uniform_(genesis.empty(3, 5), nonlinearity="relu")
    """
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    if std is None:
        return tensor
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator=None) -> Tensor:
    """He normal: ``N(0, std^2)`` with ``std = gain / sqrt(fan_mode)``; arguments as
    ``kaiming_uniform_``."""
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    if std is None:
        return tensor
    return normal_(tensor, 0.0, std, generator)


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Fill with a (semi-)orthogonal matrix: the Q of a QR factorisation of Gaussian draws.

    The tensor is seen as a matrix ``(size(0), numel / size(0))``; its rows (or columns, if
    fewer) are orthonormal, then scaled by ``gain``. The signs follow ``R``'s diagonal so the
    draw is uniform over orthogonal matrices (Saxe et al. 2013). The factorisation runs on
    the host in float64 (numpy): genesis has no QR op, and this runs once per parameter.

    Args:
        tensor: at least 2-d.
        gain: the scale applied to the orthogonal matrix.
        generator: the RNG to draw from (default: the device's default generator).

    Returns:
        ``tensor``, filled.

    Example::

        >>> w = genesis.nn.init.orthogonal_(genesis.empty(3, 5))
        >>> bool(((w @ w.T) - genesis.eye(3)).abs().max() < 1e-5)
        True
    """
    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported, got a tensor "
                         f"of shape {list(tensor.shape)}")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    with genesis.no_grad():
        draws = genesis.empty((rows, cols), dtype=genesis.float64, device=tensor.device)
        draws.normal_(0.0, 1.0, generator=generator)
        flat = np.asarray(draws.cpu().numpy(), dtype=np.float64)
        if rows < cols:
            flat = flat.T                                          # (cols, rows): tall
        q, r = np.linalg.qr(flat)                                  # q: (tall, short)
        q = q * np.sign(np.diag(r))                                # unique: diag(R) > 0
        if rows < cols:
            q = q.T                                                # (rows, cols)
        filled = genesis.tensor(np.ascontiguousarray(q) * gain, device=tensor.device)
        tensor.copy_(filled.to(tensor.dtype).reshape(tuple(tensor.shape)))
    return tensor
