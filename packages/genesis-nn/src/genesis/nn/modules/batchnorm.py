"""``BatchNorm1d``, ``BatchNorm2d`` and ``BatchNorm3d``."""

from __future__ import annotations

import genesis
from genesis import Tensor
from genesis.nn import functional as F
from genesis.nn import init
from genesis.nn.modules.module import Module
from genesis.nn.parameter import Parameter

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d"]


class _BatchNorm(Module):
    """Shared code of the BatchNorm layers; subclasses only check the input's rank."""

    _version = 2

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = Parameter(genesis.empty((num_features,), device=device, dtype=dtype))
            self.bias = Parameter(genesis.empty((num_features,), device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean",
                                 genesis.zeros((num_features,), device=device, dtype=dtype))
            self.register_buffer("running_var",
                                 genesis.ones((num_features,), device=device, dtype=dtype))
            self.register_buffer("num_batches_tracked",
                                 genesis.zeros((), dtype=genesis.int64, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        """Running mean to 0, running variance to 1, batch count to 0."""
        if self.track_running_stats:
            with genesis.no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1)
                self.num_batches_tracked.zero_()
            self._host_batches = 0

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def _check_input_dim(self, input: Tensor) -> None:
        raise NotImplementedError

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        # momentum=None means a cumulative moving average: the k-th batch gets weight 1/k.
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with genesis.no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:
                # The count is a device tensor; the factor is a host float. Keep a host mirror
                # of the count so no step synchronises the device to read it.
                self._host_batches = getattr(self, "_host_batches", 0) + 1
                factor = 1.0 / self._host_batches
        # Batch statistics while training, or always when there are no running ones.
        use_batch_stats = self.training or (self.running_mean is None
                                            and self.running_var is None)
        track = not self.training or self.track_running_stats
        return F.batch_norm(
            input,
            self.running_mean if track else None,
            self.running_var if track else None,
            self.weight, self.bias, use_batch_stats, factor, self.eps,
        )

    def _load_from_state_dict(self, state_dict, prefix, strict, missing_keys, unexpected_keys,
                              error_msgs, assign) -> None:
        key = prefix + "num_batches_tracked"
        if self.track_running_stats and key not in state_dict:
            # Checkpoints written before the counter existed: start it at 0, as torch does.
            state_dict = dict(state_dict)
            state_dict[key] = genesis.zeros((), dtype=genesis.int64)
        super()._load_from_state_dict(state_dict, prefix, strict, missing_keys,
                                      unexpected_keys, error_msgs, assign)
        if self.track_running_stats and key in state_dict and \
                isinstance(state_dict[key], Tensor):
            self._host_batches = int(state_dict[key].item())

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of ``(N, C)`` or ``(N, C, L)`` input, per channel.

    While training, each channel is normalised with the batch's mean and (biased) variance,
    and the running statistics are updated with the *unbiased* variance:
    ``running = (1 - momentum) * running + momentum * batch``. In eval mode the running
    statistics are used.

    Args:
        num_features: ``C``.
        eps: added to the variance.
        momentum: weight of each new batch; ``None`` means a cumulative average.
        affine: learn per-channel ``weight`` (init 1) and ``bias`` (init 0).
        track_running_stats: keep running statistics (otherwise batch statistics are used in
            eval mode too).

    Shape:
        input: ``(N, C)`` or ``(N, C, L)``; output: same.

    Example::

        >>> bn = genesis.nn.BatchNorm1d(100)
        >>> bn(genesis.randn(20, 100)).shape
        genesis.Size([20, 100])
    """

    def _check_input_dim(self, input: Tensor) -> None:
        if input.ndim not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {input.ndim}D input)")


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of ``(N, C, H, W)`` input, per channel; see ``BatchNorm1d``.

    Example::

        >>> bn = genesis.nn.BatchNorm2d(16, momentum=None)
        >>> bn(genesis.randn(4, 16, 8, 8)).shape
        genesis.Size([4, 16, 8, 8])
    """

    def _check_input_dim(self, input: Tensor) -> None:
        if input.ndim != 4:
            raise ValueError(f"expected 4D input (got {input.ndim}D input)")


class BatchNorm3d(_BatchNorm):
    """Batch normalisation of ``(N, C, D, H, W)`` input, per channel; see ``BatchNorm1d``."""

    def _check_input_dim(self, input: Tensor) -> None:
        if input.ndim != 5:
            raise ValueError(f"expected 5D input (got {input.ndim}D input)")
