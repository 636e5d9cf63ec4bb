"""Convolutions as im2col + one matmul, written with core ops so autograd gives the gradients.

The input is padded, cut into sliding windows with ``as_strided`` (a strided view: no copy),
and the windows are laid out as patch rows ``(N*Ho*Wo, C*kh*kw)`` (the im2col copy). Without
groups one fused ``linear`` (matmul + bias) gives ``(N*Ho*Wo, C_out)``, made contiguous as
``(N, C_out, Ho, Wo)``. With groups the columns are ``(N, G, C/G*kh*kw, Ho*Wo)`` and a batched
matmul with the weight ``(G, O/G, C/G*kh*kw)`` produces ``(N, G, O/G, Ho*Wo)``, already the
memory order of the result. conv1d is conv2d on a height-1 image.
"""

from __future__ import annotations

import functools

import numpy as np

import genesis
from genesis.ops.linalg import linear as _linear

__all__ = ["conv1d", "conv2d"]


def _ntuple(value, n: int, name: str) -> tuple[int, ...]:
    """``3 -> (3, 3)``; a tuple/list of length ``n`` is checked and returned as ints."""
    if isinstance(value, (tuple, list)):
        if len(value) != n:
            raise ValueError(f"{name} must be an int or a tuple of {n} ints, got {value!r}")
        return tuple(int(v) for v in value)
    return (int(value),) * n


def _pad_lastdims(x, pads: tuple[int, ...], value: float = 0.0):
    """Pad the last ``len(pads)//2`` dims of ``x`` with ``value``.

    ``pads`` follows ``torch.nn.functional.pad``: ``(last_lo, last_hi, prev_lo, prev_hi, ...)``.
    Built from ``cat`` with constant blocks so it is differentiable on every backend.
    """
    for i in range(len(pads) // 2):
        lo, hi = pads[2 * i], pads[2 * i + 1]
        if lo == 0 and hi == 0:
            continue
        dim = x.ndim - 1 - i
        parts = []
        for width in (lo, hi):
            shape = list(x.shape)
            shape[dim] = width
            parts.append(genesis.full(tuple(shape), value, dtype=x.dtype, device=x.device)
                         if width > 0 else None)
        pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
        x = genesis.cat(pieces, dim=dim)
    return x


def _pad_index(size: int, lo: int, hi: int, mode: str):
    """Source positions of a length ``size + lo + hi`` dim padded in ``mode`` (numpy int64)."""
    pos = np.arange(-lo, size + hi)
    if mode == "circular":
        return np.mod(pos, size)
    if mode == "replicate":
        return np.clip(pos, 0, size - 1)
    if mode == "reflect":  # mirror without repeating the edge: -1 -> 1, size -> size - 2
        period = 2 * (size - 1)
        pos = np.mod(pos, period) if period > 0 else np.zeros_like(pos)
        return np.where(pos >= size, period - pos, pos)
    raise ValueError(f"padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', "
                     f"got {mode!r}")


@functools.lru_cache(maxsize=128)
def _pad_index_tensor(size: int, lo: int, hi: int, mode: str, device):
    """``_pad_index`` as an int64 tensor on ``device``, built once per geometry."""
    return genesis.tensor(_pad_index(size, lo, hi, mode), device=device)


def _pad_mode(x, pads: tuple[int, ...], mode: str):
    """Pad the last dims in ``mode`` ('reflect', 'replicate', 'circular') by gathering source
    rows with ``index_select`` (differentiable: repeated rows accumulate their gradients)."""
    for i in range(len(pads) // 2):
        lo, hi = pads[2 * i], pads[2 * i + 1]
        if lo == 0 and hi == 0:
            continue
        dim = x.ndim - 1 - i
        size = x.shape[dim]
        if mode == "reflect" and (lo >= size or hi >= size):
            raise ValueError(f"reflect padding ({lo}, {hi}) must be smaller than the padded "
                             f"dimension of size {size} (input of size {list(x.shape)})")
        if mode == "circular" and (lo > size or hi > size):
            raise ValueError(f"circular padding ({lo}, {hi}) can be at most the padded "
                             f"dimension of size {size} (input of size {list(x.shape)})")
        idx = _pad_index_tensor(size, lo, hi, mode, x.device)
        x = x.index_select(dim, idx)
    return x


def _windows2d(x, kernel: tuple[int, int], stride: tuple[int, int],
               dilation: tuple[int, int]):
    """Sliding windows of a (N, C, H, W) tensor as one strided view: (N, C, Ho, Wo, kh, kw).

    Window (i, j) starts at row ``i*sH``, column ``j*sW``; its elements are ``dH``/``dW``
    apart. ``as_strided``'s backward adds overlapping windows' gradients back together.
    """
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    n, c, h, w = x.shape
    ho = (h - dh * (kh - 1) - 1) // sh + 1
    wo = (w - dw * (kw - 1) - 1) // sw + 1
    st_n, st_c, st_h, st_w = x.stride()
    return x.as_strided((n, c, ho, wo, kh, kw),
                        (st_n, st_c, st_h * sh, st_w * sw, st_h * dh, st_w * dw))


def _same_padding(kernel: tuple[int, ...], dilation: tuple[int, ...]) -> list[int]:
    """torch's 'same' padding: total ``d*(k-1)``, the extra odd element on the high side.

    Returned in ``_pad_lastdims`` order (last dim first)."""
    pads: list[int] = []
    for k, d in zip(reversed(kernel), reversed(dilation)):
        total = d * (k - 1)
        pads += [total // 2, total - total // 2]
    return pads


def _autocast_args(x, weight, bias):
    """Under ``genesis.autocast`` convolutions are matmul-like: every operand goes to the low
    dtype (as torch's autocast does), so a low-precision activation may meet float32 weights."""
    dev = x.device.type
    if not genesis.is_autocast_enabled(dev) or not x.is_floating_point():
        return x, weight, bias
    low = genesis.get_autocast_dtype(dev)
    cast = [t if t is None or t.dtype is low else t.to(low) for t in (x, weight, bias)]
    return cast[0], cast[1], cast[2]


def _check_float(name: str, x, weight, bias) -> None:
    if x.dtype != weight.dtype:
        raise TypeError(f"{name}: input dtype {x.dtype} and weight dtype {weight.dtype} "
                        "should be the same")
    if bias is not None and bias.dtype != weight.dtype:
        raise TypeError(f"{name}: bias dtype {bias.dtype} and weight dtype {weight.dtype} "
                        "should be the same")
    if x.device != weight.device or (bias is not None and bias.device != weight.device):
        where = f"input on {x.device}, weight on {weight.device}"
        if bias is not None:
            where += f", bias on {bias.device}"
        raise RuntimeError(f"{name}: expected all tensors on one device, got {where}")


def _check_shapes(name: str, x, weight, bias, groups: int) -> None:
    """Channel/group/bias agreement, reported with the caller's own shapes."""
    out_ch, c_per_group = weight.shape[0], weight.shape[1]
    c = x.shape[-weight.ndim + 1]
    if groups <= 0:
        raise ValueError(f"{name}: groups must be a positive integer, got {groups}")
    if out_ch % groups != 0:
        raise ValueError(f"{name}: given groups={groups}, expected weight to be divisible by "
                         f"{groups} at dimension 0, but got weight of size {list(weight.shape)}")
    if c != c_per_group * groups:
        raise ValueError(
            f"{name}: given groups={groups}, weight of size {list(weight.shape)}, expected "
            f"input{list(x.shape)} to have {c_per_group * groups} channels, but got {c} "
            "channels instead")
    if bias is not None and tuple(bias.shape) != (out_ch,):
        raise ValueError(f"{name}: given weight of size {list(weight.shape)}, expected bias to "
                         f"be 1-dimensional with {out_ch} elements, but got bias of size "
                         f"{list(bias.shape)} instead")


def _conv2d_core(name: str, x, weight, bias, stride, pads, dilation, groups: int):
    """Batched 4-d convolution; ``pads`` in ``_pad_lastdims`` order (left, right, top, bottom)."""
    n, c, h, w = x.shape
    out_ch, c_per_group, kh, kw = weight.shape
    hp, wp = h + pads[2] + pads[3], w + pads[0] + pads[1]
    span_h, span_w = dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1
    if span_h > hp or span_w > wp:
        raise ValueError(
            f"{name}: calculated padded input size per channel: ({hp} x {wp}). Kernel size "
            f"(dilated): ({span_h} x {span_w}). Kernel size can't be greater than actual "
            "input size")
    if any(p < 0 for p in pads):
        raise ValueError(f"{name}: negative padding is not supported, got {pads}")
    ho, wo = (hp - span_h) // stride[0] + 1, (wp - span_w) // stride[1] + 1

    x = _pad_lastdims(x, tuple(pads))
    win = _windows2d(x, (kh, kw), stride, dilation)             # (N, C, Ho, Wo, kh, kw)
    k = c_per_group * kh * kw
    if groups == 1:
        # rows = patches: one fused linear (matmul + bias), whose weight gradient is a single
        # 2-d matmul over all N*Ho*Wo patches
        cols = win.permute(0, 2, 3, 1, 4, 5).reshape(n * ho * wo, k)    # (N*L, K): im2col copy
        out = _linear(cols, weight.reshape(out_ch, k), bias)            # (N*L, O)
        return out.reshape(n, ho, wo, out_ch).permute(0, 3, 1, 2).contiguous()  # (N, O, Ho, Wo)
    cols = win.reshape(n, groups, c_per_group, ho, wo, kh, kw)   # a view: C splits cleanly
    cols = cols.permute(0, 1, 2, 5, 6, 3, 4)                     # (N, G, Cg, kh, kw, Ho, Wo)
    cols = cols.reshape(n, groups, k, ho * wo)                   # (N, G, K, L): im2col copy
    wmat = weight.reshape(groups, out_ch // groups, k)           # (G, O/G, K)
    out = wmat @ cols                                            # (N, G, O/G, L)
    out = out.reshape(n, out_ch, ho, wo)                         # (N, O, Ho, Wo)
    if bias is not None:
        out = out + bias.reshape(1, out_ch, 1, 1)
    return out


def _resolve_padding(name: str, padding, stride, kernel, dilation, nd: int) -> list[int]:
    """Padding in ``_pad_lastdims`` order for an ``nd``-d conv (int, tuple, 'same', 'valid')."""
    if isinstance(padding, str):
        if padding == "valid":
            return [0] * (2 * nd)
        if padding == "same":
            if any(s != 1 for s in stride):
                raise ValueError(f"{name}: padding='same' is not supported for strided "
                                 "convolutions")
            return _same_padding(kernel, dilation)
        raise ValueError(f"{name}: invalid padding string {padding!r}, should be one of "
                         "'valid' or 'same'")
    pad = _ntuple(padding, nd, "padding")
    pads: list[int] = []
    for p in reversed(pad):
        pads += [p, p]
    return pads


def _checked_args(name: str, nd: int, weight_dims: str, input, weight, bias, groups):
    """``(input, weight, bias)`` of an ``nd``-d conv, checked (ranks, dtypes, devices,
    shapes) and cast for autocast; ``weight_dims`` names the weight's dims in messages."""
    if weight.ndim != nd + 2:
        raise ValueError(f"{name}: expected a {nd + 2}-d weight {weight_dims}, got weight of "
                         f"size {list(weight.shape)}")
    if input.ndim not in (nd + 1, nd + 2):
        raise ValueError(f"{name}: expected {nd + 1}D (unbatched) or {nd + 2}D (batched) "
                         f"input, but got input of size: {list(input.shape)}")
    input, weight, bias = _autocast_args(input, weight, bias)
    _check_float(name, input, weight, bias)
    _check_shapes(name, input, weight, bias, int(groups))
    return input, weight, bias


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """2-d convolution over an input of shape (N, C, H, W) or (C, H, W).

    Args:
        input: (N, C_in, H, W) or unbatched (C_in, H, W).
        weight: (C_out, C_in / groups, kH, kW).
        bias: optional (C_out,).
        stride: int or (sH, sW).
        dilation: int or (dH, dW).
        padding: int, (pH, pW), ``'valid'`` (none) or ``'same'`` (output size = input size,
            stride 1 only; an odd total puts the extra element after, as torch does).
        groups: split input and output channels into this many independent groups.

    Returns:
        (N, C_out, H_out, W_out), ``H_out = (H + 2p - d*(k-1) - 1) // s + 1``.

    Example:
        >>> y = conv2d(genesis.randn(2, 3, 8, 8), genesis.randn(4, 3, 3, 3), padding=1)
        >>> y.shape
        (2, 4, 8, 8)
    """
    input, weight, bias = _checked_args("conv2d", 2, "(C_out, C_in/groups, kH, kW)", input,
                                        weight, bias, groups)
    stride = _ntuple(stride, 2, "stride")
    dilation = _ntuple(dilation, 2, "dilation")
    if any(s <= 0 for s in stride) or any(d <= 0 for d in dilation):
        raise ValueError(f"conv2d: stride {stride} and dilation {dilation} must be positive")
    pads = _resolve_padding("conv2d", padding, stride, tuple(weight.shape[2:]), dilation, 2)
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    out = _conv2d_core("conv2d", x, weight, bias, stride, pads, dilation, int(groups))
    return out.squeeze(0) if unbatched else out


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """1-d convolution over an input of shape (N, C, L) or (C, L).

    Args:
        input: (N, C_in, L) or unbatched (C_in, L).
        weight: (C_out, C_in / groups, k).
        bias: optional (C_out,).
        stride: an int (or 1-tuple).
        padding: an int (or 1-tuple), or ``'valid'``/``'same'``.
        dilation: an int (or 1-tuple).
        groups: number of channel groups.

    Returns:
        (N, C_out, L_out), ``L_out = (L + 2p - d*(k-1) - 1) // s + 1``.

    Example:
        >>> conv1d(genesis.randn(2, 3, 10), genesis.randn(5, 3, 3)).shape
        (2, 5, 8)
    """
    input, weight, bias = _checked_args("conv1d", 1, "(C_out, C_in/groups, k)", input, weight,
                                        bias, groups)
    (s,) = _ntuple(stride, 1, "stride")
    (d,) = _ntuple(dilation, 1, "dilation")
    if s <= 0 or d <= 0:
        raise ValueError(f"conv1d: stride {s} and dilation {d} must be positive")
    pads = _resolve_padding("conv1d", padding, (s,), tuple(weight.shape[2:]), (d,), 1)
    unbatched = input.ndim == 2
    x = input.unsqueeze(0) if unbatched else input
    out = _conv2d_core("conv1d", x.unsqueeze(2), weight.unsqueeze(2), bias, (1, s),
                       pads + [0, 0], (1, d), int(groups))  # (N, C_out, 1, L_out)
    out = out.squeeze(2)
    return out.squeeze(0) if unbatched else out
