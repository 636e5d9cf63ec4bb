"""Normalisation: ``layer_norm``, ``rms_norm``, ``group_norm``, ``batch_norm``,
``instance_norm``, ``normalize``.

``layer_norm`` and ``rms_norm`` are core's fused ops (one autograd Function each, backed by
the backend's fused kernels, which also check the shapes); ``group_norm`` and
``instance_norm`` are layer norms of a reshaped view; ``batch_norm`` is a composite that
also updates the running statistics.
"""

from __future__ import annotations

from collections.abc import Sequence

import genesis
from genesis import Tensor

__all__ = ["layer_norm", "rms_norm", "group_norm", "batch_norm", "instance_norm", "normalize"]


def _as_shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    return tuple(normalized_shape)


def layer_norm(input: Tensor, normalized_shape: int | Sequence[int],
               weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Normalise the trailing ``normalized_shape`` dims to zero mean and unit variance, then
    scale by ``weight`` and shift by ``bias``.

    Statistics are computed in at least float32 (so half inputs are accurate), and the
    result has ``input``'s dtype.

    Args:
        input: ``(*, *normalized_shape)``.
        normalized_shape: the trailing dims to normalise over.
        weight: ``normalized_shape``-shaped scale, or ``None``.
        bias: ``normalized_shape``-shaped shift, or ``None``.
        eps: added to the variance for stability.

    Returns:
        A new tensor of ``input``'s shape.

    Example::

        >>> F.layer_norm(genesis.tensor([[1.0, 3.0]]), (2,), eps=0.0).tolist()
        [[-1.0, 1.0]]
    """
    return genesis.layer_norm(input, _as_shape(normalized_shape), weight, bias, eps)


def rms_norm(input: Tensor, normalized_shape: int | Sequence[int],
             weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """Divide by the root mean square of the trailing ``normalized_shape`` dims, then scale
    by ``weight``: ``x / sqrt(mean(x^2) + eps) * weight``.

    Args:
        input: ``(*, *normalized_shape)``.
        normalized_shape: the trailing dims to normalise over.
        weight: ``normalized_shape``-shaped scale, or ``None``.
        eps: added to the mean square; ``None`` means ``genesis.finfo(input.dtype).eps``.

    Returns:
        A new tensor of ``input``'s shape.

    Example::

        >>> F.rms_norm(genesis.tensor([[3.0, 4.0]]), (2,)).shape
        genesis.Size([1, 2])
    """
    return genesis.rms_norm(input, _as_shape(normalized_shape), weight, eps)


def _channel_view(t: Tensor, ndim: int) -> Tensor:
    """A per-channel ``(C,)`` tensor viewed as ``(1, C, 1, ...)`` for an ``ndim`` input."""
    return t.reshape((1, -1) + (1,) * (ndim - 2))


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise each group of ``C / num_groups`` channels (with all spatial positions) per
    sample, then apply a per-channel affine map.

    Args:
        input: ``(N, C, *)``.
        num_groups: number of groups; must divide ``C``.
        weight: ``(C,)`` scale, or ``None``.
        bias: ``(C,)`` shift, or ``None``.
        eps: added to the variance.

    Returns:
        A new tensor of ``input``'s shape.

    Example::

        >>> F.group_norm(genesis.randn(2, 4, 3), 2).shape
        genesis.Size([2, 4, 3])
    """
    if input.ndim < 2:
        raise RuntimeError(
            f"group_norm: expected input of at least 2 dims (N, C, *), got {list(input.shape)}"
        )
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise RuntimeError(
            "Expected number of channels in input to be divisible by num_groups, but got "
            f"input of shape {list(input.shape)} and num_groups={num_groups}"
        )
    grouped = input.reshape(n, num_groups, -1)  # (N, G, C/G * spatial)
    out = layer_norm(grouped, (grouped.shape[-1],), None, None, eps).reshape(input.shape)
    if weight is not None:
        out = out * _channel_view(weight, input.ndim)
    if bias is not None:
        out = out + _channel_view(bias, input.ndim)
    return out


def instance_norm(input: Tensor, running_mean: Tensor | None = None,
                  running_var: Tensor | None = None, weight: Tensor | None = None,
                  bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each channel of each sample over its spatial positions.

    Only ``use_input_stats=True`` without running statistics is supported (the default of
    ``InstanceNorm*`` layers).

    Args:
        input: ``(N, C, *)``.
        running_mean: must be ``None`` (running statistics are not supported).
        running_var: must be ``None``.
        weight: ``(C,)`` scale, or ``None``.
        bias: ``(C,)`` shift, or ``None``.
        use_input_stats: must be True.
        momentum: accepted for torch compatibility (no running statistics are kept).
        eps: added to the variance.

    Returns:
        A new tensor of ``input``'s shape.

    Raises:
        NotImplementedError: running statistics were given or ``use_input_stats`` is False.
    """
    if not use_input_stats or running_mean is not None or running_var is not None:
        raise NotImplementedError("instance_norm: running statistics are not supported")
    n, c = input.shape[0], input.shape[1]
    return group_norm(input.reshape(1, n * c, -1), n * c, None, None, eps) \
        .reshape(input.shape) * (1 if weight is None else _channel_view(weight, input.ndim)) \
        + (0 if bias is None else _channel_view(bias, input.ndim))


def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each channel over the batch (and spatial) dims.

    When ``training``, batch statistics are used and, if given, ``running_mean`` and
    ``running_var`` are updated in place:
    ``running = (1 - momentum) * running + momentum * batch_stat``, with the *unbiased*
    batch variance (as torch). Otherwise the running statistics are used.

    Args:
        input: ``(N, C)`` or ``(N, C, *)``.
        running_mean: ``(C,)`` buffer, or ``None``.
        running_var: ``(C,)`` buffer, or ``None``.
        weight: ``(C,)`` scale, or ``None``.
        bias: ``(C,)`` shift, or ``None``.
        training: use (and record) batch statistics.
        momentum: weight of the new batch statistic in the running average.
        eps: added to the variance.

    Returns:
        A new tensor of ``input``'s shape.

    Example::

        >>> F.batch_norm(genesis.randn(8, 3), None, None, training=True).shape
        genesis.Size([8, 3])
    """
    if input.ndim < 2:
        raise ValueError(
            f"batch_norm: expected input of at least 2 dims (N, C, *), got {list(input.shape)}"
        )
    ndim = input.ndim
    # Statistics in at least float32, as torch does for half inputs.
    work = input.float() if input.dtype.itemsize < 4 else input
    if training:
        dims = (0,) + tuple(range(2, ndim))
        count = input.numel() // input.shape[1]
        if count <= 1:
            raise ValueError(
                "Expected more than 1 value per channel when training, got input size "
                f"{list(input.shape)}"
            )
        mean = work.mean(dims, keepdim=True)  # (1, C, 1, ...)
        centered = work - mean
        var = (centered * centered).mean(dims, keepdim=True)  # biased, for normalising
        if running_mean is not None or running_var is not None:
            with genesis.no_grad():
                if running_mean is not None:
                    new = mean.reshape(-1).to(running_mean.dtype)
                    running_mean.mul_(1.0 - momentum).add_(new * momentum)
                if running_var is not None:
                    unbiased = var.reshape(-1) * (count / (count - 1))
                    running_var.mul_(1.0 - momentum).add_(unbiased.to(running_var.dtype)
                                                          * momentum)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: running_mean and running_var are needed when not "
                             "training")
        mean = _channel_view(running_mean, ndim).to(work.dtype)
        var = _channel_view(running_var, ndim).to(work.dtype)
        centered = work - mean
    out = centered * (var + eps).rsqrt()
    if weight is not None:
        out = out * _channel_view(weight, ndim)
    if bias is not None:
        out = out + _channel_view(bias, ndim)
    return out.to(input.dtype)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """Divide by the ``p``-norm along ``dim``: ``x / max(||x||_p, eps)``.

    Args:
        input: the input tensor.
        p: the order of the norm.
        dim: the dim holding the vectors.
        eps: lower bound of the norm (avoids division by zero).

    Returns:
        A new tensor of ``input``'s shape.

    Example::

        >>> F.normalize(genesis.tensor([[3.0, 4.0]]), dim=1).tolist()
        [[0.6000000238418579, 0.800000011920929]]
    """
    denom = genesis.norm(input, p, dim, keepdim=True).clamp(min=eps)
    return input / denom
