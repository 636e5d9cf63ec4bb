"""layer_norm and rms_norm over the last dim, forward and backward, fused.

Forward: one pass per row (rows of up to ``softmax.SINGLE_MAX`` elements stay in registers;
longer rows stream in chunks; tiles as ``softmax.config`` picks them), writing y in x's
dtype and float32 mean/rstd of shape ``x.shape[:-1] + (1,)``, as the row's composite
defaults do.

Backward: a persistent grid; each program walks a strided set of rows computing grad_x and
accumulating its share of grad_weight/grad_bias in float32 registers, written once as a
(programs, N) partial; a first-dim sum reduces the partials into the weight's dtype. Rows
that fit in registers load the program's next row block while the current one is computed
(the weight is loaded once), so a program always has loads in flight.
"""

from __future__ import annotations

import triton
import triton.language as tl

from genesis import dtypes as D

from . import _launch
from ._elementwise_math import _m_rsqrt
from ._launch import Launcher, aligned, cdiv
from .elementwise import contiguous, fill_
from .reduction import sum as _sum
from .softmax import as_rows, config

BWD_WARPS = 0  # 0: by tile size (benchmark sweeps override these)
BWD_PROGS_PER_SM = 0  # 0: by warps (see _backward)


@triton.jit(do_not_specialize=["M"])
def _norm_fwd(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, M, N, xs, wst, bst, eps,
              RMS: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
              SINGLE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BIG: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    if BIG:
        rows = rows.to(tl.int64)
    rmask = rows < M
    cols = tl.arange(0, BN)
    xrow = x_ptr + rows[:, None] * xs
    yrow = y_ptr + rows[:, None] * N
    out_ty = y_ptr.dtype.element_ty
    if SINGLE:
        cmask = cols < N
        mask = rmask[:, None] & cmask[None, :]
        x = tl.load(xrow + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if RMS:
            rstd = _m_rsqrt(tl.sum(x * x, 1) / N + eps)
            xhat = x * rstd[:, None]
        else:
            mean = tl.sum(x, 1) / N
            xc = tl.where(mask, x - mean[:, None], 0.0)
            rstd = _m_rsqrt(tl.sum(xc * xc, 1) / N + eps)
            xhat = xc * rstd[:, None]
            tl.store(mean_ptr + rows, mean, mask=rmask)
        y = xhat
        if HAS_W:
            w = tl.load(w_ptr + cols * wst, mask=cmask, other=0.0).to(tl.float32)
            y = y * w[None, :]
        if HAS_B:
            b = tl.load(b_ptr + cols * bst, mask=cmask, other=0.0).to(tl.float32)
            y = y + b[None, :]
        tl.store(yrow + cols[None, :], y.to(out_ty), mask=mask)
        tl.store(rstd_ptr + rows, rstd, mask=rmask)
    else:
        acc = tl.zeros([BM], tl.float32)
        for c0 in range(0, N, BN):
            c = c0 + cols
            mask = rmask[:, None] & (c < N)[None, :]
            x = tl.load(xrow + c[None, :], mask=mask, other=0.0).to(tl.float32)
            if RMS:
                acc += tl.sum(x * x, 1)
            else:
                acc += tl.sum(x, 1)
        if RMS:
            mean = acc * 0.0
            rstd = _m_rsqrt(acc / N + eps)
        else:
            mean = acc / N
            var = tl.zeros([BM], tl.float32)
            for c0 in range(0, N, BN):
                c = c0 + cols
                mask = rmask[:, None] & (c < N)[None, :]
                x = tl.load(xrow + c[None, :], mask=mask, other=0.0).to(tl.float32)
                xc = tl.where(mask, x - mean[:, None], 0.0)
                var += tl.sum(xc * xc, 1)
            rstd = _m_rsqrt(var / N + eps)
            tl.store(mean_ptr + rows, mean, mask=rmask)
        for c0 in range(0, N, BN):
            c = c0 + cols
            cmask = c < N
            mask = rmask[:, None] & cmask[None, :]
            x = tl.load(xrow + c[None, :], mask=mask, other=0.0).to(tl.float32)
            y = (x - mean[:, None]) * rstd[:, None]
            if HAS_W:
                w = tl.load(w_ptr + c * wst, mask=cmask, other=0.0).to(tl.float32)
                y = y * w[None, :]
            if HAS_B:
                b = tl.load(b_ptr + c * bst, mask=cmask, other=0.0).to(tl.float32)
                y = y + b[None, :]
            tl.store(yrow + c[None, :], y.to(out_ty), mask=mask)
        tl.store(rstd_ptr + rows, rstd, mask=rmask)


@triton.jit
def _bwd_terms(x, g, w, mean_ptr, rstd_ptr, rows, rmask, mask, RMS: tl.constexpr,
               HAS_W: tl.constexpr):
    """(g, xhat, w*g, rstd) in float32 for a loaded [BM, BN] tile of x and g (w: [BN])."""
    x = x.to(tl.float32)
    g = g.to(tl.float32)
    rstd = tl.load(rstd_ptr + rows, mask=rmask, other=0.0)
    if RMS:
        xhat = x * rstd[:, None]
    else:
        mean = tl.load(mean_ptr + rows, mask=rmask, other=0.0)
        xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
    if HAS_W:
        wg = g * w[None, :]
    else:
        wg = g
    return g, xhat, wg, rstd


@triton.jit
def _load_rows(ptr, rows, stride, c, mask):
    return tl.load(ptr + rows[:, None] * stride + c[None, :], mask=mask, other=0.0)


@triton.jit
def _load_w(w_ptr, c, cmask, wst, HAS_W: tl.constexpr):
    if HAS_W:
        w = tl.load(w_ptr + c * wst, mask=cmask, other=0.0).to(tl.float32)
    else:
        w = 0.0
    return w


@triton.jit(do_not_specialize=["M"])
def _norm_bwd(g_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, gx_ptr, dw_ptr, db_ptr, M, N, gs, xs,
              wst, RMS: tl.constexpr, HAS_W: tl.constexpr, SINGLE: tl.constexpr,
              BM: tl.constexpr, BN: tl.constexpr, BIG: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BN)
    out_ty = gx_ptr.dtype.element_ty
    if SINGLE:
        cmask = cols < N
        w = _load_w(w_ptr, cols, cmask, wst, HAS_W)
        dw = tl.zeros([BN], tl.float32)
        db = tl.zeros([BN], tl.float32)
        # the next row block's x and g are loaded while this one is computed
        rows = pid * BM + tl.arange(0, BM)
        if BIG:
            rows = rows.to(tl.int64)
        nmask = (rows < M)[:, None] & cmask[None, :]
        x_next = _load_rows(x_ptr, rows, xs, cols, nmask)
        g_next = _load_rows(g_ptr, rows, gs, cols, nmask)
        for _ in range(pid * BM, M, nprog * BM):
            rmask = rows < M
            mask = nmask
            x = x_next
            g = g_next
            following = rows + nprog * BM
            nmask = (following < M)[:, None] & cmask[None, :]
            x_next = _load_rows(x_ptr, following, xs, cols, nmask)
            g_next = _load_rows(g_ptr, following, gs, cols, nmask)
            g, xhat, wg, rstd = _bwd_terms(x, g, w, mean_ptr, rstd_ptr, rows, rmask, mask,
                                           RMS, HAS_W)
            c1 = tl.sum(xhat * wg, 1) / N
            if RMS:
                gx = (wg - xhat * c1[:, None]) * rstd[:, None]
            else:
                c2 = tl.sum(wg, 1) / N
                gx = (wg - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
            tl.store(gx_ptr + rows[:, None] * N + cols[None, :], gx.to(out_ty), mask=mask)
            if HAS_W:
                dw += tl.sum(g * xhat, 0)
                if not RMS:
                    db += tl.sum(g, 0)
            rows = following
        if HAS_W:
            tl.store(dw_ptr + pid * N + cols, dw, mask=cmask)
            if not RMS:
                tl.store(db_ptr + pid * N + cols, db, mask=cmask)
    else:
        if HAS_W:  # this program's partial rows start at zero
            for c0 in range(0, N, BN):
                c = c0 + cols
                tl.store(dw_ptr + pid * N + c, tl.zeros([BN], tl.float32), mask=c < N)
                if not RMS:
                    tl.store(db_ptr + pid * N + c, tl.zeros([BN], tl.float32), mask=c < N)
        for r0 in range(pid * BM, M, nprog * BM):
            rows = r0 + tl.arange(0, BM)
            if BIG:
                rows = rows.to(tl.int64)
            rmask = rows < M
            s1 = tl.zeros([BM], tl.float32)
            s2 = tl.zeros([BM], tl.float32)
            for c0 in range(0, N, BN):
                c = c0 + cols
                cmask = c < N
                mask = rmask[:, None] & cmask[None, :]
                g, xhat, wg, rstd = _bwd_terms(
                    _load_rows(x_ptr, rows, xs, c, mask), _load_rows(g_ptr, rows, gs, c, mask),
                    _load_w(w_ptr, c, cmask, wst, HAS_W), mean_ptr, rstd_ptr, rows, rmask, mask,
                    RMS, HAS_W)
                s1 += tl.sum(xhat * wg, 1)
                s2 += tl.sum(wg, 1)
            c1 = s1 / N
            c2 = s2 / N
            for c0 in range(0, N, BN):
                c = c0 + cols
                cmask = c < N
                mask = rmask[:, None] & cmask[None, :]
                g, xhat, wg, rstd = _bwd_terms(
                    _load_rows(x_ptr, rows, xs, c, mask), _load_rows(g_ptr, rows, gs, c, mask),
                    _load_w(w_ptr, c, cmask, wst, HAS_W), mean_ptr, rstd_ptr, rows, rmask, mask,
                    RMS, HAS_W)
                if RMS:
                    gx = (wg - xhat * c1[:, None]) * rstd[:, None]
                else:
                    gx = (wg - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
                tl.store(gx_ptr + rows[:, None] * N + c[None, :], gx.to(out_ty), mask=mask)
                if HAS_W:
                    p = dw_ptr + pid * N + c
                    tl.store(p, tl.load(p, mask=cmask, other=0.0) + tl.sum(g * xhat, 0),
                             mask=cmask)
                    if not RMS:
                        q = db_ptr + pid * N + c
                        tl.store(q, tl.load(q, mask=cmask, other=0.0) + tl.sum(g, 0),
                                 mask=cmask)


_fwd = {w: Launcher(_norm_fwd, num_warps=w) for w in (1, 2, 4, 8, 16)}
_bwd = {w: Launcher(_norm_bwd, num_warps=w) for w in (1, 2, 4, 8, 16)}


def _forward(x, weight, bias, eps, rms):
    x, (m, n, xs) = as_rows(x)
    shape = x.shape
    stat_shape = tuple(shape[:-1]) + (1,)
    y = _launch.empty(shape, x.dtype, x.device)
    rstd = _launch.empty(stat_shape, D.float32, x.device)
    mean = None if rms else _launch.empty(stat_shape, D.float32, x.device)
    if m * n == 0:
        return y, mean, rstd
    single, bm, bn, warps = config(n)
    big = m * max(xs, n) >= 2**31
    has_w, has_b = weight is not None, bias is not None
    wst = weight.strides[0] if has_w else 0
    bst = bias.strides[0] if has_b else 0
    args = (x, weight, bias, y, mean, rstd, m, n, xs, wst, bst, float(eps), rms, has_w, has_b,
            single, bm, bn, big)
    key = (rms, has_w, has_b, single, bm, bn, x.dtype.name,
           weight.dtype.name if has_w else None, bias.dtype.name if has_b else None,
           aligned(x, y, rstd), aligned(*(a for a in (weight, bias, mean) if a is not None)),
           _launch.spec(n, xs, wst, bst))
    _fwd[warps].launch(key, x.device, (cdiv(m, bm),), args, big)
    return y, mean, rstd


def _backward(grad, x, weight, mean, rstd, rms):
    x, (m, n, xs) = as_rows(x)
    grad, (_, _, gs) = as_rows(grad)
    rstd = contiguous(rstd)
    if mean is not None:
        mean = contiguous(mean)
    gx = _launch.empty(x.shape, x.dtype, x.device)
    has_w = weight is not None
    if m * n == 0:
        if not has_w:
            return gx, None, None

        gw = fill_(_launch.empty((n,), weight.dtype, x.device), 0)
        gb = None if rms else fill_(_launch.empty((n,), weight.dtype, x.device), 0)
        return gx, gw, gb
    single, bm, bn, warps = config(n, 4096)
    # rows of 8k and up: 16 warps, one program per SM (fewer, larger partials); rows <= 2k
    # of a 2-byte dtype: 4 warps, 2 per SM; otherwise the tile's warps and 32 warps per SM
    # (chosen by sweeps at 16M elements, see docs/benchmarks.md)
    if bn >= 8192:
        warps, progs_per_sm = 16, 1
    elif bn <= 2048 and x.dtype.itemsize <= 2:
        warps, progs_per_sm = 4, 2
    else:
        progs_per_sm = max(1, 32 // warps)
    warps = BWD_WARPS or warps
    progs_per_sm = BWD_PROGS_PER_SM or progs_per_sm
    nprog = max(1, min(cdiv(m, bm), _launch.sm_count(x.device) * progs_per_sm))
    dw = db = None
    if has_w:
        dw = _launch.empty((nprog, n), D.float32, x.device)
        if not rms:
            db = _launch.empty((nprog, n), D.float32, x.device)
    wst = weight.strides[0] if has_w else 0
    big = m * max(xs, gs, n) >= 2**31 or nprog * n >= 2**31
    args = (grad, x, weight, mean, rstd, gx, dw, db, m, n, gs, xs, wst, rms, has_w, single,
            bm, bn, big)
    key = (rms, has_w, single, bm, bn, x.dtype.name, grad.dtype.name,
           weight.dtype.name if has_w else None,
           aligned(*(a for a in (grad, x, weight, mean, rstd, gx, dw, db) if a is not None)),
           _launch.spec(n, gs, xs, wst))
    _bwd[warps].launch(key, x.device, (nprog,), args, big)
    if not has_w:
        return gx, None, None
    gw = _sum(dw, (0,), False, weight.dtype)
    gb = None if rms else _sum(db, (0,), False, weight.dtype)
    return gx, gw, gb


# ------------------------------------------------------------------- contract functions
def layer_norm(x, weight, bias, eps):
    """Layer norm over the last dim: ``(y, mean, rstd)``; mean/rstd float32 of shape
    ``x.shape[:-1] + (1,)``."""
    return _forward(x, weight, bias, eps, False)


def layer_norm_backward(grad, x, weight, mean, rstd):
    """``(grad_x, grad_weight, grad_bias)`` of ``layer_norm`` (weight grads None without
    a weight)."""
    return _backward(grad, x, weight, mean, rstd, False)


def rms_norm(x, weight, eps):
    """RMS norm over the last dim: ``(y, rstd)``, rstd float32 of shape
    ``x.shape[:-1] + (1,)``."""
    y, _, rstd = _forward(x, weight, None, eps, True)
    return y, rstd


def rms_norm_backward(grad, x, weight, rstd):
    """``(grad_x, grad_weight)`` of ``rms_norm``."""
    gx, gw, _ = _backward(grad, x, weight, None, rstd, True)
    return gx, gw
