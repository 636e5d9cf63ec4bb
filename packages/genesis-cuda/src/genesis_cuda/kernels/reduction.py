"""Reductions: sum, prod, amax, amin, all, any (any dims) and cumsum (one dim).

The input is seen as (kept, reduced): kept dims in C order (the output's order), reduced
dims sorted by stride; each side is coalesced to at most three dims (else the input is
first copied into that layout). One kernel reads a [BK, BR] tile per step: BK output rows
by BR reduced elements, along whichever side has stride 1, so the last-dim, first-dim and
all-dims cases all read memory contiguously. When there are too few output rows to fill
the GPU, the reduced range is split across programs that write float32/float64/int64
partials, and the same kernel reduces the partials in a second launch. Each (op, geometry,
dtypes, device) is planned once (``_Schedule``); later calls only allocate and launch.
argmax/argmin are ``arg_reduction.py`` (they reuse this module's geometry helpers).
"""

from __future__ import annotations

import builtins

import triton
import triton.language as tl

from genesis import dtypes as D

from . import _launch
from ._launch import Launcher, View, aligned, cdiv, collapse, next_pow2, numel, tl_dtype
from .elementwise import contiguous, copy_, fill_


# --------------------------------------------------------------------------- device code
@triton.jit
def _decompose(i, na, nb, sa, sb, sc, ND: tl.constexpr, A1: tl.constexpr):
    """Offset of flat index ``i`` over up to three dims (innermost first: a, b, c)."""
    if ND == 0:
        off = i * 0
    elif ND == 1:
        if A1:
            off = i
        else:
            off = i * sa
    elif ND == 2:
        ia = i % na
        ib = i // na
        if A1:
            off = ia + ib * sb
        else:
            off = ia * sa + ib * sb
    else:
        ia = i % na
        t = i // na
        ib = t % nb
        ic = t // nb
        if A1:
            off = ia + ib * sb + ic * sc
        else:
            off = ia * sa + ib * sb + ic * sc
    return off


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _combine(acc, v, OP: tl.constexpr):
    if OP == "sum":
        acc = acc + v
    elif OP == "prod":
        acc = acc * v
    elif OP == "max":
        if v.dtype == tl.float64:  # max.NaN exists for 32- and 16-bit floats only
            acc = tl.where(acc != acc, acc, tl.where(v != v, v, tl.maximum(acc, v)))
        elif v.dtype.is_floating():  # one max.NaN instruction: NaN wins, as in torch
            acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)
        else:
            acc = tl.maximum(acc, v)
    elif OP == "min":
        if v.dtype == tl.float64:
            acc = tl.where(acc != acc, acc, tl.where(v != v, v, tl.minimum(acc, v)))
        elif v.dtype.is_floating():
            acc = tl.minimum(acc, v, propagate_nan=tl.PropagateNan.ALL)
        else:
            acc = tl.minimum(acc, v)
    elif OP == "all":
        acc = tl.minimum(acc, v)
    else:  # any
        acc = tl.maximum(acc, v)
    return acc


@triton.jit
def _finish(acc, OP: tl.constexpr):
    if OP == "sum":
        res = tl.sum(acc, 1)
    elif OP == "prod":
        res = tl.reduce(acc, 1, _mul)
    elif OP == "max" or OP == "any":
        res = tl.max(acc, 1)
        if acc.dtype.is_floating():
            nan = tl.sum(tl.where(acc != acc, acc, 0.0), 1)  # NaN where any NaN, else 0
            res = tl.where(nan != nan, nan, res)
    else:
        res = tl.min(acc, 1)
        if acc.dtype.is_floating():
            nan = tl.sum(tl.where(acc != acc, acc, 0.0), 1)
            res = tl.where(nan != nan, nan, res)
    return res


@triton.jit(do_not_specialize=["ka", "kb", "ra", "rb"])
def _reduce_kernel(x_ptr, out_ptr, K, R, RCH, ka, kb, ksa, ksb, ksc, ra, rb, rsa, rsb, rsc,
                   out_split_stride,
                   OP: tl.constexpr, ACC: tl.constexpr, KD: tl.constexpr, RD: tl.constexpr,
                   KA1: tl.constexpr, RA1: tl.constexpr, IDENT: tl.constexpr,
                   BK: tl.constexpr, BR: tl.constexpr, BIG: tl.constexpr):
    pid_k = tl.program_id(0)
    pid_s = tl.program_id(1)
    if BIG:
        pid_k = pid_k.to(tl.int64)
        pid_s = pid_s.to(tl.int64)
    k = pid_k * BK + tl.arange(0, BK)
    kmask = k < K
    koff = _decompose(k, ka, kb, ksa, ksb, ksc, KD, KA1)
    r_start = pid_s * RCH
    r_end = tl.minimum(r_start + RCH, R)
    ident = tl.full([BK, BR], IDENT, ACC)
    acc = ident
    for r0 in range(r_start, r_end, BR):
        r = r0 + tl.arange(0, BR)
        roff = _decompose(r, ra, rb, rsa, rsb, rsc, RD, RA1)
        mask = kmask[:, None] & (r < r_end)[None, :]
        x = tl.load(x_ptr + koff[:, None] + roff[None, :], mask=mask)
        if OP == "all" or OP == "any":
            v = (x != 0).to(ACC)
        else:
            v = x.to(ACC)
        v = tl.where(mask, v, ident)
        acc = _combine(acc, v, OP)
    res = _finish(acc, OP)
    out_ty = out_ptr.dtype.element_ty
    tl.store(out_ptr + pid_s * out_split_stride + k, res.to(out_ty), mask=kmask)


@triton.jit(do_not_specialize=["ka", "kb", "oka", "okb"])
def _cumsum_kernel(x_ptr, out_ptr, K, R, ka, kb, ksa, ksb, ksc, oka, okb, oksa, oksb, oksc,
                   rs, ors, ACC: tl.constexpr, KD: tl.constexpr, BK: tl.constexpr,
                   BR: tl.constexpr, BIG: tl.constexpr):
    pid = tl.program_id(0)
    if BIG:
        pid = pid.to(tl.int64)
    k = pid * BK + tl.arange(0, BK)
    kmask = k < K
    koff = _decompose(k, ka, kb, ksa, ksb, ksc, KD, False)
    ooff = _decompose(k, oka, okb, oksa, oksb, oksc, KD, False)
    carry = tl.zeros([BK], ACC)
    out_ty = out_ptr.dtype.element_ty
    for r0 in range(0, R, BR):
        r = r0 + tl.arange(0, BR)
        if BIG:
            r = r.to(tl.int64)
        mask = kmask[:, None] & (r < R)[None, :]
        x = tl.load(x_ptr + koff[:, None] + (r * rs)[None, :], mask=mask, other=0).to(ACC)
        c = tl.cumsum(x, 1) + carry[:, None]
        tl.store(out_ptr + ooff[:, None] + (r * ors)[None, :], c.to(out_ty), mask=mask)
        # the running total is the last column (masked tail columns add zeros); written as
        # a fresh reduction, not `carry + sum(x)`, which trips a Triton 3.6 pass on sm_90
        carry = tl.sum(tl.where((tl.arange(0, BR) == BR - 1)[None, :], c, 0), 1)


# ---------------------------------------------------------------------------- host code
_reduce = {w: Launcher(_reduce_kernel, num_warps=w) for w in (4, 8)}
_cumsum = Launcher(_cumsum_kernel, num_warps=4)

_INT_MIN = {"int8": -2**7, "int16": -2**15, "int32": -2**31, "int64": -2**63, "uint8": 0}
_INT_MAX = {"int8": 2**7 - 1, "int16": 2**15 - 1, "int32": 2**31 - 1, "int64": 2**63 - 1,
            "uint8": 255}
TILE = 4096  # elements of one [BK, BR] tile
COLUMN_TILE = 8192  # ... when the kept side is the contiguous one (first-dim reductions;
# chosen by `tools/bench/ops.py --sweep`, figures in docs/benchmarks.md)


def _new(shape, dtype, device):
    return _launch.empty(shape, dtype, device)


def _plan(a, dims):
    """(kept sizes, kept strides, reduced sizes, reduced strides), each coalesced, outer first."""
    shape, strides = a.shape, a.strides
    dset = set(dims)
    kept = [d for d in range(len(shape)) if d not in dset]
    ksz, (kst,) = collapse([shape[d] for d in kept], [[strides[d] for d in kept]])
    red = sorted((d for d in dims if shape[d] != 1), key=lambda d: -strides[d])
    rsz, (rst,) = collapse([shape[d] for d in red], [[strides[d] for d in red]])
    return ksz, kst, rsz, rst


def _inner3(sizes, strides):
    """Innermost-first (na, nb, sa, sb, sc) for up to three dims."""
    n = list(reversed(sizes)) + [1, 1, 1]
    s = list(reversed(strides)) + [0, 0, 0]
    return n[0], n[1], s[0], s[1], s[2]


def _materialise(a, ksz, kst, rsz, rst):
    """Copy ``a`` into a new contiguous (kept..., reduced...) buffer of shape (K, R)."""

    K, R = numel(ksz), numel(rsz)
    buf = _new((K, R), a.dtype, a.device)
    src = View(a.data_ptr(), tuple(ksz) + tuple(rsz), tuple(kst) + tuple(rst), a.dtype, a.device)
    dst = View(buf.data_ptr(), tuple(ksz) + tuple(rsz),
               _launch.contiguous_strides(tuple(ksz) + tuple(rsz)), a.dtype, a.device)
    copy_(dst, src)
    return buf


def _out_shape(shape, dims, keepdim):
    dset = set(dims)
    if keepdim:
        return tuple(1 if d in dset else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in dset)


def _acc_dtype(op, in_dt, out_dt):
    if op in ("all", "any"):
        return D.int32
    if op in ("max", "min"):
        if in_dt is D.float16 or in_dt is D.bfloat16:
            return D.float32
        return D.int8 if in_dt is D.bool_ else in_dt
    if out_dt.is_floating_point:
        return D.float64 if out_dt is D.float64 else D.float32
    return D.int64


def _ident(op, acc):
    if op == "sum" or op == "any":
        return 0
    if op == "prod" or op == "all":
        return 1
    if acc.is_floating_point:
        return float("-inf") if op == "max" else float("inf")
    return _INT_MIN[acc.name] if op == "max" else _INT_MAX[acc.name]


class _Launch:
    """One launch of ``_reduce_kernel``: everything but the two addresses, worked out once."""

    __slots__ = ("launcher", "grid", "tail", "site", "big", "from_ws", "to_ws")

    def __init__(self, op, acc, in_dt, out_dt, ksz, kst, rsz, rst, K, R, rch, splits, oss,
                 bk, br, from_ws, to_ws):
        ka, kb, ksa, ksb, ksc = _inner3(ksz, kst)
        ra, rb, rsa, rsb, rsc = _inner3(rsz, rst)
        kd, rd = len(ksz), len(rsz)
        span = builtins.sum(s * (n - 1) for s, n in zip(kst + rst, ksz + rsz))
        self.big = span >= 2**31 or K * splits >= 2**31 or R >= 2**31 - br
        ka1 = kd > 0 and ksa == 1
        ra1 = rd > 0 and rsa == 1
        self.launcher = _reduce[8 if bk * br >= 4096 else 4]
        self.grid = (cdiv(K, bk), splits)
        self.tail = (K, R, rch, ka, kb, ksa, ksb, ksc, ra, rb, rsa, rsb, rsc, oss,
                     op, tl_dtype(acc), kd, rd, ka1, ra1, _ident(op, acc), bk, br, self.big)
        # a schedule is made per device: the site's variants are the pointers' alignments
        self.site = self.launcher.site((op, acc.name, kd, rd, ka1, ra1, bk, br, in_dt.name,
                                        out_dt.name, _launch.spec(K, R, rch, ksa, ksb, ksc,
                                                                  rsa, rsb, rsc, oss)))
        self.from_ws, self.to_ws = from_ws, to_ws

    def __call__(self, x, out, device):
        if self.big:  # Triton's own, fully keyed launch
            self.launcher.launch(None, device, self.grid, (x, out) + self.tail, True)
            return
        px, po = x.data_ptr(), out.data_ptr()
        self.site.launch(((px & 15) == 0) | ((po & 15) == 0) << 1, device, *self.grid,
                         (px, po), (x, out), self.tail)


def _launches(op, acc, in_dt, out_dt, ksz, kst, rsz, rst, device, from_ws=False):
    """The launches reducing an input planned as ksz/kst, rsz/rst into a contiguous output,
    and the (splits, K) float32/float64/int64 workspace they share (None when one launch
    does it all)."""
    K, R = numel(ksz), numel(rsz)
    k_inner = bool(kst) and kst[-1] == 1
    r_inner = bool(rst) and rst[-1] == 1
    if k_inner and not r_inner:
        bk = min(next_pow2(K), 128)
        br = max(1, min(next_pow2(R), COLUMN_TILE // bk))
    else:
        br = min(next_pow2(R), TILE)
        bk = max(1, min(next_pow2(K), TILE // br))
    kprog = cdiv(K, bk)
    target = 4 * _launch.sm_count(device)
    if not from_ws and kprog < target and R > 2 * br:
        splits = min(cdiv(target, kprog), cdiv(R, br))
        rch = cdiv(cdiv(R, splits), br) * br
        splits = cdiv(R, rch)
        if splits > 1:
            first = _Launch(op, acc, in_dt, acc, ksz, kst, rsz, rst, K, R, rch, splits, K,
                            bk, br, False, True)
            rest, _ = _launches(op, acc, acc, out_dt, [K], [1], [splits], [K], device, True)
            return [first] + rest, (splits, K)
    return [_Launch(op, acc, in_dt, out_dt, ksz, kst, rsz, rst, K, R, max(R, 1), 1, 0, bk, br,
                    from_ws, False)], None


class _Schedule:
    """How one (op, geometry, dtypes, device) reduces: output shape, whether the input is
    first copied into a (kept, reduced) layout, and the launches."""

    __slots__ = ("out_shape", "acc", "kind", "plan", "launches", "ws_shape")

    def __init__(self, op, a, dims, keepdim, out_dtype):
        shape = a.shape
        self.out_shape = _out_shape(shape, dims, keepdim)
        self.acc = acc = _acc_dtype(op, a.dtype, out_dtype)
        self.launches, self.ws_shape = (), None
        if not dims:
            self.kind = "copy"  # reduces nothing: a converted copy
            return
        ksz, kst, rsz, rst = self.plan = _plan(a, dims)
        K, R = numel(ksz), numel(rsz)
        if K == 0:
            self.kind = "empty"
            return
        if R == 0:
            if op in ("max", "min"):
                raise RuntimeError(f"a{op} of an empty dimension has no identity "
                                   f"(shape {shape}, dims {dims})")
            self.kind = "fill"
            return
        if len(ksz) > 3 or len(rsz) > 3:
            self.kind = "materialise"
            ksz, kst, rsz, rst = [K], [R], [R], [1]
        else:
            self.kind = "reduce"
        self.launches, self.ws_shape = _launches(op, acc, a.dtype, out_dtype, ksz, kst, rsz,
                                                 rst, a.device)


_schedules: dict = {}


def _reduce_op(op, a, dims, keepdim, out_dtype):
    device = a.device
    skey = (op, a.shape, a.strides, dims, keepdim, a.dtype, out_dtype, device)
    sched = _schedules.get(skey)
    if sched is None:
        sched = _Schedule(op, a, dims, keepdim, out_dtype)
        if len(_schedules) < 4096:
            _schedules[skey] = sched
    out = _new(sched.out_shape, out_dtype, device)
    kind = sched.kind
    if kind != "reduce":
        if kind == "copy":
            return copy_(out, a)
        if kind == "fill":
            return fill_(out, _ident(op, sched.acc))
        if kind == "empty":
            return out
        a = _materialise(a, *sched.plan)
    ws = None if sched.ws_shape is None else _new(sched.ws_shape, sched.acc, device)
    for step in sched.launches:
        step(ws if step.from_ws else a, ws if step.to_ws else out, device)
    return out


# ------------------------------------------------------------------- contract functions
def sum(a, dims, keepdim, dtype):  # noqa: A001 - the contract's name
    """Sum over ``dims`` in ``dtype`` (float32 accumulation for half types)."""
    return _reduce_op("sum", a, dims, keepdim, dtype)


def prod(a, dims, keepdim, dtype):
    """Product over ``dims`` in ``dtype``."""
    return _reduce_op("prod", a, dims, keepdim, dtype)


def amax(a, dims, keepdim):
    """Maximum over ``dims`` (NaN propagates)."""
    return _reduce_op("max", a, dims, keepdim, a.dtype)


def amin(a, dims, keepdim):
    """Minimum over ``dims`` (NaN propagates)."""
    return _reduce_op("min", a, dims, keepdim, a.dtype)


def all(a, dims, keepdim):  # noqa: A001
    """bool: every element over ``dims`` is non-zero."""
    return _reduce_op("all", a, dims, keepdim, D.bool_)


def any(a, dims, keepdim):  # noqa: A001
    """bool: some element over ``dims`` is non-zero."""
    return _reduce_op("any", a, dims, keepdim, D.bool_)


def cumsum(a, dim, dtype):
    """Inclusive prefix sum along ``dim`` in ``dtype`` (a new contiguous array)."""
    shape = a.shape
    out = _new(shape, dtype, a.device)
    if numel(shape) == 0:
        return out
    if len(shape) == 0:
        return copy_(out, a)
    return _cumsum_into(a, out, dim, dtype)


def _cumsum_into(a, out, dim, dtype):
    shape = a.shape
    ostr = out.strides
    kept = [d for d in range(len(shape)) if d != dim]
    # coalesce kept dims jointly for input and output
    ksz, kst, okst = [], [], []
    for d in kept:
        n = shape[d]
        if n == 1:
            continue
        if ksz and kst[-1] == a.strides[d] * n and okst[-1] == ostr[d] * n:
            ksz[-1] *= n
            kst[-1] = a.strides[d]
            okst[-1] = ostr[d]
        else:
            ksz.append(n)
            kst.append(a.strides[d])
            okst.append(ostr[d])
    if len(ksz) > 3:  # rare: go through a contiguous copy, seen as (outer, R, inner)

        c = contiguous(a)
        outer, inner = numel(shape[:dim]), numel(shape[dim + 1:])
        geo = ((outer, shape[dim], inner), (shape[dim] * inner, inner, 1))
        return _cumsum_into(View(c.data_ptr(), *geo, a.dtype, a.device),
                            View(out.data_ptr(), *geo, dtype, a.device), 1, dtype) and out
    K, R = numel(ksz), shape[dim]
    ka, kb, ksa, ksb, ksc = _inner3(ksz, kst)
    oka, okb, oksa, oksb, oksc = _inner3(ksz, okst)
    if dtype.is_floating_point:
        acc = D.float64 if dtype is D.float64 else D.float32
    else:
        acc = D.int64
    if a.strides[dim] == 1:
        br = min(next_pow2(R), 1024)
        bk = max(1, min(next_pow2(K), 1024 // br))
    else:
        bk = min(next_pow2(K), 64)
        br = max(1, min(next_pow2(R), 1024 // bk))
    span = builtins.sum(s * (n - 1) for s, n in zip(kst + [a.strides[dim]], ksz + [R]))
    big = span >= 2**31 or numel(shape) >= 2**31 - 4096
    kd = len(ksz)
    args = (a, out, K, R, ka, kb, ksa, ksb, ksc, oka, okb, oksa, oksb, oksc, a.strides[dim],
            ostr[dim], tl_dtype(acc), kd, bk, br, big)
    key = (acc.name, a.dtype.name, dtype.name, kd, bk, br, aligned(a, out),
           _launch.spec(K, R, ksa, ksb, ksc, oksa, oksb, oksc, a.strides[dim], ostr[dim]))
    _cumsum.launch(key, a.device, (cdiv(K, bk),), args, big)
    return out


