"""Residual add + RMS norm forward in one pass: ``h = x + residual``, ``y = rms_norm(h)``.

One program per block of rows (rows up to ``softmax.SINGLE_MAX`` elements, in registers):
x and residual are read once, h and y written once, plus float32 rstd per row. The norm is
taken of h as stored (rounded to its dtype), as the row's composite does; the backward is
``norms.rms_norm_backward`` on h. For longer rows, float64 or strided operands it returns
``NotImplemented``: genesis then runs the row's composite.
"""

from __future__ import annotations

import triton
import triton.language as tl

from genesis import dtypes as D

from . import _launch
from ._elementwise_math import _m_rsqrt
from ._launch import Launcher, aligned, cdiv, is_contiguous, pdl_prologue
from .softmax import SINGLE_MAX, config


@triton.jit(do_not_specialize=["M"])
def _add_rms_fwd(x_ptr, r_ptr, w_ptr, h_ptr, y_ptr, rstd_ptr, M, N, eps,
                 HAS_W: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                 PDL: tl.constexpr):
    pdl_prologue(PDL)  # launched early (see _launch.dependent_launch): wait, then free the next
    rows = tl.program_id(0).to(tl.int64) * BM + tl.arange(0, BM)
    rmask = rows < M
    cols = tl.arange(0, BN)
    cmask = cols < N
    mask = rmask[:, None] & cmask[None, :]
    at = rows[:, None] * N + cols[None, :]
    x = tl.load(x_ptr + at, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + at, mask=mask, other=0.0).to(tl.float32)
    h = (x + r).to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + at, h, mask=mask)
    hf = h.to(tl.float32)
    rstd = _m_rsqrt(tl.sum(hf * hf, 1) / N + eps)
    y = hf * rstd[:, None]
    if HAS_W:
        y = y * tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + at, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(rstd_ptr + rows, rstd, mask=rmask)


_fwd = {w: Launcher(_add_rms_fwd, num_warps=w) for w in (1, 2, 4, 8, 16)}


def add_rms_norm(x, residual, weight, eps):
    """``(h, rms_norm(h), rstd)`` with ``h = x + residual`` over the last dim (see the
    contract)."""
    n = x.shape[-1] if x.shape else 1
    if (n > SINGLE_MAX or x.dtype is D.float64 or not is_contiguous(x)
            or not is_contiguous(residual) or (weight is not None and not is_contiguous(weight))):
        return NotImplemented  # genesis runs the row's composite
    m = _launch.numel(x.shape[:-1])
    h = _launch.empty(x.shape, x.dtype, x.device)
    y = _launch.empty(x.shape, x.dtype, x.device)
    rstd = _launch.empty(tuple(x.shape[:-1]) + (1,), D.float32, x.device)
    if m * n == 0:
        return h, y, rstd
    _, bm, bn, warps = config(n)
    has_w = weight is not None
    args = (x, residual, weight if has_w else x, h, y, rstd, m, n, float(eps), has_w, bm, bn,
            _launch.dependent_launch(x.device))
    key = (x.dtype.name, None if weight is None else weight.dtype.name, has_w, bm, bn,
           aligned(x, residual, weight, h, y, rstd), _launch.spec(n))
    _fwd[warps].launch(key, x.device, (cdiv(m, bm),), args, m * n >= 2**31)
    return h, y, rstd
