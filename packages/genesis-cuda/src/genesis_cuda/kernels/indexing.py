"""Indexing kernels: gather, scatter, index_select, index_add, advanced indexing
(``a[idx, :, idx2]``), index_put_ and nonzero.

All of them are one of two strided walks over an *iteration shape*:

* gather walk:  ``out[p] = src[offset(p) + idx[p'] * scale]``
* scatter walk: ``dst[offset(p) + idx[p'] * scale] (+)= src[p]``

where every operand has its own strides over the iteration shape (zero where it does not
vary). ``gather``/``scatter`` put the index on the gathered dim, ``index_select``/
``index_add`` view a 1-d index as broadcast over the other dims, and advanced indexing
first folds all index arrays into one int64 array of element offsets (one small kernel per
index array), then gathers (or scatters) with ``scale = 1``. Repeated indices accumulate
through atomics; dtypes without atomic adds (8/16-bit integers, bool) accumulate in a
widened copy.
"""

import triton
import triton.language as tl

from genesis import dtypes as D
from genesis_cuda import array as _array
from genesis_cuda import capture, kernel_errors, transfer

from . import _launch
from ._launch import Launcher, Ptr, cdiv, contiguous_strides, numel
from .layout import (
    BLOCK,
    clone,
    copy_into,
    copy_strided,
    grid1,
    linear_ids,
    offset6,
    plan,
    scalar_args,
    scalar_block,
    unravel6,
)

_ATOMIC_DTYPES = {D.float16, D.bfloat16, D.float32, D.float64, D.int32, D.int64}


# ----------------------------------------------------------------------------- kernels
@triton.jit
def _in_range(j, lo, mask, size, err, OP: tl.constexpr):
    """The lanes of ``mask`` whose index ``j`` lies in ``[lo, size)``. If one does not, the
    block claims the device's error word (see ``genesis_cuda.kernel_errors``) for
    ``(OP, j, size)``: only the first error of all blocks lands there."""
    ok = mask & (j >= lo) & (j < size)
    bad = mask & ((j < lo) | (j >= size))
    if tl.max(bad.to(tl.int32), axis=0) > 0:  # the valid path costs this one reduction
        worst = tl.max(tl.where(bad, j.to(tl.int64), -(2**62)), axis=0)  # a bad index
        if tl.atomic_cas(err, tl.full([], 0, tl.int64), tl.full([], OP, tl.int64)) == 0:
            tl.store(err + 1, worst)
            # size is an int constexpr when it equals 1 (Triton specialises it): no .to()
            tl.store(err + 2, size + tl.zeros([], tl.int64))
    return ok


@triton.jit
def _gather_kernel(out, src, idx, err, n, scale, size, n1, n2, n3, n4, n5,
                   o0, o1, o2, o3, o4, o5, s0, s1, s2, s3, s4, s5, i0, i1, i2, i3, i4, i5,
                   OP: tl.constexpr, BLOCK: tl.constexpr, BIG: tl.constexpr):
    """out[p] = src[offset(p) + idx[p'] * scale]; an index outside [0, size) reads nothing
    and is reported (OP > 0), or, for offsets made by ``_offsets_kernel`` (OP == 0), a
    negative one reads nothing (that kernel reported it)."""
    lin, mask = linear_ids(n, BLOCK, BIG)
    c0, c1, c2, c3, c4, c5 = unravel6(lin, n1, n2, n3, n4, n5)
    j = tl.load(idx + offset6(c0, c1, c2, c3, c4, c5, i0, i1, i2, i3, i4, i5), mask=mask,
                other=0)
    if OP > 0:
        ok = _in_range(j, 0, mask, size, err, OP)
    else:
        ok = mask & (j >= 0)
    soff = offset6(c0, c1, c2, c3, c4, c5, s0, s1, s2, s3, s4, s5) + j * scale
    v = tl.load(src + soff, mask=ok, other=0)
    tl.store(out + offset6(c0, c1, c2, c3, c4, c5, o0, o1, o2, o3, o4, o5), v, mask=mask)


@triton.jit
def _scatter_kernel(dst, src, idx, err, n, scale, size, value_f: tl.float64,
                    value_i: tl.int64, n1, n2, n3, n4, n5,
                    d0, d1, d2, d3, d4, d5, s0, s1, s2, s3, s4, s5, i0, i1, i2, i3, i4, i5,
                    OP: tl.constexpr, SCALAR: tl.constexpr, ADD: tl.constexpr,
                    BLOCK: tl.constexpr, BIG: tl.constexpr):
    """dst[offset(p) + idx[p'] * scale] (+)= src[p]; out-of-range indices as in
    ``_gather_kernel``: nothing written, the index reported."""
    lin, mask = linear_ids(n, BLOCK, BIG)
    c0, c1, c2, c3, c4, c5 = unravel6(lin, n1, n2, n3, n4, n5)
    j = tl.load(idx + offset6(c0, c1, c2, c3, c4, c5, i0, i1, i2, i3, i4, i5), mask=mask,
                other=0)
    if OP > 0:
        ok = _in_range(j, 0, mask, size, err, OP)
    else:
        ok = mask & (j >= 0)
    doff = offset6(c0, c1, c2, c3, c4, c5, d0, d1, d2, d3, d4, d5) + j * scale
    if SCALAR:
        v = scalar_block(value_f, value_i, dst.dtype.element_ty, BLOCK)
    else:
        v = tl.load(src + offset6(c0, c1, c2, c3, c4, c5, s0, s1, s2, s3, s4, s5), mask=mask)
        v = v.to(dst.dtype.element_ty)
    if ADD:
        tl.atomic_add(dst + doff, v, mask=ok, sem="relaxed")
    else:
        tl.store(dst + doff, v, mask=ok)


@triton.jit
def _offsets_kernel(off, idx, err, n, stride, size, n1, n2, n3, n4, n5,
                    o0, o1, o2, o3, o4, o5, i0, i1, i2, i3, i4, i5,
                    OP: tl.constexpr, FIRST: tl.constexpr, BLOCK: tl.constexpr,
                    BIG: tl.constexpr):
    """off (+)= wrap(idx) * stride: one advanced index folded into element offsets. An
    index outside [-size, size) is reported and makes its offset negative for good (valid
    offsets are >= 0: genesis arrays have no negative strides), so the walk skips it."""
    lin, mask = linear_ids(n, BLOCK, BIG)
    c0, c1, c2, c3, c4, c5 = unravel6(lin, n1, n2, n3, n4, n5)
    j = tl.load(idx + offset6(c0, c1, c2, c3, c4, c5, i0, i1, i2, i3, i4, i5), mask=mask,
                other=0).to(tl.int64)
    ok = _in_range(j, -size, mask, size, err, OP)
    j = tl.where(j < 0, j + size, j)  # negative indices count from the end, as in torch
    v = tl.where(ok, j * stride, -1)
    optr = off + offset6(c0, c1, c2, c3, c4, c5, o0, o1, o2, o3, o4, o5)
    if not FIRST:
        prev = tl.load(optr, mask=mask, other=0)
        v = tl.where((v < 0) | (prev < 0), -1, v + prev)
    tl.store(optr, v, mask=mask)


@triton.jit
def _unravel8(lin, n1, n2, n3, n4, n5, n6, n7):
    c7 = lin % n7
    lin = lin // n7
    c6 = lin % n6
    lin = lin // n6
    c5 = lin % n5
    lin = lin // n5
    c4 = lin % n4
    lin = lin // n4
    c3 = lin % n3
    lin = lin // n3
    c2 = lin % n2
    lin = lin // n2
    c1 = lin % n1
    c0 = lin // n1
    return c0, c1, c2, c3, c4, c5, c6, c7


@triton.jit
def _nz_load(a, n, n1, n2, n3, n4, n5, n6, n7, s0, s1, s2, s3, s4, s5, s6, s7,
             BLOCK: tl.constexpr):
    lin = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    mask = lin < n
    c0, c1, c2, c3, c4, c5, c6, c7 = _unravel8(lin, n1, n2, n3, n4, n5, n6, n7)
    off = (c0 * s0 + c1 * s1 + c2 * s2 + c3 * s3 + c4 * s4 + c5 * s5 + c6 * s6 + c7 * s7)
    x = tl.load(a + off, mask=mask)
    nz = (x != 0) & mask
    return nz, c0, c1, c2, c3, c4, c5, c6, c7


@triton.jit
def _nz_count_kernel(a, counts, n, n1, n2, n3, n4, n5, n6, n7,
                     s0, s1, s2, s3, s4, s5, s6, s7, BLOCK: tl.constexpr):
    nz, c0, c1, c2, c3, c4, c5, c6, c7 = _nz_load(a, n, n1, n2, n3, n4, n5, n6, n7, s0, s1,
                                                  s2, s3, s4, s5, s6, s7, BLOCK)
    tl.store(counts + tl.program_id(0), tl.sum(nz.to(tl.int64), axis=0))


@triton.jit
def _scan_kernel(counts, prefix, nb, CH: tl.constexpr):
    """Exclusive prefix sum of ``counts`` (one program, chunk by chunk); total at [nb]."""
    carry = tl.sum(tl.zeros([CH], tl.int64), axis=0)
    for start in range(0, nb, CH):
        offs = start + tl.arange(0, CH)
        m = offs < nb
        c = tl.load(counts + offs, mask=m, other=0)
        tl.store(prefix + offs, carry + tl.cumsum(c, axis=0) - c, mask=m)
        carry += tl.sum(c, axis=0)
    tl.store(prefix + nb, carry)


@triton.jit
def _nz_write_kernel(a, prefix, out, n, n1, n2, n3, n4, n5, n6, n7,
                     s0, s1, s2, s3, s4, s5, s6, s7, NDIM: tl.constexpr, BLOCK: tl.constexpr):
    nz, c0, c1, c2, c3, c4, c5, c6, c7 = _nz_load(a, n, n1, n2, n3, n4, n5, n6, n7, s0, s1,
                                                  s2, s3, s4, s5, s6, s7, BLOCK)
    f = nz.to(tl.int64)
    row = tl.cumsum(f, axis=0) - f + tl.load(prefix + tl.program_id(0))
    base = out + row * NDIM
    # Padded dim k is original dim k - (8 - NDIM).
    if NDIM >= 8:
        tl.store(base + (NDIM - 8), c0, mask=nz)
    if NDIM >= 7:
        tl.store(base + (NDIM - 7), c1, mask=nz)
    if NDIM >= 6:
        tl.store(base + (NDIM - 6), c2, mask=nz)
    if NDIM >= 5:
        tl.store(base + (NDIM - 5), c3, mask=nz)
    if NDIM >= 4:
        tl.store(base + (NDIM - 4), c4, mask=nz)
    if NDIM >= 3:
        tl.store(base + (NDIM - 3), c5, mask=nz)
    if NDIM >= 2:
        tl.store(base + (NDIM - 2), c6, mask=nz)
    if NDIM >= 1:
        tl.store(base + (NDIM - 1), c7, mask=nz)


# ------------------------------------------------------------------------------ walks
_gather = Launcher(_gather_kernel)
_scatter = Launcher(_scatter_kernel)
_offsets = Launcher(_offsets_kernel)
_nz_count = Launcher(_nz_count_kernel)
_scan = Launcher(_scan_kernel)
_nz_write = Launcher(_nz_write_kernel)


def _error_word(op, device):
    """(error word, OP code) for a launch that checks its indices for ``op``; ``op`` None:
    indices known to be in range (any pointer will do, OP 0 never reads it)."""
    if op is None:
        return None, 0
    return kernel_errors.word_for_launch(device), kernel_errors.op_code(op)


def _gather_walk(out, src, src_strides, idx, idx_strides, scale: int, size: int,
                 op: str | None) -> None:
    """out[p] = src[src_strides . p + idx[idx_strides . p] * scale] over out's shape, for
    indices in [0, size) (others are reported for ``op``)."""
    shape = tuple(out.shape)
    ops = [(out.data_ptr(), out.dtype.itemsize, out.strides),
           (src.data_ptr(), src.dtype.itemsize, src_strides),
           (idx.data_ptr(), idx.dtype.itemsize, idx_strides)]
    err, code = _error_word(op, out.device)
    for n, s6, ((optr, os_), (sp, ss), (ip, is_)), big in plan(shape, ops):
        _gather(grid1(n), Ptr(optr, out.dtype), Ptr(sp, src.dtype), Ptr(ip, idx.dtype),
                err or Ptr(optr, out.dtype), n, scale, size, *s6[1:], *os_, *ss, *is_,
                OP=code, BLOCK=BLOCK, BIG=big)


def _scatter_walk(shape, dst, dst_strides, idx, idx_strides, scale: int, size: int,
                  op: str | None, src, src_strides, add: bool) -> None:
    """dst[dst_strides . p + idx[idx_strides . p] * scale] (+)= src[src_strides . p], for
    indices in [0, size) (others are reported for ``op``)."""
    scalar = not hasattr(src, "data_ptr")
    if add and dst.dtype not in _ATOMIC_DTYPES:
        # No atomic add for this dtype: accumulate in a widened copy. ``dst`` is always a
        # fresh contiguous array here, so the walk strides hold for the copy as well.
        wide = D.float32 if dst.dtype.is_floating_point else D.int64
        work = clone(dst, wide)
        _scatter_walk(shape, work, dst_strides, idx, idx_strides, scale, size, op, src,
                      src_strides, add)
        copy_into(dst, work)
        return
    value_f, value_i = scalar_args(src if scalar else 0)
    if scalar:
        sop = (dst.data_ptr(), dst.dtype.itemsize, [0] * len(shape))
        sdt = dst.dtype
    else:
        sop = (src.data_ptr(), src.dtype.itemsize, src_strides)
        sdt = src.dtype
    ops = [(dst.data_ptr(), dst.dtype.itemsize, dst_strides), sop,
           (idx.data_ptr(), idx.dtype.itemsize, idx_strides)]
    err, code = _error_word(op, dst.device)
    for n, s6, ((dp, ds), (sp, ss), (ip, is_)), big in plan(tuple(shape), ops):
        _scatter(grid1(n), Ptr(dp, dst.dtype), Ptr(sp, sdt), Ptr(ip, idx.dtype),
                 err or Ptr(dp, dst.dtype), n, scale, size, value_f, value_i, *s6[1:], *ds, *ss,
                 *is_, OP=code, SCALAR=scalar, ADD=bool(add), BLOCK=BLOCK, BIG=big)


# ----------------------------------------------------------------------------- public
def _along(a, dim: int, ndim: int):
    """(``a``'s strides over an ``ndim`` walk with ``dim`` zeroed, ``dim``'s stride, its
    size); a 0-d ``a`` indexes like one element of a dim of size 1."""
    if not a.shape:
        return [0] * ndim, 0, 1
    strides = list(a.strides)
    scale, strides[dim] = strides[dim], 0
    return strides, scale, a.shape[dim]


def gather(a, dim: int, index):
    """``out[i][j] = a[i][index[i][j]]`` along ``dim``; result has ``index``'s shape."""
    out = _launch.empty(index.shape, a.dtype, a.device)
    if numel(index.shape) == 0:
        return out
    sstr, scale, size = _along(a, dim, len(index.shape))
    _gather_walk(out, a, sstr, index, index.strides, scale, size, "gather")
    return out


def _scatter_into(out, dim, index, src, add):
    dstr, scale, size = _along(out, dim, len(index.shape))
    sstr = None if not hasattr(src, "data_ptr") else src.strides
    _scatter_walk(index.shape, out, dstr, index, index.strides, scale, size, "scatter", src,
                  sstr, add)


def scatter(a, dim: int, index, src, reduce):
    """A copy of ``a`` with ``src`` (array or scalar) written (``reduce=None``) or added
    (``"add"``) at ``index`` along ``dim``."""
    if reduce not in (None, "add"):
        raise ValueError(f"scatter: reduce must be None or 'add', got {reduce!r}")
    out = clone(a)
    if numel(index.shape):
        _scatter_into(out, dim, index, src, reduce == "add")
    return out


def _index_view_strides(index, ndim: int, dim: int):
    """Strides that view a 1-d (or 0-d) ``index`` along ``dim`` of an ndim walk."""
    istr = [0] * ndim
    istr[dim] = index.strides[0] if len(index.shape) else 0
    return istr


def index_select(a, dim: int, index):
    """Entries of ``a`` at the 1-d ``index`` along ``dim``."""
    shape = list(a.shape)
    k = index.shape[0] if len(index.shape) else 1
    if shape:
        shape[dim] = k
    out = _launch.empty(tuple(shape), a.dtype, a.device)
    if numel(shape) == 0:
        return out
    sstr, scale, size = _along(a, dim, len(shape))
    istr = _index_view_strides(index, len(shape), dim) if shape else []
    _gather_walk(out, a, sstr, index, istr, scale, size, "index_select")
    return out


def index_add(a, dim: int, index, src):
    """A copy of ``a`` with slices of ``src`` added at the 1-d ``index`` along ``dim``
    (repeated indices accumulate)."""
    return index_add_(clone(a), dim, index, src)


def index_add_(a, dim: int, index, src):
    """``index_add`` into ``a`` itself (contiguous; a strided ``a`` gets the sums of a copy).
    Returns ``a``."""
    if not _launch.is_contiguous(a):  # (the widened accumulation walks contiguous strides)
        copy_into(a, index_add(a, dim, index, src))
        return a
    out = a
    if numel(src.shape) == 0:
        return out
    nd = len(src.shape)
    dstr, scale, size = _along(out, dim, nd)
    istr = _index_view_strides(index, nd, dim) if a.shape else [0] * nd
    _scatter_walk(src.shape, out, dstr, index, istr, scale, size, "index_add", src,
                  src.strides, True)
    return out


def _broadcast_shape(shapes):
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for s in shapes:
        for i, n in enumerate(s):
            j = nd - len(s) + i
            if n != 1:
                if out[j] not in (1, n):
                    raise ValueError(f"index arrays of shapes {list(shapes)} do not broadcast")
                out[j] = n
    return out


def _broadcast_strides(shape, strides, target):
    """Strides viewing an array of ``shape`` (trailing-aligned) at ``target`` shape."""
    pad = len(target) - len(shape)
    return [0] * pad + [0 if n == 1 else s for n, s in zip(shape, strides)]


def _advanced(op, a_shape, a_strides, indices, device):
    """Geometry of ``a[indices]``: (result shape, target strides per result dim,
    int64 offsets array, its strides per result dim). Indices outside [-size, size) are
    reported for ``op`` and add nothing to the offsets."""
    nd = len(a_shape)
    ind = list(indices) + [None] * (nd - len(indices))
    adv = [d for d in range(nd) if ind[d] is not None]
    bshape = _broadcast_shape([tuple(ind[d].shape) for d in adv])
    rest = [d for d in range(nd) if ind[d] is None]
    if adv == list(range(adv[0], adv[-1] + 1)):  # adjacent: the block stays in place
        layout = ([("d", d) for d in rest if d < adv[0]] + [("b", j) for j in range(len(bshape))]
                  + [("d", d) for d in rest if d > adv[-1]])
    else:  # numpy's rule: separated advanced indices go first
        layout = [("b", j) for j in range(len(bshape))] + [("d", d) for d in rest]
    off = _launch.empty(tuple(bshape), D.int64, device)
    if numel(bshape):
        ostr = contiguous_strides(tuple(bshape))
        err, code = _error_word(op, device)
        for i, d in enumerate(adv):
            ix = ind[d]
            istr = _broadcast_strides(ix.shape, ix.strides, bshape)
            ops = [(off.data_ptr(), 8, ostr), (ix.data_ptr(), ix.dtype.itemsize, istr)]
            for n, s6, ((optr, os_), (ip, is_)), big in plan(tuple(bshape), ops):
                _offsets(grid1(n), Ptr(optr, D.int64), Ptr(ip, ix.dtype), err, n, a_strides[d],
                         a_shape[d], *s6[1:], *os_, *is_, OP=code, FIRST=i == 0, BLOCK=BLOCK,
                         BIG=big)
    offs = off.strides
    shape = [a_shape[x] if k == "d" else bshape[x] for k, x in layout]
    tstr = [a_strides[x] if k == "d" else 0 for k, x in layout]
    ostr = [0 if k == "d" else offs[x] for k, x in layout]
    return shape, tstr, off, ostr


def index(a, indices):
    """Advanced indexing ``a[indices]`` (int64 arrays broadcast together, ``None`` = the
    whole dim), with numpy/torch's result layout."""
    if all(i is None for i in indices):
        return clone(a)
    shape, tstr, off, ostr = _advanced("index", tuple(a.shape), a.strides, indices, a.device)
    out = _launch.empty(tuple(shape), a.dtype, a.device)
    if numel(shape):
        _gather_walk(out, a, tstr, off, ostr, 1, 0, None)
    return out


def index_put_(a, indices, values, accumulate: bool):
    """In place ``a[indices] = values`` (``+=`` when ``accumulate``: repeated indices sum);
    ``values`` broadcasts to the indexed shape. Returns ``a``."""
    if all(i is None for i in indices):
        shape = list(a.shape)
        copy_strided(a.data_ptr(), a.dtype, a.strides, values.data_ptr(), values.dtype,
                     _broadcast_strides(values.shape, values.strides, shape), tuple(shape))
        return a
    if accumulate and a.dtype not in _ATOMIC_DTYPES:
        wide = D.float32 if a.dtype.is_floating_point else D.int64
        work = clone(a, wide)
        index_put_(work, indices, values, True)
        copy_into(a, work)
        return a
    shape, tstr, off, ostr = _advanced("index_put_", tuple(a.shape), a.strides, indices,
                                       a.device)
    if numel(shape) == 0:
        return a
    vstr = _broadcast_strides(values.shape, values.strides, shape)
    _scatter_walk(shape, a, tstr, off, ostr, 1, 0, None, values, vstr, bool(accumulate))
    return a


def nonzero(a):
    """int64 (N, ndim) coordinates of the non-zero elements of ``a``, in C order.

    Synchronises the host once, to learn N."""
    nd = len(a.shape)
    if nd > 8:
        raise NotImplementedError(f"nonzero supports up to 8 dims, got shape {a.shape}")
    n = numel(a.shape)
    if n == 0:
        return _launch.empty((0, nd), D.int64, a.device)
    shape8 = [1] * (8 - nd) + list(a.shape)
    str8 = [0] * (8 - nd) + list(a.strides)
    nblock = 1024
    nb = cdiv(n, nblock)
    capture.check_not_capturing("compute nonzero (its output size is read on the host; "
                                "also boolean-mask indexing and masked_select)", a.device)
    counts = _launch.empty((nb,), D.int64, a.device)
    prefix = _launch.empty((nb + 1,), D.int64, a.device)
    _nz_count((nb,), a, counts, n, *shape8[1:], *str8, BLOCK=nblock)
    _scan((1,), counts, prefix, nb, CH=1024)
    total = int(transfer.item(_array.as_strided(prefix, (), (), nb)))
    out = _launch.empty((total, nd), D.int64, a.device)
    if total and nd:
        _nz_write((nb,), a, prefix, out, n, *shape8[1:], *str8, NDIM=nd, BLOCK=nblock)
    return out
