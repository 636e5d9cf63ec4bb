"""Layout kernels: strided copy (with cast and triangle masks), cat, flip, tril/triu, arange.

Every kernel here walks the *logical* elements of a shape in C order and computes each
operand's memory offset from its own strides, so views (transposed, sliced, broadcast,
negative-stride) are read in place, never copied first. Shapes are simplified on the host
first (size-1 dims dropped, dims that are contiguous for every operand merged) and padded
to ``MAXD`` dims; Triton specialises integer arguments equal to 1, so padding costs nothing.

The host helpers at the top (``plan``; ``collapse`` and ``Ptr`` from ``_launch``)
and the jit helpers (``unravel6``, ``offset6``, ...) are shared by the other kernel modules
of this package (indexing, sorting, random, matmul).
"""

import itertools
import math

import triton
import triton.language as tl

from . import _launch, elementwise
from ._launch import Launcher, Ptr, View, cdiv, collapse, contiguous_strides, numel

MAXD = 6  # dims a strided kernel addresses directly; more are split on the host
BLOCK = 1024
_I32_LIMIT = 2**31 - 1


# ----------------------------------------------------------------------- host helpers
def needs_i64(n: int, shape, stride_sets) -> bool:
    """Whether element counts or any operand's offsets can leave int32."""
    if n > _I32_LIMIT:
        return True
    for strides in stride_sets:
        if sum((k - 1) * abs(s) for k, s in zip(shape, strides)) > _I32_LIMIT:
            return True
    return False


_PLANS: dict = {}  # (shape, keep_last, (itemsize, strides) per operand) -> its launches


def plan(shape, operands, keep_last: int = 0):
    """Split a strided walk into launches of at most ``MAXD`` dims.

    ``operands`` is a list of ``(base_ptr, itemsize, strides)``. Yields
    ``(numel, shape6, [(ptr, strides6), ...], big)`` per launch, shapes and strides padded
    to ``MAXD`` leading dims (lists shared between calls: read them, never change them).
    ``keep_last`` trailing dims are kept as they are (not merged, not dropped), for kernels
    that need their coordinates (tril/triu). The launches of a geometry met before are one
    lookup (``_PLANS``); only the base pointers are added per call."""
    key = (tuple(shape), keep_last, *[(op[1], tuple(op[2])) for op in operands])
    launches = _PLANS.get(key)
    if launches is None:
        if len(_PLANS) > 4096:  # many distinct geometries: start over
            _PLANS.clear()
        launches = _PLANS[key] = _plan_launches(shape, operands, keep_last)
    for n, shape6, offsets, big in launches:
        yield n, shape6, [(op[0] + off, strides6)
                          for op, (off, strides6) in zip(operands, offsets)], big


def _plan_launches(shape, operands, keep_last: int) -> list:
    """``plan``'s launches with each operand's byte offset from its base pointer."""
    stride_sets = [tuple(op[2]) for op in operands]
    if keep_last:
        head = len(shape) - keep_last
        cshape, cstr = collapse(shape[:head], [s[:head] for s in stride_sets])
        cshape = cshape + list(shape[head:])
        cstr = [c + list(s[head:]) for c, s in zip(cstr, stride_sets)]
    else:
        cshape, cstr = collapse(shape, stride_sets)
    extra = len(cshape) - MAXD
    lead = [()] if extra <= 0 else itertools.product(*(range(n) for n in cshape[:extra]))
    inner = cshape[max(extra, 0):]
    pad = MAXD - len(inner)
    shape6 = [1] * pad + inner
    n = numel(inner)
    big = needs_i64(n, inner, [s[max(extra, 0):] for s in cstr])
    inner_strides = [[0] * pad + s[max(extra, 0):] for s in cstr]
    launches = []
    for idx in lead:
        offsets = [(sum(i * st for i, st in zip(idx, s)) * op[1], strides6)
                   for op, s, strides6 in zip(operands, cstr, inner_strides)]
        launches.append((n, shape6, offsets, big))
    return launches


def grid1(n: int, block: int = BLOCK):
    return (cdiv(n, block),)


# ----------------------------------------------------------------------- jit helpers
@triton.jit
def unravel6(lin, n1, n2, n3, n4, n5):
    """Coordinates of C-order linear index ``lin`` in a 6-d shape (n0 implied)."""
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
    return c0, c1, c2, c3, c4, c5


@triton.jit
def offset6(c0, c1, c2, c3, c4, c5, s0, s1, s2, s3, s4, s5):
    return c0 * s0 + c1 * s1 + c2 * s2 + c3 * s3 + c4 * s4 + c5 * s5


@triton.jit
def linear_ids(n, BLOCK: tl.constexpr, BIG: tl.constexpr):
    pid = tl.program_id(0)
    if BIG:
        lin = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    else:
        lin = pid * BLOCK + tl.arange(0, BLOCK)
    return lin, lin < n


@triton.jit
def cast(x, dtype: tl.constexpr):
    """``x.to(dtype)``; float64 -> 16-bit floats goes through float32, as torch does."""
    if x.dtype.is_fp64() and dtype.primitive_bitwidth == 16 and dtype.is_floating():
        return x.to(tl.float32).to(dtype)
    return x.to(dtype)


# MODE: 0 plain copy, 1 tril (keep col - row <= k), 2 triu (keep col - row >= k)
@triton.jit
def _copy_kernel(dst, src, n, n1, n2, n3, n4, n5,
                 d0, d1, d2, d3, d4, d5, s0, s1, s2, s3, s4, s5, diag,
                 MODE: tl.constexpr, BLOCK: tl.constexpr, BIG: tl.constexpr):
    lin, mask = linear_ids(n, BLOCK, BIG)
    c0, c1, c2, c3, c4, c5 = unravel6(lin, n1, n2, n3, n4, n5)
    x = tl.load(src + offset6(c0, c1, c2, c3, c4, c5, s0, s1, s2, s3, s4, s5), mask=mask)
    if MODE == 1:
        x = tl.where(c5 - c4 <= diag, x, tl.zeros_like(x))
    if MODE == 2:
        x = tl.where(c5 - c4 >= diag, x, tl.zeros_like(x))
    tl.store(dst + offset6(c0, c1, c2, c3, c4, c5, d0, d1, d2, d3, d4, d5),
             cast(x, dst.dtype.element_ty), mask=mask)


@triton.jit
def scalar_block(value_f, value_i, dtype: tl.constexpr, BLOCK: tl.constexpr):
    """A block of one Python scalar, passed as (float64, int64) so no precision is lost."""
    if dtype.is_floating():
        v = (tl.zeros([BLOCK], tl.float64) + value_f).to(dtype)
    else:
        v = (tl.zeros([BLOCK], tl.int64) + value_i).to(dtype)
    return v


def scalar_args(value):
    """(float64, int64) kernel arguments carrying a Python scalar exactly."""
    if isinstance(value, float):
        return value, 0
    return float(value), int(value)


@triton.jit
def _fill_kernel(dst, n, value_f: tl.float64, value_i: tl.int64, n1, n2, n3, n4, n5,
                 d0, d1, d2, d3, d4, d5, BLOCK: tl.constexpr, BIG: tl.constexpr):
    lin, mask = linear_ids(n, BLOCK, BIG)
    c0, c1, c2, c3, c4, c5 = unravel6(lin, n1, n2, n3, n4, n5)
    x = scalar_block(value_f, value_i, dst.dtype.element_ty, BLOCK)
    tl.store(dst + offset6(c0, c1, c2, c3, c4, c5, d0, d1, d2, d3, d4, d5), x, mask=mask)


@triton.jit
def _arange_kernel(out, n, start: tl.float64, step: tl.float64, istart: tl.int64,
                   istep: tl.int64, IS_INT: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    if IS_INT:
        v = istart + i * istep
    else:
        v = start + i.to(tl.float64) * step
    tl.store(out + i, cast(v, out.dtype.element_ty), mask=i < n)


# ------------------------------------------------------------------------ launchers
_copy = Launcher(_copy_kernel)
_fill = Launcher(_fill_kernel)
_arange = Launcher(_arange_kernel)


def copy_strided(dst_ptr: int, dst_dtype, dst_strides, src_ptr: int, src_dtype, src_strides,
                 shape, mode: int = 0, diag: int = 0) -> None:
    """Copy (casting) ``shape`` elements between two strided views given by raw pointers."""
    if numel(shape) == 0:
        return
    ops = [(dst_ptr, dst_dtype.itemsize, dst_strides), (src_ptr, src_dtype.itemsize, src_strides)]
    for n, s6, ((dp, ds), (sp, ss)), big in plan(shape, ops, keep_last=2 if mode else 0):
        _copy(grid1(n), Ptr(dp, dst_dtype), Ptr(sp, src_dtype), n, *s6[1:], *ds, *ss, diag,
              MODE=mode, BLOCK=BLOCK, BIG=big)


def copy_into(dst, src) -> None:
    """``dst[...] = src`` for two arrays of one shape (dtypes may differ: cast)."""
    copy_strided(dst.data_ptr(), dst.dtype, dst.strides, src.data_ptr(), src.dtype,
                 src.strides, tuple(src.shape))


def clone(a, dtype=None):
    """A new contiguous copy of ``a`` (cast to ``dtype`` when given)."""
    out = _launch.empty(a.shape, dtype or a.dtype, a.device)
    copy_into(out, a)
    return out


def fill_(a, value):
    """Fill array ``a`` (any strides) with a Python scalar."""
    if numel(a.shape) == 0:
        return a
    vf, vi = scalar_args(value)
    for n, s6, ((p, ds),), big in plan(tuple(a.shape), [(a.data_ptr(), a.dtype.itemsize,
                                                         a.strides)]):
        _fill(grid1(n), Ptr(p, a.dtype), n, vf, vi, *s6[1:], *ds, BLOCK=BLOCK, BIG=big)
    return a


def cat(arrays, dim: int):
    """Concatenate arrays of one dtype along ``dim`` (other dims equal)."""
    first = arrays[0]
    shape = list(first.shape)
    shape[dim] = sum(x.shape[dim] for x in arrays)
    out = _launch.empty(tuple(shape), first.dtype, first.device)
    ostr = contiguous_strides(shape)
    base, pos = out.data_ptr(), 0
    for x in arrays:
        if numel(x.shape) == 0:
            continue
        # each part through the elementwise copy: its launch plans are cached per geometry
        part = View(base + pos * ostr[dim] * out.dtype.itemsize, x.shape, ostr, out.dtype,
                    out.device)
        elementwise.copy_(part, x)
        pos += x.shape[dim]
    return out


def flip(a, dims):
    """A contiguous copy of ``a`` reversed along ``dims``."""
    out = _launch.empty(a.shape, a.dtype, a.device)
    if numel(a.shape) == 0:
        return out
    strides = list(a.strides)
    start = a.data_ptr()
    for d in dims:
        start += (a.shape[d] - 1) * strides[d] * a.dtype.itemsize
        strides[d] = -strides[d]
    copy_strided(out.data_ptr(), out.dtype, contiguous_strides(a.shape), start, a.dtype,
                 strides, tuple(a.shape))
    return out


def _triangle(a, k: int, mode: int):
    out = _launch.empty(a.shape, a.dtype, a.device)
    if numel(a.shape):
        copy_strided(out.data_ptr(), out.dtype, contiguous_strides(a.shape), a.data_ptr(),
                     a.dtype, a.strides, tuple(a.shape), mode=mode, diag=int(k))
    return out


def tril(a, k: int):
    """Lower triangle of the last two dims (``col - row <= k``), zeros elsewhere."""
    return _triangle(a, k, 1)


def triu(a, k: int):
    """Upper triangle of the last two dims (``col - row >= k``), zeros elsewhere."""
    return _triangle(a, k, 2)


def arange(start, end, step, dtype, device):
    """``[start, start+step, ...)`` up to ``end`` (exclusive), sized as torch.arange."""
    if step == 0:
        raise ValueError("arange: step must be non-zero")
    n = max(0, math.ceil((end - start) / step))
    out = _launch.empty((n,), dtype, device)
    if n:
        is_int = not dtype.is_floating_point
        istart = int(start) if is_int else 0
        istep = int(step) if is_int else 0
        _arange(grid1(n), out, n, float(start), float(step), istart, istep, IS_INT=is_int,
                BLOCK=BLOCK)
    return out
