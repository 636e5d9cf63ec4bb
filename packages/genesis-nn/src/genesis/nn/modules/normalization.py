"""``LayerNorm``, ``RMSNorm`` and ``GroupNorm``."""

from __future__ import annotations

from collections.abc import Sequence

import genesis
from genesis import Tensor
from genesis.nn import functional as F
from genesis.nn import init
from genesis.nn.modules.module import Module
from genesis.nn.parameter import Parameter

__all__ = ["LayerNorm", "RMSNorm", "GroupNorm"]


def _as_shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    return tuple(normalized_shape)


class LayerNorm(Module):
    """Normalise the trailing ``normalized_shape`` dims of each sample, then apply a learned
    elementwise affine map.

    Args:
        normalized_shape: the trailing dims to normalise over (an int means one dim).
        eps: added to the variance.
        elementwise_affine: learn ``weight`` (init 1) and ``bias`` (init 0).
        bias: learn ``bias`` too (only with ``elementwise_affine``).

    Shape:
        input: ``(*, *normalized_shape)``; output: same.

    Example::

        >>> ln = genesis.nn.LayerNorm(10)
        >>> ln(genesis.randn(20, 5, 10)).shape
        genesis.Size([20, 5, 10])
    """

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(genesis.empty(self.normalized_shape, device=device,
                                                  dtype=dtype))
            if bias:
                self.bias = Parameter(genesis.empty(self.normalized_shape, device=device,
                                                    dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input: Tensor) -> Tensor:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class RMSNorm(Module):
    """Divide by the root mean square of the trailing ``normalized_shape`` dims, then scale
    by a learned ``weight`` (as in LLaMA/Qwen).

    Args:
        normalized_shape: the trailing dims to normalise over.
        eps: added to the mean square; ``None`` uses ``genesis.finfo(x.dtype).eps``.
        elementwise_affine: learn ``weight`` (init 1).

    Shape:
        input: ``(*, *normalized_shape)``; output: same.

    Example::

        >>> norm = genesis.nn.RMSNorm(64, eps=1e-6)
        >>> norm(genesis.randn(2, 7, 64)).shape
        genesis.Size([2, 7, 64])
    """

    def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None,
                 elementwise_affine: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(genesis.empty(self.normalized_shape, device=device,
                                                  dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, input: Tensor) -> Tensor:
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class GroupNorm(Module):
    """Normalise groups of channels of each sample, then apply a per-channel affine map.

    Args:
        num_groups: number of groups; must divide ``num_channels``.
        num_channels: ``C``.
        eps: added to the variance.
        affine: learn per-channel ``weight`` (init 1) and ``bias`` (init 0).

    Shape:
        input: ``(N, C, *)``; output: same.

    Example::

        >>> gn = genesis.nn.GroupNorm(3, 6)
        >>> gn(genesis.randn(20, 6, 10, 10)).shape
        genesis.Size([20, 6, 10, 10])
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        if affine:
            self.weight = Parameter(genesis.empty((num_channels,), device=device, dtype=dtype))
            self.bias = Parameter(genesis.empty((num_channels,), device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def forward(self, input: Tensor) -> Tensor:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"
