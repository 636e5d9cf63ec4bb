"""``Upsample`` and the fixed-mode ``UpsamplingNearest2d`` / ``UpsamplingBilinear2d``: layers
that resize their input with ``genesis.nn.functional.interpolate``."""

from __future__ import annotations

from genesis import Tensor
from genesis.nn.functional.interpolate import interpolate
from genesis.nn.modules.module import Module

__all__ = ["Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d"]


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
