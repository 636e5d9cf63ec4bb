"""sort and topk along any dim, any row length, in Triton.

Each element becomes a pair ``(key, index)``: ``key`` is an integer whose signed order is
the element's order (floats: sign-magnitude bits folded to two's complement, ``-0.0`` made
``+0.0``, every NaN the largest key, so NaN sorts last as in torch; ``descending`` flips the
key with ``~``) and ``index`` its position in the row. Pairs are compared
lexicographically, so equal keys keep their input order: every sort here is stable.

* Rows of up to ``MAX_BITONIC`` elements: one program sorts one or several padded rows in
  registers with a bitonic network (compare-exchange partners found with the xor trick
  on a ``[2, 2, ..., 2]`` view of the block).
* Longer rows: chunks of ``MAX_BITONIC`` are sorted that way into scratch memory, then
  merged pairwise, ``log2(chunks)`` passes; in a pass every element finds its place in the
  merged run by a binary search in the partner run (a stable merge-path merge).

Values are gathered from the input at the sorted indices, so NaN payloads and ``-0.0``
come back exactly as they went in.
"""

import triton
import triton.language as tl

from genesis import dtypes as D

from ._launch import Launcher, cdiv, collapse, contiguous_strides, empty, next_pow2, numel
from .layout import MAXD, clone, copy_strided, fill_, offset6, unravel6

MAX_BITONIC = 4096  # longest row sorted in registers by one program


# ----------------------------------------------------------------------------- device
@triton.jit
def _sort_key(x, desc, WIDE: tl.constexpr):
    """Integer key (int32, or int64 when WIDE) whose signed order is x's order."""
    if x.dtype.is_floating():
        if x.dtype.primitive_bitwidth == 64:
            bits = x.to(tl.int64, bitcast=True)
            key = tl.where(bits < 0, bits ^ 0x7FFFFFFFFFFFFFFF, bits)
            key = tl.where(x == 0, 0, key)
            key = tl.where(x != x, 0x7FFFFFFFFFFFFFFF, key)
        else:
            if x.dtype.primitive_bitwidth == 32:
                bits = x.to(tl.int32, bitcast=True)
                mag = 0x7FFFFFFF
            else:
                bits = x.to(tl.int16, bitcast=True).to(tl.int32)  # sign-extended
                mag = 0x7FFF
            key = tl.where(bits < 0, bits ^ mag, bits)
            key = tl.where(x == 0, 0, key)
            key = tl.where(x != x, 0x7FFFFFFF, key)
    elif x.dtype.primitive_bitwidth == 1:
        key = x.to(tl.int32)
    elif x.dtype.is_int_unsigned():
        key = x.to(tl.int32)
    elif x.dtype.primitive_bitwidth == 64:
        key = x
    else:
        key = x.to(tl.int32)
    if WIDE:
        key = key.to(tl.int64)
    return tl.where(desc != 0, ~key, key)


@triton.jit
def _indicator(N_DIMS: tl.constexpr, j: tl.constexpr):
    """0/1 along hypercube axis ``N_DIMS-1-j`` (bit j of the flat position)."""
    ar = tl.arange(0, 2)
    return tl.reshape(ar, [1] * (N_DIMS - j - 1) + [2] + [1] * j)


@triton.jit
def _compare_exchange(k, v, flip, i: tl.constexpr, N_DIMS: tl.constexpr):
    axis: tl.constexpr = N_DIMS - 1 - i
    kp = k ^ tl.xor_sum(k, axis, True)  # partner across bit i
    vp = v ^ tl.xor_sum(v, axis, True)
    is_right = _indicator(N_DIMS, i)
    greater = (k > kp) | ((k == kp) & (v > vp))
    swap = greater != (flip ^ is_right)
    return tl.where(swap, kp, k), tl.where(swap, vp, v)


@triton.jit
def _bitonic_sort(k, v, LOG_N: tl.constexpr, N_DIMS: tl.constexpr):
    """Sort each length-2**LOG_N row of (k, v) ascending by (k, v)."""
    shape: tl.constexpr = k.shape
    hk = tl.reshape(k, [2] * N_DIMS)
    hv = tl.reshape(v, [2] * N_DIMS)
    for stage in tl.static_range(1, LOG_N + 1):
        if stage < LOG_N:
            flip = _indicator(N_DIMS, stage)
        else:
            flip = 0
        for i in tl.static_range(stage):
            hk, hv = _compare_exchange(hk, hv, flip, stage - 1 - i, N_DIMS)
    return tl.reshape(hk, shape), tl.reshape(hv, shape)


@triton.jit(do_not_specialize=["desc"])
def _sort_rows_kernel(x, vals, idxs, R, n, desc, n1, n2, n3, n4, n5,
                      x0, x1, x2, x3, x4, x5, xd, o0, o1, o2, o3, o4, o5, od,
                      WIDE: tl.constexpr, ROWS: tl.constexpr,
                      BLOCK: tl.constexpr, LOG_N: tl.constexpr, N_DIMS: tl.constexpr):
    """Sort ROWS whole rows (each at most BLOCK long) in registers."""
    rid = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    c0, c1, c2, c3, c4, c5 = unravel6(rid, n1, n2, n3, n4, n5)
    xoff = offset6(c0, c1, c2, c3, c4, c5, x0, x1, x2, x3, x4, x5)
    ooff = offset6(c0, c1, c2, c3, c4, c5, o0, o1, o2, o3, o4, o5)
    cols = tl.arange(0, BLOCK)
    mask = (rid < R)[:, None] & (cols < n)[None, :]
    xv = tl.load(x + xoff[:, None] + cols[None, :].to(tl.int64) * xd, mask=mask)
    key = _sort_key(xv, desc, WIDE)
    key = tl.where(mask, key, _max_key(key))
    idx = tl.zeros([ROWS, BLOCK], tl.int32) + cols[None, :]
    key, idx = _bitonic_sort(key, idx, LOG_N, N_DIMS)
    out_v = tl.load(x + xoff[:, None] + idx.to(tl.int64) * xd, mask=mask)
    optr = ooff[:, None] + cols[None, :].to(tl.int64) * od
    tl.store(vals + optr, out_v, mask=mask)
    tl.store(idxs + optr, idx.to(tl.int64), mask=mask)


@triton.jit
def _max_key(key):
    return tl.full(key.shape, 0, key.dtype) + (2 ** (key.dtype.primitive_bitwidth - 1) - 1)


@triton.jit(do_not_specialize=["desc"])
def _sort_chunks_kernel(x, keys, ids, n, P, desc, n1, n2, n3, n4, n5,
                        x0, x1, x2, x3, x4, x5, xd,
                        WIDE: tl.constexpr, BLOCK: tl.constexpr, LOG_N: tl.constexpr):
    """Sort chunk program_id(0) of row program_id(1) into scratch (row stride P)."""
    row = tl.program_id(1).to(tl.int64)
    c0, c1, c2, c3, c4, c5 = unravel6(row, n1, n2, n3, n4, n5)
    xoff = offset6(c0, c1, c2, c3, c4, c5, x0, x1, x2, x3, x4, x5)
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n
    xv = tl.load(x + xoff + cols.to(tl.int64) * xd, mask=mask)
    key = _sort_key(xv, desc, WIDE)
    key = tl.where(mask, key, _max_key(key))
    key, idx = _bitonic_sort(key, cols, LOG_N, LOG_N)
    base = row * P + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(keys + base, key)
    tl.store(ids + base, idx)


@triton.jit
def _merge_kernel(kin, vin, kout, vout, P, L, steps, BLOCK: tl.constexpr):
    """One merge pass: runs of length L pairwise into runs of 2L (rows of length P)."""
    base = tl.program_id(1).to(tl.int64) * P
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    k = tl.load(kin + base + p)
    v = tl.load(vin + base + p)
    run = p // L
    i = p - run * L
    other = (run ^ 1) * L
    lo = tl.zeros([BLOCK], tl.int32)
    hi = tl.zeros([BLOCK], tl.int32) + L
    for _ in range(steps):
        active = lo < hi
        mid = (lo + hi) // 2
        km = tl.load(kin + base + other + mid, mask=active, other=0)
        vm = tl.load(vin + base + other + mid, mask=active, other=0)
        less = (km < k) | ((km == k) & (vm < v))
        lo = tl.where(active & less, mid + 1, lo)
        hi = tl.where(active & (~less), mid, hi)
    dest = (run // 2) * (2 * L) + i + lo
    tl.store(kout + base + dest, k)
    tl.store(vout + base + dest, v)


@triton.jit
def _finish_kernel(x, ids, vals, idxs, n, P, n1, n2, n3, n4, n5,
                   x0, x1, x2, x3, x4, x5, xd, o0, o1, o2, o3, o4, o5, od,
                   BLOCK: tl.constexpr):
    """Write sorted values (gathered from x) and int64 indices of row program_id(1)."""
    row = tl.program_id(1).to(tl.int64)
    c0, c1, c2, c3, c4, c5 = unravel6(row, n1, n2, n3, n4, n5)
    xoff = offset6(c0, c1, c2, c3, c4, c5, x0, x1, x2, x3, x4, x5)
    ooff = offset6(c0, c1, c2, c3, c4, c5, o0, o1, o2, o3, o4, o5)
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n
    idx = tl.load(ids + row * P + cols, mask=mask, other=0).to(tl.int64)
    v = tl.load(x + xoff + idx * xd, mask=mask)
    tl.store(vals + ooff + cols.to(tl.int64) * od, v, mask=mask)
    tl.store(idxs + ooff + cols.to(tl.int64) * od, idx, mask=mask)


# ------------------------------------------------------------------------------- host
_sort_rows = {w: Launcher(_sort_rows_kernel, num_warps=w) for w in (4, 8)}
_sort_chunks = Launcher(_sort_chunks_kernel, num_warps=8)
_merge = Launcher(_merge_kernel, num_warps=4)
_finish = Launcher(_finish_kernel)


def _row_geometry(a, dim):
    """Collapsed (shape6, input strides6, output strides6) of the rows around ``dim``."""
    shape = tuple(a.shape)
    ostr = contiguous_strides(shape)
    other = [d for d in range(len(shape)) if d != dim]
    rshape, (xs, os_) = collapse([shape[d] for d in other],
                                 [[a.strides[d] for d in other], [ostr[d] for d in other]])
    if len(rshape) > MAXD:
        return None
    pad = MAXD - len(rshape)
    return [1] * pad + rshape, [0] * pad + xs, [0] * pad + os_, ostr[dim]


def sort(a, dim: int, descending: bool, stable: bool):
    """(values, int64 indices) of ``a`` sorted along ``dim``; NaN sorts as the largest.

    Always stable (``stable`` is accepted for the contract). Example:
    ``sort(x, 1, True, False)`` sorts each row of a 2-d x in descending order."""
    shape = tuple(a.shape)
    vals = empty(shape, a.dtype, a.device)
    idxs = empty(shape, D.int64, a.device)
    if numel(shape) == 0:
        return vals, idxs
    if len(shape) == 0:
        copy_strided(vals.data_ptr(), vals.dtype, (), a.data_ptr(), a.dtype, (), ())
        fill_(idxs, 0)
        return vals, idxs
    geo = _row_geometry(a, dim)
    if geo is None:
        a = clone(a)
        geo = _row_geometry(a, dim)
    rshape, xs, os_, od = geo
    n = shape[dim]
    R = numel(shape) // n
    xd = a.strides[dim]
    wide = a.dtype.itemsize == 8
    if n <= MAX_BITONIC:
        block = max(2, next_pow2(n))
        rows = max(1, min(next_pow2(R), 2048 // block))
        log_n = block.bit_length() - 1
        n_dims = log_n + rows.bit_length() - 1
        sort_rows = _sort_rows[8 if block * rows >= 2048 else 4]  # (by num_warps)
        sort_rows((cdiv(R, rows),), a, vals, idxs, R, n, int(bool(descending)), *rshape[1:],
                  *xs, xd, *os_, od, WIDE=wide, ROWS=rows, BLOCK=block, LOG_N=log_n,
                  N_DIMS=n_dims)
        return vals, idxs
    # Long rows: sorted chunks, then stable pairwise merges.
    C = MAX_BITONIC
    chunks = next_pow2(cdiv(n, C))
    P = C * chunks
    kdt = D.int64 if wide else D.int32
    k0, v0 = empty((R, P), kdt, a.device), empty((R, P), D.int32, a.device)
    k1, v1 = empty((R, P), kdt, a.device), empty((R, P), D.int32, a.device)
    log_c = C.bit_length() - 1
    _sort_chunks((chunks, R), a, k0, v0, n, P, int(bool(descending)), *rshape[1:], *xs, xd,
                 WIDE=wide, BLOCK=C, LOG_N=log_c)
    L = C
    mb = min(1024, P)
    while L < P:
        _merge((P // mb, R), k0, v0, k1, v1, P, L, L.bit_length(), BLOCK=mb)
        k0, v0, k1, v1 = k1, v1, k0, v0
        L *= 2
    fb = 1024
    _finish((cdiv(n, fb), R), a, v0, vals, idxs, n, P, *rshape[1:], *xs, xd, *os_, od,
            BLOCK=fb)
    return vals, idxs


def topk(a, k: int, dim: int, largest: bool, sorted: bool):
    """The ``k`` largest (or smallest) entries along ``dim`` and their int64 indices.

    Results always come sorted (allowed when ``sorted`` is False); NaN counts as largest."""
    vals, idxs = sort(a, dim, bool(largest), True)
    shape = list(a.shape)
    if len(shape) == 0:
        return vals, idxs
    full = contiguous_strides(tuple(shape))
    shape[dim] = k
    out_v = empty(tuple(shape), a.dtype, a.device)
    out_i = empty(tuple(shape), D.int64, a.device)
    ostr = contiguous_strides(tuple(shape))
    copy_strided(out_v.data_ptr(), a.dtype, ostr, vals.data_ptr(), a.dtype, full, tuple(shape))
    copy_strided(out_i.data_ptr(), D.int64, ostr, idxs.data_ptr(), D.int64, full, tuple(shape))
    return out_v, out_i


