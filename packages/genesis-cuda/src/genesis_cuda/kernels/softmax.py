"""softmax / log_softmax forward and backward: one fused pass per row.

Rows of up to ``SINGLE_MAX`` elements live in registers (one read, one write); longer rows
stream through an online max/sum pass and a write pass. Short rows are packed several to a
program. Math is float32 (float64 for float64 inputs); the result has the input's dtype.
A reduction over a dim other than the last goes through a copy with that dim moved last.
"""

from __future__ import annotations

import triton
import triton.language as tl

from genesis import dtypes as D

from . import _launch
from ._elementwise_math import _m_exp
from ._launch import Launcher, View, aligned, cdiv, collapse, next_pow2
from .elementwise import contiguous, copy_

SINGLE_MAX = 16384


@triton.jit(do_not_specialize=["M"])
def _softmax_fwd(x_ptr, y_ptr, M, N, xs, ys, LOG: tl.constexpr, CT: tl.constexpr,
                 SINGLE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BIG: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    if BIG:
        rows = rows.to(tl.int64)
    rmask = rows < M
    cols = tl.arange(0, BN)
    xrow = x_ptr + rows[:, None] * xs
    yrow = y_ptr + rows[:, None] * ys
    if SINGLE:
        mask = rmask[:, None] & (cols < N)[None, :]
        x = tl.load(xrow + cols[None, :], mask=mask, other=float("-inf")).to(CT)
        m = tl.max(x, 1)
        z = x - m[:, None]
        e = tl.exp(z)
        s = tl.sum(e, 1)
        if LOG:
            y = z - tl.log(s)[:, None]
        else:
            y = e * (1.0 / s)[:, None]
        tl.store(yrow + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        m = tl.full([BM], float("-inf"), CT)
        s = tl.zeros([BM], CT)
        for c0 in range(0, N, BN):
            c = c0 + cols
            mask = rmask[:, None] & (c < N)[None, :]
            x = tl.load(xrow + c[None, :], mask=mask, other=float("-inf")).to(CT)
            m_new = tl.maximum(m, tl.max(x, 1))
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new[:, None]), 1)
            m = m_new
        inv = 1.0 / s
        logs = tl.log(s)
        for c0 in range(0, N, BN):
            c = c0 + cols
            mask = rmask[:, None] & (c < N)[None, :]
            x = tl.load(xrow + c[None, :], mask=mask, other=0.0).to(CT)
            z = x - m[:, None]
            if LOG:
                y = z - logs[:, None]
            else:
                y = tl.exp(z) * inv[:, None]
            tl.store(yrow + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["M"])
def _softmax_bwd(y_ptr, g_ptr, o_ptr, M, N, ys_, gs, os, LOG: tl.constexpr, CT: tl.constexpr,
                 SINGLE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BIG: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    if BIG:
        rows = rows.to(tl.int64)
    rmask = rows < M
    cols = tl.arange(0, BN)
    yrow = y_ptr + rows[:, None] * ys_
    grow = g_ptr + rows[:, None] * gs
    orow = o_ptr + rows[:, None] * os
    if SINGLE:
        mask = rmask[:, None] & (cols < N)[None, :]
        y = tl.load(yrow + cols[None, :], mask=mask, other=0.0).to(CT)
        g = tl.load(grow + cols[None, :], mask=mask, other=0.0).to(CT)
        if LOG:
            gx = g - _m_exp(y) * tl.sum(g, 1)[:, None]  # precise exp: y can be far below 0
        else:
            gx = y * (g - tl.sum(g * y, 1)[:, None])
        tl.store(orow + cols[None, :], gx.to(o_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BM], CT)
        for c0 in range(0, N, BN):
            c = c0 + cols
            mask = rmask[:, None] & (c < N)[None, :]
            g = tl.load(grow + c[None, :], mask=mask, other=0.0).to(CT)
            if LOG:
                acc += tl.sum(g, 1)
            else:
                y = tl.load(yrow + c[None, :], mask=mask, other=0.0).to(CT)
                acc += tl.sum(g * y, 1)
        for c0 in range(0, N, BN):
            c = c0 + cols
            mask = rmask[:, None] & (c < N)[None, :]
            y = tl.load(yrow + c[None, :], mask=mask, other=0.0).to(CT)
            g = tl.load(grow + c[None, :], mask=mask, other=0.0).to(CT)
            if LOG:
                gx = g - _m_exp(y) * acc[:, None]
            else:
                gx = y * (g - acc[:, None])
            tl.store(orow + c[None, :], gx.to(o_ptr.dtype.element_ty), mask=mask)


_fwd = {w: Launcher(_softmax_fwd, num_warps=w) for w in (1, 2, 4, 8, 16)}
_bwd = {w: Launcher(_softmax_bwd, num_warps=w) for w in (1, 2, 4, 8, 16)}


def rows_of(a):
    """(M, N, row stride) when ``a`` is a stack of rows with unit stride along its last dim,
    else None."""
    shape = a.shape
    if not shape:
        return 1, 1, 1
    n = shape[-1]
    if n != 1 and a.strides[-1] != 1:
        return None
    lead_n, (lead_s,) = collapse(shape[:-1], [a.strides[:-1]])
    if len(lead_n) > 1:
        return None
    m = lead_n[0] if lead_n else 1
    return m, n, (lead_s[0] if lead_s else n)


def as_rows(a):
    """``(a, (M, N, row stride))``: ``a`` itself when it is a stack of rows (see
    ``rows_of``), else a contiguous copy of it."""
    geo = rows_of(a)
    if geo is None:
        a = contiguous(a)
        geo = rows_of(a)
    return a, geo


def config(n: int, tile_max: int = 2048):
    """(single, BM, BN, num_warps) for rows of ``n`` elements, at most ``tile_max``
    elements a tile when short rows are packed (norms' backward: 4096)."""
    if n <= SINGLE_MAX:
        bn = next_pow2(n)
        bm = max(1, min(64, tile_max // bn))  # pack short rows
        tile = bm * bn
        warps = 1 if tile <= 256 else 2 if tile <= 512 else 4 if tile <= 2048 else \
            8 if tile <= 8192 else 16
        return True, bm, bn, warps
    return False, 1, 4096, 8


def _ct(dtype):
    return tl_float64 if dtype is D.float64 else tl_float32


tl_float32, tl_float64 = tl.float32, tl.float64


def _moved_last(a, dim):
    """``a`` with ``dim`` moved last, as a contiguous copy (a View plus its owner array)."""

    nd = len(a.shape)
    order = [d for d in range(nd) if d != dim] + [dim]
    shape = tuple(a.shape[d] for d in order)
    buf = _launch.empty(shape, a.dtype, a.device)
    copy_(buf, View(a.data_ptr(), shape, tuple(a.strides[d] for d in order), a.dtype,
                    a.device))
    return buf, order


def _moved_back(buf, order, like_shape, dtype, device):
    """A new contiguous array of ``like_shape`` holding ``buf`` (laid out in ``order``)."""

    out = _launch.empty(like_shape, dtype, device)
    cs = out.strides
    copy_(View(out.data_ptr(), buf.shape, tuple(cs[d] for d in order), dtype, device), buf)
    return out


def softmax(x, dim, log):
    """softmax (``log``: log_softmax) along ``dim``, in ``x``'s dtype."""
    nd = len(x.shape)
    if nd and dim != nd - 1:
        buf, order = _moved_last(x, dim)
        y = softmax(buf, len(order) - 1, log)
        return _moved_back(y, order, x.shape, x.dtype, x.device)
    x, (m, n, xs) = as_rows(x)
    y = _launch.empty(x.shape, x.dtype, x.device)
    if m * n == 0:
        return y
    single, bm, bn, warps = config(n)
    big = m * max(xs, n) >= 2**31
    ct = _ct(x.dtype)
    args = (x, y, m, n, xs, n, bool(log), ct, single, bm, bn, big)
    key = (bool(log), x.dtype.name, single, bm, bn, aligned(x, y), _launch.spec(n, xs))
    _fwd[warps].launch(key, x.device, (cdiv(m, bm),), args, big)
    return y


def softmax_backward(y, grad, dim, log):
    """Gradient of (log_)softmax along ``dim`` from its output ``y`` and ``grad``."""
    nd = len(y.shape)
    if nd and dim != nd - 1:
        yb, order = _moved_last(y, dim)
        gb, _ = _moved_last(grad, dim)
        gx = softmax_backward(yb, gb, len(order) - 1, log)
        return _moved_back(gx, order, y.shape, y.dtype, y.device)
    y, (m, n, ys) = as_rows(y)
    grad, (_, _, gs) = as_rows(grad)
    out = _launch.empty(y.shape, y.dtype, y.device)
    if m * n == 0:
        return out
    single, bm, bn, warps = config(n)
    big = m * max(ys, gs, n) >= 2**31
    ct = _ct(y.dtype)
    args = (y, grad, out, m, n, ys, gs, n, bool(log), ct, single, bm, bn, big)
    key = (bool(log), y.dtype.name, grad.dtype.name, single, bm, bn, aligned(y, grad, out),
           _launch.spec(n, ys, gs))
    _bwd[warps].launch(key, y.device, (cdiv(m, bm),), args, big)
    return out


