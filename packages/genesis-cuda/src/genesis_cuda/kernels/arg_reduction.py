"""argmax and argmin along one dim: the int64 index of the first maximum (minimum).

The input is seen as (kept, reduced) with ``reduction.py``'s geometry helpers; one program
reduces a [BK, BR] tile per step, keeping each row's best value and its first index (NaN
counts as the maximum and as the minimum, as in torch). When a few long rows would leave the
GPU idle (an LLM's logits over a 151,936-word vocabulary), each row is cut into chunks
reduced in parallel (``_arg_splits``), and ``_arg_combine_kernel`` picks the first best of
their partial results.
"""

from __future__ import annotations

import builtins

import triton
import triton.language as tl

from genesis import dtypes as D

from . import _launch
from ._launch import Launcher, aligned, cdiv, next_pow2, numel, tl_dtype
from .elementwise import fill_
from .reduction import (
    _INT_MAX,
    _INT_MIN,
    _decompose,
    _inner3,
    _materialise,
    _new,
    _out_shape,
    _plan,
)


@triton.jit(do_not_specialize=["ka", "kb", "RCH"])
def _arg_kernel(x_ptr, out_ptr, val_ptr, K, R, RCH, ka, kb, ksa, ksb, ksc, rs,
                IS_MAX: tl.constexpr, CT: tl.constexpr, FILL: tl.constexpr, KD: tl.constexpr,
                KA1: tl.constexpr, R1: tl.constexpr, BK: tl.constexpr, BR: tl.constexpr,
                BIG: tl.constexpr, SPLIT: tl.constexpr):
    """BK rows' first max/min over reduced elements ``[split * RCH, (split + 1) * RCH)``
    (split = program_id(1)). Without SPLIT, RCH covers the row and the index goes to
    ``out``; with SPLIT, the chunk's value (NaN where it holds one) and index go to the
    (splits, K) partials ``val_ptr``/``out_ptr`` that ``_arg_combine_kernel`` reduces."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    if BIG:
        pid = pid.to(tl.int64)
        split = split.to(tl.int64)
    k = pid * BK + tl.arange(0, BK)
    kmask = k < K
    koff = _decompose(k, ka, kb, ksa, ksb, ksc, KD, KA1)
    best = tl.zeros([BK], CT)
    best_nan = tl.zeros([BK], tl.int1)
    best_idx = tl.zeros([BK], tl.int64)
    r_lo = split * RCH
    r_hi = tl.minimum(r_lo + RCH, R)
    for r0 in range(r_lo, r_hi, BR):
        r = r0 + tl.arange(0, BR)
        if BIG:
            r = r.to(tl.int64)
        if R1:
            roff = r
        else:
            roff = r * rs
        mask = kmask[:, None] & (r < r_hi)[None, :]
        x = tl.load(x_ptr + koff[:, None] + roff[None, :], mask=mask, other=0).to(CT)
        fill = tl.full([BK, BR], FILL, CT)
        if CT.is_floating():
            isn = (x != x) & mask
            has_nan = tl.max(isn.to(tl.int32), 1) > 0
            xv = tl.where(isn | (mask == 0), fill, x)
        else:
            isn = mask & (x != x)
            has_nan = tl.max(isn.to(tl.int32), 1) > 0
            xv = tl.where(mask, x, fill)
        if IS_MAX:  # (small integer reductions come back widened)
            m = tl.max(xv, 1).to(CT)
        else:
            m = tl.min(xv, 1).to(CT)
        cand = tl.where(has_nan[:, None], isn, (xv == m[:, None]) & mask)
        idx = tl.min(tl.where(cand, r[None, :], R), 1).to(tl.int64)
        if IS_MAX:
            better = m > best
        else:
            better = m < best
        first = r0 == r_lo
        upd = (~best_nan) & (has_nan | better | first)
        best = tl.where(upd, m, best)
        best_idx = tl.where(upd, idx, best_idx)
        best_nan = best_nan | has_nan
    if SPLIT:
        if CT.is_floating():
            best = tl.where(best_nan, float("nan"), best)
        tl.store(val_ptr + split * K + k, best, mask=kmask)
        tl.store(out_ptr + split * K + k, best_idx, mask=kmask)
    else:
        tl.store(out_ptr + k, best_idx, mask=kmask)


@triton.jit(do_not_specialize=["K", "S", "R"])
def _arg_combine_kernel(val_ptr, idx_ptr, out_ptr, K, S, R, IS_MAX: tl.constexpr,
                        CT: tl.constexpr, FILL: tl.constexpr, BK: tl.constexpr,
                        BS: tl.constexpr):
    """The first max/min of BK rows from their S chunks' partials: a NaN chunk first, else
    the best value; among equals the smallest index (chunks are in order)."""
    k = tl.program_id(0) * BK + tl.arange(0, BK)
    sp = tl.arange(0, BS)
    mask = (k < K)[:, None] & (sp < S)[None, :]
    offs = sp[None, :] * K + k[:, None]
    v = tl.load(val_ptr + offs, mask=mask, other=0).to(CT)
    i = tl.load(idx_ptr + offs, mask=mask, other=0)
    isn = (v != v) & mask
    has_nan = tl.max(isn.to(tl.int32), 1) > 0
    vv = tl.where(isn | (mask == 0), tl.full([BK, BS], FILL, CT), v)
    if IS_MAX:
        m = tl.max(vv, 1).to(CT)
    else:
        m = tl.min(vv, 1).to(CT)
    cand = tl.where(has_nan[:, None], isn, (vv == m[:, None]) & mask)
    best = tl.min(tl.where(cand, i, R), 1)  # every index is below R
    tl.store(out_ptr + k, best, mask=k < K)


_arg = Launcher(_arg_kernel, num_warps=4)
_arg_combine = Launcher(_arg_combine_kernel, num_warps=4)


def _argreduce(is_max, a, dim, keepdim):
    shape = a.shape
    out = _new(_out_shape(shape, (dim,), keepdim), D.int64, a.device)
    if numel(shape) == 0:
        if shape[dim] == 0:
            raise RuntimeError(f"arg{'max' if is_max else 'min'} of an empty dimension "
                               f"(shape {shape}, dim {dim})")
        return out
    ksz, kst, rsz, rst = _plan(a, (dim,))
    K, R = numel(ksz), numel(rsz)
    x = a
    if len(ksz) > 3:
        x, ksz, rsz, kst, rst = _materialise(a, ksz, kst, rsz, rst)
    if R == 1:
        return fill_(out, 0)
    ka, kb, ksa, ksb, ksc = _inner3(ksz, kst)
    rs = rst[0]
    ct = a.dtype
    if ct is D.float16 or ct is D.bfloat16:
        ct = D.float32
    elif ct is D.bool_:
        ct = D.int8
    k_inner = bool(kst) and kst[-1] == 1
    if k_inner and rs != 1:
        bk = min(next_pow2(K), 64)
        br = max(1, min(next_pow2(R), 2048 // bk))
    else:
        br = min(next_pow2(R), 2048)
        bk = max(1, min(next_pow2(K), 2048 // br))
    span = builtins.sum(s * (n - 1) for s, n in zip(kst + rst, ksz + rsz))
    big = span >= 2**31 or K >= 2**31 - 4096 or R >= 2**31 - 4096
    kd = len(ksz)
    ka1 = kd > 0 and ksa == 1
    if ct.is_floating_point:
        fill = float("-inf") if is_max else float("inf")
    else:
        fill = _INT_MIN[ct.name] if is_max else _INT_MAX[ct.name]
    splits, rch = _arg_splits(K, bk, R, br, a.device)
    if splits > 1:  # few long rows (an LLM's logits): chunks of each row in parallel
        idx, val = _new((splits, K), D.int64, a.device), _new((splits, K), ct, a.device)
    else:
        idx = val = out
    args = (x, idx, val, K, R, rch, ka, kb, ksa, ksb, ksc, rs, is_max, tl_dtype(ct), fill,
            kd, ka1, rs == 1, bk, br, big, splits > 1)
    key = (is_max, ct.name, a.dtype.name, kd, ka1, rs == 1, bk, br, splits > 1,
           aligned(x, idx, val), _launch.spec(K, R, ksa, ksb, ksc, rs))
    _arg.launch(key, a.device, (cdiv(K, bk), splits), args, big)
    if splits > 1:
        bs = next_pow2(splits)
        bkc = max(1, min(next_pow2(K), 1024 // bs))
        _arg_combine.launch((is_max, ct.name, bkc, bs, aligned(val, idx, out)), a.device,
                            (cdiv(K, bkc),),
                            (val, idx, out, K, splits, R, is_max, tl_dtype(ct), fill, bkc,
                             bs))
    return out


def _arg_splits(K: int, bk: int, R: int, br: int, device) -> tuple[int, int]:
    """``(splits, chunk)``: each row's reduced range cut into ``splits`` chunks of ``chunk``
    elements (a multiple of the tile) so that about two programs per multiprocessor run;
    ``(1, R)`` when the rows alone fill the GPU or are short."""
    kprog = cdiv(K, bk)
    target = 2 * _launch.sm_count(device)
    if kprog >= target or R <= 2 * br:
        return 1, R
    rch = cdiv(cdiv(R, min(cdiv(target, kprog), cdiv(R, br))), br) * br
    return cdiv(R, rch), rch


def argmax(a, dim, keepdim):
    """int64 index of the first maximum along ``dim`` (NaN counts as the maximum)."""
    return _argreduce(True, a, dim, keepdim)


def argmin(a, dim, keepdim):
    """int64 index of the first minimum along ``dim`` (NaN counts as the minimum)."""
    return _argreduce(False, a, dim, keepdim)
