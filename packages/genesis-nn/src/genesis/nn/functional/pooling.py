"""2-d pooling from sliding-window views (``as_strided``) and core reductions.

Max pooling takes each window's first maximum with ``max(dim)``, whose gradient goes to
exactly that element (torch's rule, ties included). Non-overlapping windows (stride equal to
the kernel, the common case) are a reshape and permute instead of a strided view. Average
pooling sums windows of the zero-padded input and divides by a per-position divisor computed
on the host from shapes alone. Adaptive average pooling is separable: two small averaging matrices.
"""

from __future__ import annotations

import functools
import math

import numpy as np

import genesis
from genesis.nn.functional.conv import _ntuple, _pad_lastdims, _windows2d

__all__ = ["max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"]


def _pool_out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """torch's pooling output size: a last window must start inside the input or left pad."""
    span = d * (k - 1) + 1
    numer = size + 2 * p - span
    out = (-(-numer // s) if ceil_mode else numer // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool_args(name: str, x, kernel_size, stride, padding, dilation):
    if x.ndim not in (3, 4):
        raise ValueError(f"{name}: expected 3D (unbatched) or 4D (batched) input, but got "
                         f"input of size: {list(x.shape)}")
    k = _ntuple(kernel_size, 2, "kernel_size")
    s = k if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0) \
        else _ntuple(stride, 2, "stride")
    p = _ntuple(padding, 2, "padding")
    d = _ntuple(dilation, 2, "dilation")
    if min(k) <= 0 or min(s) <= 0 or min(d) <= 0:
        raise ValueError(f"{name}: kernel_size {k}, stride {s} and dilation {d} must be "
                         "positive")
    eff = (d[0] * (k[0] - 1) + 1, d[1] * (k[1] - 1) + 1)
    if min(p) < 0 or p[0] > eff[0] // 2 or p[1] > eff[1] // 2:
        raise ValueError(f"{name}: pad should be at most half of effective kernel size, but "
                         f"got pad={p} and kernel_size={k}")
    return k, s, p, d


def _padded_windows(name, x, k, s, p, d, ceil_mode, value):
    """Windows (N, C, Ho, Wo, kh, kw) of ``x`` padded with ``value`` (extra high-side padding
    for ``ceil_mode``'s partial last window)."""
    h, w = x.shape[-2:]
    ho = _pool_out_size(h, k[0], s[0], p[0], d[0], ceil_mode)
    wo = _pool_out_size(w, k[1], s[1], p[1], d[1], ceil_mode)
    if ho <= 0 or wo <= 0:
        raise ValueError(f"{name}: given input size ({x.shape[-3]}x{h}x{w}), calculated "
                         f"output size ({x.shape[-3]}x{ho}x{wo}) is too small")
    if s == k and d == (1, 1) and p == (0, 0) and not _needs_ceil_pad(h, w, ho, wo, k):
        # non-overlapping tiles: a reshape/permute, whose backward is cheap (no scatter-add)
        if ho * k[0] != h or wo * k[1] != w:
            x = x[:, :, :ho * k[0], :wo * k[1]]  # floor mode drops the ragged edge
        tiles = x.reshape(x.shape[0], x.shape[1], ho, k[0], wo, k[1])
        return tiles.permute(0, 1, 2, 4, 3, 5), ho, wo                # (N, C, Ho, Wo, kh, kw)
    need_h = (ho - 1) * s[0] + d[0] * (k[0] - 1) + 1
    need_w = (wo - 1) * s[1] + d[1] * (k[1] - 1) + 1
    pads = (p[1], max(p[1], need_w - w - p[1]), p[0], max(p[0], need_h - h - p[0]))
    xp = _pad_lastdims(x, pads, value)
    return _windows2d(xp, k, s, d)[:, :, :ho, :wo], ho, wo


def _needs_ceil_pad(h, w, ho, wo, k) -> bool:
    return ho * k[0] > h or wo * k[1] > w


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """2-d max pooling over (N, C, H, W) or (C, H, W).

    Args:
        input: (N, C, H, W) or (C, H, W), floating.
        kernel_size: int or (kH, kW).
        stride: defaults to ``kernel_size``.
        padding: implicit ``-inf`` padding on both sides, at most half the kernel.
        dilation: spacing between window elements.
        ceil_mode: round the output size up (a partial last window is kept).
        return_indices: also return the int64 argmax positions, flat over ``H*W`` of the
            unpadded input (as torch, for ``max_unpool2d``).

    Returns:
        (N, C, Ho, Wo), and the indices of the same shape when ``return_indices``.

    Example:
        >>> max_pool2d(genesis.randn(1, 1, 4, 4), 2).shape
        (1, 1, 2, 2)
    """
    k, s, p, d = _pool_args("max_pool2d", input, kernel_size, stride, padding, dilation)
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    n, c, h, w = x.shape
    win, ho, wo = _padded_windows("max_pool2d", x, k, s, p, d, ceil_mode, -math.inf)
    flat = win.reshape(n, c, ho, wo, k[0] * k[1])             # (N, C, Ho, Wo, kh*kw)
    out, arg = flat.max(dim=-1)  # first max (NaN counts as max); its gradient goes there only
    if unbatched:
        out = out.squeeze(0)
    if not return_indices:
        return out
    # window-local argmax -> flat index into the unpadded (H, W) plane
    row0 = genesis.arange(ho, device=x.device).reshape(ho, 1) * s[0] - p[0]   # (Ho, 1)
    col0 = genesis.arange(wo, device=x.device).reshape(1, wo) * s[1] - p[1]   # (1, Wo)
    row = row0 + (arg // k[1]) * d[0]
    col = col0 + (arg % k[1]) * d[1]
    idx = row * w + col
    return out, (idx.squeeze(0) if unbatched else idx)


@functools.lru_cache(maxsize=128)
def _avg_divisor(h, w, ho, wo, k, s, p, count_include_pad):
    """(Ho, Wo) divisors exactly as torch's CPU kernel counts them (a read-only numpy array)."""
    def one_dim(size, out, kk, ss, pp):
        start = np.arange(out) * ss - pp
        end = np.minimum(start + kk, size + pp)
        full = end - start                        # counts padding, not past the padded edge
        real = np.minimum(end, size) - np.maximum(start, 0)
        return full, real
    fh, rh = one_dim(h, ho, k[0], s[0], p[0])
    fw, rw = one_dim(w, wo, k[1], s[1], p[1])
    div = (np.outer(fh, fw) if count_include_pad else np.outer(rh, rw)).astype(np.float64)
    div.flags.writeable = False
    return div


@functools.lru_cache(maxsize=128)
def _const(key, make, dtype, device):
    """A device tensor built once per key from host data (shapes only, never tensor values),
    so repeated calls do not copy host data to the device again."""
    return genesis.tensor(make(*key), dtype=dtype, device=device)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """2-d average pooling over (N, C, H, W) or (C, H, W).

    Args:
        input: (N, C, H, W) or (C, H, W), floating.
        kernel_size: int or (kH, kW).
        stride: int or (sH, sW); ``kernel_size`` when None.
        padding: implicit zero padding, at most half the kernel.
        ceil_mode: round the output size up.
        count_include_pad: divide by the window size including padding (default) or only
            by the number of real input elements.
        divisor_override: divide every window by this number instead.

    Returns:
        (N, C, Ho, Wo).

    Example:
        >>> avg_pool2d(genesis.ones(1, 1, 4, 4), 2).shape
        (1, 1, 2, 2)
    """
    k, s, p, _ = _pool_args("avg_pool2d", input, kernel_size, stride, padding, 1)
    if divisor_override is not None and divisor_override == 0:
        raise ValueError("avg_pool2d: divisor_override must be non-zero")
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    h, w = x.shape[-2:]
    win, ho, wo = _padded_windows("avg_pool2d", x, k, s, p, (1, 1), ceil_mode, 0.0)
    total = win.sum(dim=(-2, -1))                             # (N, C, Ho, Wo)
    if divisor_override is not None:
        out = total / float(divisor_override)
    else:
        div = _avg_divisor(h, w, ho, wo, k, s, p, count_include_pad)
        if np.all(div == div.flat[0]):
            out = total / float(div.flat[0])
        else:
            key = (h, w, ho, wo, k, s, p, count_include_pad)
            out = total / _const(key, _avg_divisor, x.dtype, x.device)
    return out.squeeze(0) if unbatched else out


def _adaptive_matrix(size: int, out: int):
    """(out, size) averaging matrix: row i averages [floor(i*size/out), ceil((i+1)*size/out))."""
    m = np.zeros((out, size), dtype=np.float64)
    for i in range(out):
        lo = (i * size) // out
        hi = -((-(i + 1) * size) // out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


def adaptive_avg_pool2d(input, output_size):
    """Average pooling to a fixed output size, over (N, C, H, W) or (C, H, W).

    Args:
        input: (N, C, H, W) or (C, H, W), floating.
        output_size: int or (Ho, Wo); ``None`` in a slot keeps that input size.

    Returns:
        (N, C, Ho, Wo); output cell ``i`` averages input rows
        ``floor(i*H/Ho) .. ceil((i+1)*H/Ho) - 1`` (and likewise for columns).

    Example:
        >>> adaptive_avg_pool2d(genesis.randn(2, 3, 7, 5), 1).shape
        (2, 3, 1, 1)
    """
    if input.ndim not in (3, 4):
        raise ValueError("adaptive_avg_pool2d: expected 3D or 4D input, but got input of "
                         f"size: {list(input.shape)}")
    h, w = input.shape[-2:]
    if isinstance(output_size, (tuple, list)):
        if len(output_size) != 2:
            raise ValueError("adaptive_avg_pool2d: output_size must be an int or 2 values, "
                             f"got {output_size!r}")
        ho, wo = (h if output_size[0] is None else int(output_size[0]),
                  w if output_size[1] is None else int(output_size[1]))
    else:
        ho = wo = int(output_size)
    if ho <= 0 or wo <= 0:
        raise ValueError(f"adaptive_avg_pool2d: output_size must be positive, got ({ho}, {wo})")
    if h == 0 or w == 0:
        raise ValueError("adaptive_avg_pool2d: expected non-empty spatial dims, got input of "
                         f"size: {list(input.shape)}")
    if h % ho == 0 and w % wo == 0:  # regular windows: a plain average pool
        return avg_pool2d(input, (h // ho, w // wo))
    rows = _const((h, ho), _adaptive_matrix, input.dtype, input.device)    # (Ho, H)
    cols = _const((w, wo), _adaptive_matrix, input.dtype, input.device)    # (Wo, W)
    return rows @ (input @ cols.transpose(0, 1))                       # (..., Ho, Wo)
