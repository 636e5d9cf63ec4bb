"""Multi-tensor copy: ``dst[...] = src`` for many pairs of strided arrays in one launch.

The kernel of the fused op ``multi_tensor_copy_`` (declared by genesis-distributed's
``fsdp/copy_plan.py``): FSDP's copy-out after an all-gather and its packing before a
reduce-scatter, each one call over every piece of a parameter group, as torch FSDP2's
``split_with_sizes_copy`` and ``chunk_cat``. The pairs are walked through ``optim``'s device
table of addresses and chunk owners (one program per ``CHUNK`` elements of some pair), with a
block of per-pair geometry appended after the chunk starts:

    [n1 n2 n3 | d0 d1 d2 d3 | s0 s1 s2 s3 | flat]   (G = 12 ints a pair)

the pair's shape simplified on the host (``_launch.collapse``: size-1 dims dropped, dims
contiguous in both operands merged) and padded to ``MAXD`` leading dims (``n0`` is implied
by the element count), each operand's strides, and whether both are one contiguous run.
A flat pair is copied with vector loads; any other is walked by unravelling each element's
C-order index (a zero stride in ``src`` broadcasts). Values are cast as the backend's
``copy_`` casts: to a 16-bit float through float32.

One launch per distinct ``(dst dtype, src dtype)`` among the pairs; the table is cached by the
addresses and geometry it holds (``optim._table``), so a step whose buffers come back at the
same addresses pays no upload. The kernel returns ``NotImplemented`` (genesis then runs the
row's composite, a loop of ``copy_``) for a dtype other than the floating ones, more than
``MAXD`` dims after simplification, or arrays on different devices. Pairs must not overlap
one another (they are copied at once, as torch's foreach copies are).

Tested by ``tests/cuda/test_kernels_multi_tensor_copy.py`` (on a GPU, and on the CPU under
the Triton interpreter through ``test_multi_tensor_copy_interpreted.py``); measured by
``tools/bench/fsdp.py``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from genesis import dtypes as D

from . import optim as _optim
from ._launch import Launcher, collapse, numel, tl_dtype
from .layout import needs_i64
from .optim import _chunk, _offsets, _ptr

MAXD = 4  # dims a pair may keep after simplification (FSDP's copies keep at most 3)
G = 12  # ints of geometry a pair
TABLE_CACHE = 64  # tables kept: two a parameter group (copy-out, packing), typically
_DTYPES = (D.float32, D.bfloat16, D.float16, D.float64)


# ------------------------------------------------------------------------------ kernel
@triton.jit
def _convert(x, DST: tl.constexpr):
    """``x`` in ``DST`` as the backend's ``copy_`` converts: a 16-bit float through float32."""
    if x.dtype != DST:
        if DST.primitive_bitwidth == 16:
            x = x.to(tl.float32)
        x = x.to(DST)
    return x


@triton.jit(do_not_specialize=["T"])
def _copy_kernel(tab_ptr, T, DST: tl.constexpr, SRC: tl.constexpr, G: tl.constexpr,
                 ALIGNED: tl.constexpr, BIG: tl.constexpr, CHUNK: tl.constexpr,
                 BLOCK: tl.constexpr):
    t, start, n, whole = _chunk(tab_ptr, T, 2, CHUNK)
    d_ptr = _ptr(tab_ptr + t * 2, 0, DST, ALIGNED)
    s_ptr = _ptr(tab_ptr + t * 2, 1, SRC, ALIGNED)
    geo = tab_ptr + T * 3 + 2 * tl.num_programs(0) + t * G  # this pair's geometry
    if tl.load(geo + 11) != 0:  # flat: one contiguous run in both (vector loads)
        for i in range(0, CHUNK, BLOCK):
            offs = _offsets(start, i, BLOCK)
            if whole:
                tl.store(d_ptr + offs, _convert(tl.load(s_ptr + offs), DST))
            else:
                mask = offs < n
                x = tl.load(s_ptr + offs, mask=mask)
                tl.store(d_ptr + offs, _convert(x, DST), mask=mask)
    else:
        n1, n2, n3 = tl.load(geo), tl.load(geo + 1), tl.load(geo + 2)
        d0, d1, d2, d3 = tl.load(geo + 3), tl.load(geo + 4), tl.load(geo + 5), tl.load(geo + 6)
        s0, s1, s2, s3 = tl.load(geo + 7), tl.load(geo + 8), tl.load(geo + 9), tl.load(geo + 10)
        if not BIG:  # (the host checked that every index and offset fits in int32)
            n1, n2, n3 = n1.to(tl.int32), n2.to(tl.int32), n3.to(tl.int32)
            d0, d1, d2, d3 = d0.to(tl.int32), d1.to(tl.int32), d2.to(tl.int32), d3.to(tl.int32)
            s0, s1, s2, s3 = s0.to(tl.int32), s1.to(tl.int32), s2.to(tl.int32), s3.to(tl.int32)
        for i in range(0, CHUNK, BLOCK):
            lin = start + i + tl.arange(0, BLOCK)  # the elements' C-order indices
            mask = lin < n
            if not BIG:
                lin = lin.to(tl.int32)
            # (each remainder from its quotient: one integer division a dim, not two)
            q3 = lin // n3
            c3 = lin - q3 * n3
            q2 = q3 // n2
            c2 = q3 - q2 * n2
            c0 = q2 // n1
            c1 = q2 - c0 * n1
            x = tl.load(s_ptr + (c0 * s0 + c1 * s1 + c2 * s2 + c3 * s3), mask=mask)
            tl.store(d_ptr + (c0 * d0 + c1 * d1 + c2 * d2 + c3 * d3), _convert(x, DST),
                     mask=mask)


# ---------------------------------------------------------------------------- launcher
_copy = Launcher(_copy_kernel, num_warps=4)
_tables: dict = {}
_geometries: dict = {}  # (shape, dst strides, src strides) -> (geometry row, big) or None


def _geometry(shape: tuple, dst_strides: tuple, src_strides: tuple):
    """A pair's row of the table's geometry block and whether its indices or offsets leave
    int32; None where it keeps more than ``MAXD`` dims. Cached: a step's copies repeat."""
    key = (shape, dst_strides, src_strides)
    hit = _geometries.get(key, False)
    if hit is not False:
        return hit
    cshape, (dst, src) = collapse(shape, [dst_strides, src_strides])
    if len(cshape) > MAXD:
        hit = None
    else:
        flat = len(cshape) == 0 or (len(cshape) == 1 and dst[0] == 1 and src[0] == 1)
        pad = MAXD - len(cshape)
        sizes = [1] * pad + cshape
        row = (*sizes[1:], *([0] * pad + dst), *([0] * pad + src), int(flat))
        hit = (row, needs_i64(numel(shape), cshape, [dst, src]))
    if len(_geometries) > 4096:  # many distinct geometries: start over
        _geometries.clear()
    _geometries[key] = hit
    return hit


def multi_tensor_copy_(dsts, srcs):
    """``dst[...] = src`` for each pair (arrays of one shape, any strides, a zero stride in
    ``src`` broadcasts, floating dtypes that may differ: cast), one launch per distinct
    ``(dst dtype, src dtype)``. Returns None, or ``NotImplemented`` for operands the kernel
    does not cover (see the module docstring); nothing is launched then.

    Args:
        dsts: the destination arrays.
        srcs: the source arrays, one per destination, of its shape.

    Example:
        >>> multi_tensor_copy_([a[0], b.T], [c, d])  # a[0] = c; b.T = d
    """
    if not dsts:
        return None
    device = dsts[0].device
    groups: dict = {}  # (dst dtype, src dtype) -> (dsts, srcs, geometry rows, big)
    for dst, src in zip(dsts, srcs):
        if dst.dtype not in _DTYPES or src.dtype not in _DTYPES or dst.device != device \
                or src.device != device:
            return NotImplemented  # genesis runs the row's composite
        if dst.shape != src.shape:
            raise ValueError(f"multi_tensor_copy_: a destination of shape {dst.shape} was "
                             f"paired with a source of shape {src.shape}")
        geo = _geometry(dst.shape, dst.strides, src.strides)
        if geo is None:
            return NotImplemented
        group = groups.get((dst.dtype, src.dtype))
        if group is None:
            group = groups[(dst.dtype, src.dtype)] = ([], [], [], [False])
        group[0].append(dst)
        group[1].append(src)
        group[2].extend(geo[0])
        group[3][0] |= geo[1]
    for (dst_dtype, src_dtype), (ds, ss, rows, (big,)) in groups.items():
        table, n_chunks, aligned = _optim._table([ds, ss], device, extra=tuple(rows),
                                                 cache=_tables, cache_size=TABLE_CACHE)
        if n_chunks == 0:  # only empty pairs
            continue
        key = (dst_dtype.name, src_dtype.name, aligned, big, _optim.CHUNK, _optim.BLOCK)
        _copy.launch(key, device, (n_chunks,),
                     (table, len(ds), tl_dtype(dst_dtype), tl_dtype(src_dtype), G, aligned,
                      big, _optim.CHUNK, _optim.BLOCK))
    return None
