"""Cross-entropy over large vocabularies: per-row loss and logsumexp, and the logits' gradient.

The contract's ``cross_entropy`` / ``cross_entropy_backward``. Logits are read in their own
dtype (bf16 for a language model) and computed on in float32 registers, so the float32
(tokens x vocab) copy that an upcast-then-log_softmax would make never exists.

Forward: one program per row streams the row in ``BN``-wide blocks with an online max and
sum (and the row's sum, for label smoothing), reads the target's logit once, and writes the
row's loss and logsumexp. Backward: a (rows, blocks) grid; each program rebuilds
``softmax = exp(z - lse)`` for its block and writes
``g * (softmax - (1 - s) * onehot(t) - s / C)`` in the logits' dtype (zeros for an ignored
row).
"""

from __future__ import annotations

import triton
import triton.language as tl

from genesis import dtypes as D

from . import _launch
from ._launch import Launcher, aligned, cdiv, next_pow2
from .elementwise import contiguous

BLOCK = 4096  # columns per block (the row loop's step, the backward grid's width)
# Not specialised: row counts and the small vectors' strides. The class count and the row
# stride are (Triton's 16-divisibility, in the cache key): vector loads along a row.
_INTS = ["M", "ts", "ls", "gs", "ignore_index"]


@triton.jit(do_not_specialize=_INTS)
def _ce_fwd(x_ptr, t_ptr, loss_ptr, lse_ptr, M, C, xs, ts, ignore_index, smoothing,
            CT: tl.constexpr, BN: tl.constexpr, BIG: tl.constexpr):
    row = tl.program_id(0)
    if BIG:
        row = row.to(tl.int64)
    xrow = x_ptr + row * xs
    cols = tl.arange(0, BN)
    m = tl.full([BN], float("-inf"), CT)  # per-lane running max and sum of exp
    s = tl.zeros([BN], CT)
    total = tl.zeros([BN], CT)
    for c0 in range(0, C, BN):
        c = c0 + cols
        z = tl.load(xrow + c, mask=c < C, other=float("-inf")).to(CT)
        m_new = tl.maximum(m, z)
        # lanes still at -inf keep s = 0 (exp(-inf - -inf) would be nan)
        s = tl.where(m_new == float("-inf"), 0.0, s * tl.exp(m - m_new) + tl.exp(z - m_new))
        m = m_new
        total += tl.where(c < C, z, 0.0)
    row_max = tl.max(m, 0)
    lse = row_max + tl.log(tl.sum(s * tl.exp(m - row_max), 0))
    t = tl.load(t_ptr + row * ts)
    keep = t != ignore_index
    zt = tl.load(xrow + tl.where(keep, t, 0)).to(CT)
    loss = (1.0 - smoothing) * (lse - zt) + smoothing / C * (C * lse - tl.sum(total, 0))
    tl.store(loss_ptr + row, tl.where(keep, loss, 0.0))
    tl.store(lse_ptr + row, lse)


@triton.jit(do_not_specialize=_INTS)
def _ce_bwd(g_ptr, x_ptr, t_ptr, lse_ptr, out_ptr, M, C, xs, ts, ls, gs, ignore_index,
            smoothing, CT: tl.constexpr, BN: tl.constexpr, BIG: tl.constexpr):
    row = tl.program_id(0)
    if BIG:
        row = row.to(tl.int64)
    c = tl.program_id(1) * BN + tl.arange(0, BN)
    cmask = c < C
    t = tl.load(t_ptr + row * ts)
    g = tl.load(g_ptr + row * gs).to(CT)
    g = tl.where(t != ignore_index, g, 0.0)
    lse = tl.load(lse_ptr + row * ls).to(CT)
    z = tl.load(x_ptr + row * xs + c, mask=cmask, other=0.0).to(CT)
    d = tl.exp(z - lse) - smoothing / C - tl.where(c == t, 1.0 - smoothing, 0.0)
    tl.store(out_ptr + row * C + c, (g * d).to(out_ptr.dtype.element_ty), mask=cmask)


_fwd = Launcher(_ce_fwd, num_warps=8)
_bwd = Launcher(_ce_bwd, num_warps=8)


def _ct(dtype):
    return tl.float64 if dtype is D.float64 else tl.float32


def _rows(logits):
    """``(logits, row stride)`` with unit stride along the classes (a copy otherwise)."""
    if logits.shape[1] > 1 and logits.strides[1] != 1:
        logits = contiguous(logits)
    return logits, logits.strides[0]


def cross_entropy(logits, target, ignore_index, label_smoothing):
    """Per-row ``(loss, lse)`` of logits (M, C) at int64 ``target`` (M,); see the contract."""
    logits, xs = _rows(logits)
    m, c = logits.shape
    acc = D.float64 if logits.dtype is D.float64 else D.float32
    loss = _launch.empty((m,), acc, logits.device)
    lse = _launch.empty((m,), acc, logits.device)
    if m == 0:
        return loss, lse
    bn = min(BLOCK, next_pow2(c))
    big = m * max(xs, c) >= 2**31
    args = (logits, target, loss, lse, m, c, xs, target.strides[0], int(ignore_index),
            float(label_smoothing), _ct(logits.dtype), bn, big)
    key = (logits.dtype.name, bn, big, aligned(logits, target, loss, lse), _launch.spec(c, xs))
    _fwd.launch(key, logits.device, (m,), args, big)
    return loss, lse


def cross_entropy_backward(grad, logits, target, lse, ignore_index, label_smoothing):
    """The logits' gradient (M, C), in their dtype, from each row's ``grad`` (M,)."""
    logits, xs = _rows(logits)
    m, c = logits.shape
    out = _launch.empty((m, c), logits.dtype, logits.device)
    if m * c == 0:
        return out
    bn = min(BLOCK, next_pow2(c))
    big = m * max(xs, c) >= 2**31
    args = (grad, logits, target, lse, out, m, c, xs, target.strides[0], lse.strides[0],
            grad.strides[0], int(ignore_index), float(label_smoothing), _ct(logits.dtype), bn,
            big)
    key = (logits.dtype.name, grad.dtype.name, lse.dtype.name, bn, big,
           aligned(grad, logits, target, lse, out), _launch.spec(c, xs))
    _bwd.launch(key, logits.device, (m, cdiv(c, bn)), args, big)
    return out
