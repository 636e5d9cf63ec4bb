"""Pooling layers: thin wrappers that store the options and call the functional form."""

from __future__ import annotations

from genesis.nn.functional.pooling import adaptive_avg_pool2d, avg_pool2d, max_pool2d
from genesis.nn.modules.module import Module

__all__ = ["MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d"]


class MaxPool2d(Module):
    """2-d max pooling over (N, C, H, W) or (C, H, W).

    Args:
        kernel_size: int or (kH, kW). stride: defaults to ``kernel_size``.
        padding: implicit -inf padding (at most half the kernel). dilation: window spacing.
        return_indices: also return argmax indices (flat over H*W). ceil_mode: round up.

    Shape:
        (N, C, H, W) -> (N, C, H_out, W_out),
        ``H_out = floor_or_ceil((H + 2p - d*(k-1) - 1) / s) + 1``.

    Example:
        >>> MaxPool2d(2)(genesis.randn(1, 3, 8, 8)).shape
        (1, 3, 4, 4)
    """

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def forward(self, input):
        return max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                          ceil_mode=self.ceil_mode, return_indices=self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """2-d average pooling over (N, C, H, W) or (C, H, W).

    Args:
        kernel_size: int or (kH, kW). stride: defaults to ``kernel_size``.
        padding: implicit zero padding. ceil_mode: round the output size up.
        count_include_pad: count padded zeros in the divisor (default True).
        divisor_override: a fixed divisor instead.

    Example:
        >>> AvgPool2d(2)(genesis.randn(1, 3, 8, 8)).shape
        (1, 3, 4, 4)
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override=None) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        return avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                          self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Average pooling to a fixed output size (int or (Ho, Wo); ``None`` keeps a dim).

    Example:
        >>> AdaptiveAvgPool2d((1, 1))(genesis.randn(2, 8, 5, 7)).shape
        (2, 8, 1, 1)
    """

    def __init__(self, output_size) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
