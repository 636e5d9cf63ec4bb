"""``Identity``, ``Linear`` and ``Bilinear``."""

from __future__ import annotations

import math
from typing import Any

import genesis
from genesis import Tensor
from genesis.nn import functional as F
from genesis.nn import init
from genesis.nn.modules.module import Module
from genesis.nn.parameter import Parameter

__all__ = ["Identity", "Linear", "Bilinear"]


class Identity(Module):
    """Returns its input unchanged (any constructor arguments are ignored).

    Example::

        >>> genesis.nn.Identity(54, unused="x")(genesis.ones(2)).shape
        genesis.Size([2])
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input: Tensor) -> Tensor:
        return input


class Linear(Module):
    """Affine map of the last dimension: ``y = x W^T + b``.

    Args:
        in_features: size of each input sample.
        out_features: size of each output sample.
        bias: learn an additive bias (default ``True``).
        device: where to create the parameters.
        dtype: parameter dtype (default: genesis's default float dtype).

    Shape:
        input: ``(*, in_features)``; output: ``(*, out_features)``.

    Attributes:
        weight: ``(out_features, in_features)``, initialised ``U(-k, k)``, ``k = 1/sqrt(in)``.
        bias: ``(out_features,)``, initialised ``U(-k, k)``.

    Example::

        >>> m = genesis.nn.Linear(20, 30)
        >>> m(genesis.randn(128, 20)).shape
        genesis.Size([128, 30])
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(genesis.empty((out_features, in_features), device=device,
                                              dtype=dtype))
        if bias:
            self.bias = Parameter(genesis.empty((out_features,), device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # kaiming_uniform_ with a=sqrt(5) is U(-1/sqrt(in), 1/sqrt(in)), torch's default.
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_features
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Bilinear(Module):
    """``y = x1^T A x2 + b`` for each output feature.

    Args:
        in1_features: size of each first input sample.
        in2_features: size of each second input sample.
        out_features: size of each output sample.
        bias: learn an additive bias (default ``True``).

    Shape:
        input1: ``(*, in1)``; input2: ``(*, in2)``; output: ``(*, out)``.

    Example::

        >>> m = genesis.nn.Bilinear(20, 30, 40)
        >>> m(genesis.randn(8, 20), genesis.randn(8, 30)).shape
        genesis.Size([8, 40])
    """

    def __init__(self, in1_features: int, in2_features: int, out_features: int,
                 bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        self.weight = Parameter(genesis.empty((out_features, in1_features, in2_features),
                                              device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(genesis.empty((out_features,), device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")
