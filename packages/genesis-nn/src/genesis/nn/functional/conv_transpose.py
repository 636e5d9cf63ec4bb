"""Transposed convolutions as an ordinary convolution of a zero-stuffed input.

``conv_transpose`` is the gradient of ``conv`` with respect to its input. Written forwards:
insert ``stride - 1`` zeros between neighbouring input elements, pad each side by
``dilation * (k - 1) - padding`` (plus ``output_padding`` after; a negative pad crops), and
run a stride-1 convolution with the kernel flipped in space and its in/out channels swapped
(per group). Everything is a differentiable genesis op (``cat``, ``reshape``, ``narrow``,
``flip`` and ``conv2d``'s im2col + matmul), so autograd gives every gradient on every
backend. conv_transpose1d is conv_transpose2d on a height-1 image.
"""

from __future__ import annotations

import genesis
from genesis import Tensor
from genesis.nn.functional.conv import (
    _autocast_args,
    _check_float,
    _conv2d_core,
    _ntuple,
    _pad_lastdims,
)

__all__ = ["conv_transpose1d", "conv_transpose2d"]


def _stuff_zeros(x: Tensor, dim: int, stride: int) -> Tensor:
    """Insert ``stride - 1`` zeros between neighbours along ``dim``: n -> (n-1)*stride + 1."""
    if stride == 1:
        return x
    n = x.shape[dim]
    cells = x.unsqueeze(dim + 1)                                   # (..., n, 1, ...)
    zeros_shape = list(cells.shape)
    zeros_shape[dim + 1] = stride - 1
    zeros = genesis.zeros(tuple(zeros_shape), dtype=x.dtype, device=x.device)
    cells = genesis.cat([cells, zeros], dim + 1)                   # (..., n, s, ...)
    merged = list(x.shape)
    merged[dim] = n * stride
    return cells.reshape(tuple(merged)).narrow(dim, 0, (n - 1) * stride + 1)


def _pad_or_crop(x: Tensor, dim: int, lo: int, hi: int) -> Tensor:
    """Pad ``dim`` with zeros by ``lo``/``hi``; a negative amount crops that side instead."""
    pads = [0] * (2 * (x.ndim - dim))
    pads[-2:] = [max(lo, 0), max(hi, 0)]
    x = _pad_lastdims(x, tuple(pads))
    start, stop = max(-lo, 0), max(-hi, 0)
    if start or stop:
        x = x.narrow(dim, start, x.shape[dim] - start - stop)
    return x


def _checked(name: str, nd: int, input, weight, bias, groups: int):
    if weight.ndim != nd + 2:
        raise ValueError(f"{name}: expected a {nd + 2}-d weight (C_in, C_out/groups, "
                         f"*kernel), got weight of size {list(weight.shape)}")
    if input.ndim not in (nd + 1, nd + 2):
        raise ValueError(f"{name}: expected {nd + 1}D (unbatched) or {nd + 2}D (batched) "
                         f"input, but got input of size: {list(input.shape)}")
    input, weight, bias = _autocast_args(input, weight, bias)
    _check_float(name, input, weight, bias)
    if groups <= 0:
        raise ValueError(f"{name}: groups must be a positive integer, got {groups}")
    in_ch = weight.shape[0]
    if in_ch % groups != 0:
        raise ValueError(f"{name}: given groups={groups}, expected weight to be divisible by "
                         f"{groups} at dimension 0, but got weight of size "
                         f"{list(weight.shape)}")
    c = input.shape[-nd - 1]
    if c != in_ch:
        raise ValueError(f"{name}: given transposed=1, weight of size {list(weight.shape)}, "
                         f"expected input{list(input.shape)} to have {in_ch} channels, but "
                         f"got {c} channels instead")
    out_ch = weight.shape[1] * groups
    if bias is not None and tuple(bias.shape) != (out_ch,):
        raise ValueError(f"{name}: given weight of size {list(weight.shape)} and "
                         f"groups={groups}, expected bias to be 1-dimensional with {out_ch} "
                         f"elements, but got bias of size {list(bias.shape)} instead")
    return input, weight, bias


def _conv_transpose2d_core(name: str, x, weight, bias, stride, padding, output_padding,
                           groups: int, dilation):
    """Batched (N, C_in, H, W) transposed convolution; arguments already pairs."""
    for what, values in (("stride", stride), ("dilation", dilation)):
        if any(v <= 0 for v in values):
            raise ValueError(f"{name}: {what} must be positive, got {values}")
    if any(p < 0 for p in padding) or any(p < 0 for p in output_padding):
        raise ValueError(f"{name}: negative padding {padding} or output_padding "
                         f"{output_padding} is not supported")
    for op, s, d in zip(output_padding, stride, dilation):
        if op >= s and op >= d:
            raise ValueError(f"{name}: output padding must be smaller than either stride or "
                             f"dilation, but got output_padding={output_padding}, "
                             f"stride={stride}, dilation={dilation}")
    in_ch, out_per_group, kh, kw = weight.shape
    out_size = [(n - 1) * s - 2 * p + d * (k - 1) + op + 1 for n, s, p, d, k, op in
                zip(x.shape[2:], stride, padding, dilation, (kh, kw), output_padding)]
    if any(n <= 0 for n in out_size):
        raise ValueError(f"{name}: the output size {out_size} of input {list(x.shape)} is "
                         "not positive (too much padding for this kernel and stride)")
    for dim, s, p, d, k, op in zip((2, 3), stride, padding, dilation, (kh, kw),
                                   output_padding):
        x = _stuff_zeros(x, dim, s)                                # (N, C, (n-1)s+1, ...)
        x = _pad_or_crop(x, dim, d * (k - 1) - p, d * (k - 1) - p + op)
    # (C_in, O/G, kh, kw) -> (O, C_in/G, kh, kw), flipped in space
    w = weight.reshape(groups, in_ch // groups, out_per_group, kh, kw).transpose(1, 2)
    w = w.reshape(groups * out_per_group, in_ch // groups, kh, kw).flip((2, 3))
    return _conv2d_core(name, x, w, bias, (1, 1), [0, 0, 0, 0], dilation, groups)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """2-d transposed convolution ("deconvolution") over (N, C_in, H, W) or (C_in, H, W).

    Args:
        input: ``(N, C_in, H, W)`` or unbatched ``(C_in, H, W)``.
        weight: ``(C_in, C_out / groups, kH, kW)``.
        bias: optional ``(C_out,)``.
        stride: int or ``(sH, sW)``.
        padding: int or ``(pH, pW)``: ``dilation * (k - 1) - padding`` zeros pad each side.
        output_padding: int or pair, extra size added on the high side of the output.
        groups: independent channel groups.
        dilation: int or ``(dH, dW)``.

    Returns:
        ``(N, C_out, H_out, W_out)``, ``H_out = (H-1)*s - 2p + d*(k-1) + output_padding + 1``.

    Example::

        >>> F.conv_transpose2d(genesis.randn(1, 4, 5, 5), genesis.randn(4, 2, 3, 3),
        ...                    stride=2).shape
        genesis.Size([1, 2, 11, 11])
    """
    input, weight, bias = _checked("conv_transpose2d", 2, input, weight, bias, int(groups))
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    out = _conv_transpose2d_core(
        "conv_transpose2d", x, weight, bias, _ntuple(stride, 2, "stride"),
        _ntuple(padding, 2, "padding"), _ntuple(output_padding, 2, "output_padding"),
        int(groups), _ntuple(dilation, 2, "dilation"))
    return out.squeeze(0) if unbatched else out


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """1-d transposed convolution over (N, C_in, L) or (C_in, L).

    Args:
        input: ``(N, C_in, L)`` or unbatched ``(C_in, L)``.
        weight: ``(C_in, C_out / groups, k)``.
        bias: optional ``(C_out,)``.
        stride: an int (or 1-tuple).
        padding: an int (or 1-tuple).
        output_padding: an int (or 1-tuple), extra size added at the end of the output.
        groups: independent channel groups.
        dilation: an int (or 1-tuple).

    Returns:
        ``(N, C_out, L_out)``, ``L_out = (L-1)*s - 2p + d*(k-1) + output_padding + 1``.

    Example::

        >>> F.conv_transpose1d(genesis.randn(2, 3, 8), genesis.randn(3, 5, 4), stride=2).shape
        genesis.Size([2, 5, 18])
    """
    input, weight, bias = _checked("conv_transpose1d", 1, input, weight, bias, int(groups))
    unbatched = input.ndim == 2
    x = input.unsqueeze(0) if unbatched else input
    (s,), (p,) = _ntuple(stride, 1, "stride"), _ntuple(padding, 1, "padding")
    (op,), (d,) = _ntuple(output_padding, 1, "output_padding"), _ntuple(dilation, 1, "dilation")
    out = _conv_transpose2d_core("conv_transpose1d", x.unsqueeze(2), weight.unsqueeze(2), bias,
                                 (1, s), (0, p), (0, op), int(groups), (1, d))
    out = out.squeeze(2)                                           # (N, C_out, L_out)
    return out.squeeze(0) if unbatched else out
