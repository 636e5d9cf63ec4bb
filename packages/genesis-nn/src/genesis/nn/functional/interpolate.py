"""``interpolate``: resize the spatial dims of a batch, one dim at a time.

Every mode torch offers here is separable: an output element along one dim is a weighted sum
of a few input elements (taps) along that dim — 1 for nearest, 2 for linear, 4 for cubic, a
window for area. The tap positions and weights depend only on the sizes, so they are worked
out on the host once (numpy, cached per geometry, following torch's source-index rules) and
applied with ``index_select`` and a broadcast multiply-add. Both are differentiable genesis
ops, so the gradient (a scatter-add of the weighted cotangent) comes from autograd on every
backend.
"""

from __future__ import annotations

import functools
import math

import numpy as np

import genesis
from genesis import Tensor

__all__ = ["interpolate", "upsample", "upsample_nearest", "upsample_bilinear"]

_MODE_DIMS = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
_NO_CORNERS = ("nearest", "nearest-exact", "area")
_CUBIC_A = -0.75  # torch's (and OpenCV's) cubic convolution constant


def _source_scale(in_size: int, out_size: int, align_corners: bool, scale, real):
    """How far apart (in input pixels) neighbouring output pixels' sources are."""
    if align_corners:
        return real((in_size - 1) / (out_size - 1)) if out_size > 1 else real(0)
    if scale is not None and scale > 0:
        return real(1.0 / scale)
    return real(in_size / out_size)


def _nearest_taps(in_size, out_size, scale, exact: bool):
    dst = np.arange(out_size, dtype=np.float32)
    if out_size == in_size:
        return [(np.arange(out_size), None)]
    step = np.float32(1.0 / scale) if scale is not None and scale > 0 else (
        np.float32(in_size) / np.float32(out_size))
    src = np.floor(((dst + np.float32(0.5)) if exact else dst) * step)
    return [(np.minimum(src.astype(np.int64), in_size - 1), None)]


def _linear_taps(in_size, out_size, scale, align_corners, real):
    dst = np.arange(out_size, dtype=real)
    step = _source_scale(in_size, out_size, align_corners, scale, real)
    src = step * dst if align_corners else np.maximum(step * (dst + real(0.5)) - real(0.5), 0)
    lo = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    lam = np.clip(src - lo, 0, 1).astype(real)
    hi = np.where(lo < in_size - 1, lo + 1, lo)
    return [(lo, real(1) - lam), (hi, lam)]


def _cubic_taps(in_size, out_size, scale, align_corners, real):
    dst = np.arange(out_size, dtype=real)
    step = _source_scale(in_size, out_size, align_corners, scale, real)
    src = step * dst if align_corners else step * (dst + real(0.5)) - real(0.5)
    base = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    t = np.clip(src - base, 0, 1).astype(real)
    a = real(_CUBIC_A)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    weights = [far(t + 1), near(t), near(1 - t), far(2 - t)]
    return [(np.clip(base - 1 + j, 0, in_size - 1), w) for j, w in enumerate(weights)]


def _area_taps(in_size, out_size, real):
    """Adaptive average pooling: output i averages input [floor(i*n/m), ceil((i+1)*n/m))."""
    i = np.arange(out_size)
    start = (i * in_size) // out_size
    end = -((-(i + 1) * in_size) // out_size)
    width = end - start
    taps = []
    for j in range(int(width.max())):
        inside = start + j < end
        taps.append((np.where(inside, start + j, end - 1),
                     np.where(inside, 1.0 / width, 0.0).astype(real)))
    return taps


@functools.lru_cache(maxsize=256)
def _taps(mode: str, in_size: int, out_size: int, scale, align_corners: bool, dtype, device):
    """``[(index tensor, weight tensor or None)]`` along one dim, on ``device``."""
    real = np.float64 if dtype is genesis.float64 else np.float32
    if mode in ("nearest", "nearest-exact"):
        taps = _nearest_taps(in_size, out_size, scale, mode == "nearest-exact")
    elif mode == "area":
        taps = _area_taps(in_size, out_size, real)
    elif mode == "bicubic":
        taps = _cubic_taps(in_size, out_size, scale, align_corners, real)
    else:
        taps = _linear_taps(in_size, out_size, scale, align_corners, real)
    return [(genesis.tensor(idx.astype(np.int64), device=device),
             None if w is None else genesis.tensor(w.astype(real), device=device).to(dtype))
            for idx, w in taps]


def _resize_dim(x: Tensor, dim: int, taps) -> Tensor:
    """Weighted sum of the taps' ``index_select`` along ``dim``."""
    out = None
    view = [1] * x.ndim
    view[dim] = -1
    for index, weight in taps:
        part = x.index_select(dim, index)                          # (..., out, ...)
        if weight is not None:
            part = part * weight.reshape(view)
        out = part if out is None else out + part
    return out


def _per_dim(value, nd: int, name: str) -> list:
    if isinstance(value, (tuple, list)):
        if len(value) != nd:
            raise ValueError(f"Input and {name} must have the same number of spatial "
                             f"dimensions, but got input with spatial dimensions of {nd} and "
                             f"{name} of {list(value)}")
        return list(value)
    return [value] * nd


def _output_sizes(input: Tensor, size, scale_factor, nd: int, recompute: bool | None):
    """``(output sizes, scales handed to the source-index rule)``, torch's rule."""
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is None and scale_factor is None:
        raise ValueError("either size or scale_factor should be defined")
    spatial = list(input.shape[2:])
    if size is not None:
        if recompute:
            raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
        sizes = [int(s) for s in _per_dim(size, nd, "output size")]
        scales = [None] * nd
    else:
        scales = [float(s) for s in _per_dim(scale_factor, nd, "scale_factor")]
        sizes = [math.floor(float(n) * s) for n, s in zip(spatial, scales)]
        if recompute:
            scales = [None] * nd
    if any(s <= 0 for s in sizes):
        raise ValueError(f"interpolate: input of spatial size {spatial} would give output "
                         f"size {sizes}; every output size must be positive")
    return sizes, scales


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """Resize a batch ``(N, C, *spatial)`` to ``size`` or by ``scale_factor`` (torch's rules).

    Args:
        input: ``(N, C, L)``, ``(N, C, H, W)`` or ``(N, C, D, H, W)``.
        size: the output spatial size (int or one per dim).
        scale_factor: multiplier of the spatial size (float or one per dim); the output size
            is ``floor(in * scale_factor)``.
        mode: ``"nearest"``, ``"nearest-exact"``, ``"linear"`` (3-d), ``"bilinear"``,
            ``"bicubic"`` (4-d), ``"trilinear"`` (5-d) or ``"area"``.
        align_corners: for the interpolating modes: map the corner pixels' centres onto each
            other (``True``) or the corners of the image (``False``, the default).
        recompute_scale_factor: derive the sampling scale from the sizes rather than use
            ``scale_factor`` as given.
        antialias: not supported (raises when ``True``).

    Returns:
        ``(N, C, *size_out)`` in ``input``'s dtype.

    Example::

        >>> x = genesis.arange(4.0).reshape(1, 1, 2, 2)
        >>> F.interpolate(x, scale_factor=2, mode="bilinear").shape
        genesis.Size([1, 1, 4, 4])
    """
    nd = input.ndim - 2
    if nd not in (1, 2, 3):
        raise ValueError(f"interpolate: expected a 3-d, 4-d or 5-d input (N, C, *spatial), "
                         f"got shape {list(input.shape)}")
    if mode not in _MODE_DIMS and mode not in _NO_CORNERS:
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported "
                                  f"(got {input.ndim}D) for the modes: nearest | linear | "
                                  f"bilinear | bicubic | trilinear | area | nearest-exact "
                                  f"(got {mode})")
    if mode in _MODE_DIMS and _MODE_DIMS[mode] != nd:
        raise ValueError(f"Got {input.ndim}D input, but {mode} mode needs "
                         f"{_MODE_DIMS[mode] + 2}D input")
    if mode in _NO_CORNERS and align_corners is not None:
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported by genesis")
    if not input.is_floating_point() and mode not in ("nearest", "nearest-exact"):
        raise TypeError(f"interpolate: mode {mode!r} needs a floating-point input, got "
                        f"{input.dtype} (the nearest modes take any dtype)")
    sizes, scales = _output_sizes(input, size, scale_factor, nd, recompute_scale_factor)
    x = input
    for k in range(nd):
        dim = 2 + k
        scale = None if mode == "area" else scales[k]  # area is adaptive pooling: sizes only
        taps = _taps(mode, x.shape[dim], sizes[k], scale, bool(align_corners), x.dtype,
                     x.device)
        x = _resize_dim(x, dim, taps)                              # (N, C, ..., out_k, ...)
    return x


def upsample(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",
             align_corners: bool | None = None) -> Tensor:
    """torch's older name for ``interpolate``.

    Args:
        input, size, scale_factor, mode, align_corners: as ``interpolate``.

    Returns:
        The resized tensor.
    """
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size=None, scale_factor=None) -> Tensor:
    """``interpolate(..., mode="nearest")``.

    Args:
        input, size, scale_factor: as ``interpolate``.

    Returns:
        The resized tensor.
    """
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Tensor, size=None, scale_factor=None) -> Tensor:
    """``interpolate(..., mode="bilinear", align_corners=True)``.

    Args:
        input, size, scale_factor: as ``interpolate``.

    Returns:
        The resized tensor.
    """
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)
