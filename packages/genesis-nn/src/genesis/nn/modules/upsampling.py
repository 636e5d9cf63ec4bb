"""Upsampling layers: the learned ``ConvTranspose1d`` / ``ConvTranspose2d`` (torch's
arguments, parameter shapes — ``weight`` is ``(C_in, C_out / groups, *kernel)`` — and
initialisation, computed by ``genesis.nn.functional.conv_transpose``) and the fixed
``Upsample`` / ``UpsamplingNearest2d`` / ``UpsamplingBilinear2d`` (computed by
``genesis.nn.functional.interpolate``)."""

from __future__ import annotations

import math

import genesis
from genesis import Tensor
from genesis.nn import init
from genesis.nn.functional.conv import _ntuple
from genesis.nn.functional.conv_transpose import conv_transpose1d, conv_transpose2d
from genesis.nn.functional.interpolate import interpolate
from genesis.nn.modules.module import Module
from genesis.nn.parameter import Parameter

__all__ = ["ConvTranspose1d", "ConvTranspose2d", "Upsample", "UpsamplingNearest2d",
           "UpsamplingBilinear2d"]


class _ConvTransposeNd(Module):
    """Shared construction, ``output_size`` handling and repr of the transposed convs."""

    _nd = 0
    _functional = None

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1,
                 padding_mode: str = "zeros", device=None, dtype=None) -> None:
        super().__init__()
        nd = self._nd
        if groups <= 0:
            raise ValueError(f"groups must be a positive integer, got {groups}")
        if in_channels % groups != 0:
            raise ValueError(f"in_channels ({in_channels}) must be divisible by groups "
                             f"({groups})")
        if out_channels % groups != 0:
            raise ValueError(f"out_channels ({out_channels}) must be divisible by groups "
                             f"({groups})")
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for '
                             f"{type(self).__name__}, got {padding_mode!r}")
        if isinstance(padding, str):
            raise ValueError(f"{type(self).__name__} does not take string padding, got "
                             f"{padding!r}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _ntuple(kernel_size, nd, "kernel_size")
        self.stride = _ntuple(stride, nd, "stride")
        self.padding = _ntuple(padding, nd, "padding")
        self.output_padding = _ntuple(output_padding, nd, "output_padding")
        self.dilation = _ntuple(dilation, nd, "dilation")
        self.groups = groups
        self.padding_mode = padding_mode
        kw = {"device": device, "dtype": dtype}
        self.weight = Parameter(genesis.empty(
            (in_channels, out_channels // groups, *self.kernel_size), **kw))
        if bias:
            self.bias = Parameter(genesis.empty((out_channels,), **kw))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """torch's default: kaiming-uniform weight (a=sqrt(5)), bias U(-1/sqrt(fan_in), ...)
        where ``fan_in`` is computed from the weight as laid out, ``(C_out/groups) * k``."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * math.prod(self.kernel_size)
            if fan_in != 0:
                bound = 1.0 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def _output_padding(self, input: Tensor, output_size) -> tuple[int, ...]:
        """``output_padding`` giving ``output_size`` (torch's rule), or the stored one."""
        if output_size is None:
            return self.output_padding
        nd = self._nd
        size = [int(s) for s in output_size]
        if len(size) == nd + 2 or (len(size) == nd + 1 and input.ndim == nd + 1):
            size = size[-nd:]
        if len(size) != nd:
            raise ValueError(f"output_size must have {nd} or {nd + 2} elements (got "
                             f"{len(size)})")
        spatial = list(input.shape[-nd:])
        lows = [(n - 1) * s - 2 * p + d * (k - 1) + 1 for n, s, p, d, k in
                zip(spatial, self.stride, self.padding, self.dilation, self.kernel_size)]
        highs = [lo + s - 1 for lo, s in zip(lows, self.stride)]
        if any(not lo <= want <= hi for lo, want, hi in zip(lows, size, highs)):
            raise ValueError(f"requested an output size of {size}, but valid sizes range from "
                             f"{lows} to {highs} (for an input of {spatial})")
        return tuple(want - lo for want, lo in zip(size, lows))

    def forward(self, input: Tensor, output_size=None) -> Tensor:
        """Apply the layer; ``output_size`` picks among the sizes a stride > 1 allows.

        Args:
            input: ``(N, C_in, *spatial)`` or unbatched ``(C_in, *spatial)``.
            output_size: optional target spatial size (or full shape).

        Returns:
            ``(N, C_out, *spatial_out)``.
        """
        output_padding = self._output_padding(input, output_size)
        return type(self)._functional(input, self.weight, self.bias, self.stride,
                                      self.padding, output_padding, self.groups,
                                      self.dilation)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * self._nd:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._nd:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self._nd:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class ConvTranspose1d(_ConvTransposeNd):
    """1-d transposed convolution layer over (N, C_in, L) or (C_in, L).

    Args:
        in_channels: input channels (divisible by ``groups``).
        out_channels: output channels (divisible by ``groups``).
        kernel_size: an int or a 1-tuple.
        stride: an int or a 1-tuple.
        padding: an int or a 1-tuple.
        output_padding: extra size added at the end of the output.
        groups: channel groups.
        bias: learn an additive bias.
        dilation: an int or a 1-tuple.
        padding_mode: only ``'zeros'`` (as torch).

    Shape:
        (N, C_in, L) -> (N, C_out, L_out), ``L_out = (L-1)*s - 2p + d*(k-1) + op + 1``.

    Example::

        >>> genesis.nn.ConvTranspose1d(3, 8, 4, stride=2)(genesis.randn(2, 3, 16)).shape
        genesis.Size([2, 8, 34])
    """

    _nd = 1
    _functional = staticmethod(conv_transpose1d)


class ConvTranspose2d(_ConvTransposeNd):
    """2-d transposed convolution layer over (N, C_in, H, W) or (C_in, H, W).

    Args:
        in_channels: input channels (divisible by ``groups``).
        out_channels: output channels (divisible by ``groups``).
        kernel_size: an int or a pair.
        stride: an int or a pair.
        padding: an int or a pair.
        output_padding: extra size added on the high side of the output.
        groups: channel groups.
        bias: learn an additive bias.
        dilation: an int or a pair.
        padding_mode: only ``'zeros'`` (as torch).

    Shape:
        (N, C_in, H, W) -> (N, C_out, H_out, W_out).

    Example::

        >>> up = genesis.nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1)
        >>> up(genesis.randn(1, 16, 8, 8)).shape
        genesis.Size([1, 8, 16, 16])
    """

    _nd = 2
    _functional = staticmethod(conv_transpose2d)


class Upsample(Module):
    """Resize ``(N, C, *spatial)`` inputs to ``size`` or by ``scale_factor``.

    Args:
        size: the output spatial size (int or one per dim).
        scale_factor: multiplier of the spatial size (float or one per dim).
        mode: as ``F.interpolate`` (default ``"nearest"``).
        align_corners: as ``F.interpolate``.
        recompute_scale_factor: as ``F.interpolate``.

    Example::

        >>> up = genesis.nn.Upsample(scale_factor=2, mode="bilinear")
        >>> up(genesis.randn(1, 3, 4, 5)).shape
        genesis.Size([1, 3, 8, 10])
    """

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest",
                 align_corners: bool | None = None,
                 recompute_scale_factor: bool | None = None) -> None:
        super().__init__()
        self.name = type(self).__name__
        self.size = size
        if isinstance(scale_factor, (tuple, list)):
            self.scale_factor = tuple(float(s) for s in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor is not None else None
        self.mode = mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input: Tensor) -> Tensor:
        """Resize ``input``; returns ``(N, C, *size_out)``."""
        return interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                           recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self) -> str:
        if self.scale_factor is not None:
            info = f"scale_factor={self.scale_factor!r}"
        else:
            info = f"size={self.size!r}"
        return f"{info}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """``Upsample(mode="nearest")`` for 4-d inputs.

    Args:
        size: the output spatial size.
        scale_factor: multiplier of the spatial size.

    Example::

        >>> genesis.nn.UpsamplingNearest2d(scale_factor=2)(genesis.randn(1, 1, 2, 2)).shape
        genesis.Size([1, 1, 4, 4])
    """

    def __init__(self, size=None, scale_factor=None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """``Upsample(mode="bilinear", align_corners=True)`` for 4-d inputs.

    Args:
        size: the output spatial size.
        scale_factor: multiplier of the spatial size.

    Example::

        >>> genesis.nn.UpsamplingBilinear2d(size=(3, 5))(genesis.randn(1, 1, 2, 2)).shape
        genesis.Size([1, 1, 3, 5])
    """

    def __init__(self, size=None, scale_factor=None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
