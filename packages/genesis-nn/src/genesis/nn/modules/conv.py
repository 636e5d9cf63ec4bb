"""Conv1d and Conv2d layers: parameters made in ``__init__``, initialised in
``reset_parameters`` (torch's defaults), computed by ``genesis.nn.functional.conv``."""

from __future__ import annotations

import math

import genesis
from genesis.nn import init
from genesis.nn.functional.conv import _ntuple, _pad_mode, _resolve_padding, conv1d, conv2d
from genesis.nn.modules.module import Module
from genesis.nn.parameter import Parameter

__all__ = ["Conv1d", "Conv2d"]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class _ConvNd(Module):
    """Shared construction, initialisation and repr of the N-d convolution layers."""

    _nd = 0
    _functional = None

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None) -> None:
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
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {_PADDING_MODES}, got "
                             f"{padding_mode!r}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _ntuple(kernel_size, nd, "kernel_size")
        self.stride = _ntuple(stride, nd, "stride")
        self.dilation = _ntuple(dilation, nd, "dilation")
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"invalid padding string {padding!r}, should be one of "
                                 "'valid' or 'same'")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = _ntuple(padding, nd, "padding")
        self.groups = groups
        self.padding_mode = padding_mode
        # explicit pads for the non-'zeros' modes, in F.pad order (last dim first)
        self._pads = _resolve_padding(type(self).__name__, self.padding, self.stride,
                                      self.kernel_size, self.dilation, nd)
        kw = {"device": device, "dtype": dtype}
        self.weight = Parameter(genesis.empty(
            (out_channels, in_channels // groups, *self.kernel_size), **kw))
        if bias:
            self.bias = Parameter(genesis.empty((out_channels,), **kw))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """torch's default: kaiming-uniform weight (a=sqrt(5)), bias U(-1/sqrt(fan_in), ...)."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = (self.in_channels // self.groups) * math.prod(self.kernel_size)
            if fan_in != 0:
                bound = 1.0 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        if self.padding_mode != "zeros":
            if input.ndim == self._nd + 1:  # unbatched
                x = _pad_mode(input.unsqueeze(0), tuple(self._pads), self.padding_mode)
                x = x.squeeze(0)
            else:
                x = _pad_mode(input, tuple(self._pads), self.padding_mode)
            return type(self)._functional(x, self.weight, self.bias, self.stride, 0,
                                          self.dilation, self.groups)
        return type(self)._functional(input, self.weight, self.bias, self.stride,
                                      self.padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * self._nd:
            s += f", padding={self.padding!r}"
        if self.dilation != (1,) * self._nd:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    """1-d convolution layer over (N, C_in, L) or (C_in, L).

    Args:
        in_channels: input channels (divisible by ``groups``).
        out_channels: output channels (divisible by ``groups``).
        kernel_size: an int or a 1-tuple.
        stride: an int or a 1-tuple.
        padding: an int or a 1-tuple, or ``'same'``/``'valid'``.
        dilation: an int or a 1-tuple.
        groups: channel groups.
        bias: learn an additive bias.
        padding_mode: ``'zeros'`` | ``'reflect'`` | ``'replicate'`` | ``'circular'``.

    Shape:
        (N, C_in, L) -> (N, C_out, L_out), ``L_out = (L + 2p - d*(k-1) - 1) // s + 1``.

    Example:
        >>> Conv1d(3, 8, 3, padding=1)(genesis.randn(2, 3, 16)).shape
        (2, 8, 16)
    """

    _nd = 1
    _functional = staticmethod(conv1d)


class Conv2d(_ConvNd):
    """2-d convolution layer over (N, C_in, H, W) or (C_in, H, W).

    Args:
        in_channels: input channels (divisible by ``groups``).
        out_channels: output channels (divisible by ``groups``).
        kernel_size: an int or a pair.
        stride: an int or a pair.
        padding: an int or a pair, or ``'same'``/``'valid'``.
        dilation: an int or a pair.
        groups: channel groups.
        bias: learn an additive bias.
        padding_mode: ``'zeros'`` | ``'reflect'`` | ``'replicate'`` | ``'circular'``.

    Shape:
        (N, C_in, H, W) -> (N, C_out, H_out, W_out).

    Example:
        >>> Conv2d(1, 16, 3, padding=1)(genesis.randn(4, 1, 8, 8)).shape
        (4, 16, 8, 8)
    """

    _nd = 2
    _functional = staticmethod(conv2d)
