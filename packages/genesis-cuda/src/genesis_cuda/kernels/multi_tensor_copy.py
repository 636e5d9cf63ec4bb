"""Multi-tensor copy: ``dst[...] = src`` for many pairs of strided arrays in one launch.

The kernel of the fused op ``multi_tensor_copy_`` (declared by genesis-distributed's
``fsdp/copy_plan.py``): FSDP's copy-out after an all-gather and its packing before a
reduce-scatter, each one call over every piece of a parameter group, as torch FSDP2's
``split_with_sizes_copy`` and ``chunk_cat``.

Each pair's shape is simplified on the host (``_launch.collapse``: size-1 dims dropped, dims
contiguous in both operands merged) into *rows* of its last dim (``cols`` elements) over at
most ``MAXD - 1`` outer dims. The pairs are walked through ``optim``'s device table of
addresses and chunk owners, one program per ``CHUNK`` elements of one row (each row is laid
out ``padded``, a multiple of ``CHUNK``, so no chunk crosses rows), with a block of per-pair
geometry appended after the chunk starts:

    [padded n1 n2 cols | d0 d1 d2 dc | s0 s1 s2 sc | mode]   (G = 13 ints a pair)

the outer sizes (``n0`` implied), each operand's outer strides and row stride, and how a row
is read: ``mode`` 2 (both rows contiguous, every outer stride a multiple of 16 bytes: where
both first elements are 16-byte aligned too, which the kernel checks, vector loads), 1
(contiguous) or 0 (strided; a zero stride in ``src`` broadcasts). The geometry depends on
shapes and strides only, so it is worked out once per geometry (``_geometry``). A program
finds its row's first element from its chunk start (scalar integer division, none per
element), then copies the run. Values are cast as the backend's ``copy_`` casts: to a
16-bit float through float32.

One launch per distinct ``(dst dtype, src dtype)`` among the pairs; the table is cached by the
addresses and geometry it holds (``optim._table``), so a step whose buffers come back at the
same addresses pays no upload. The kernel returns ``NotImplemented`` (genesis then runs the
row's composite, a loop of ``copy_``) for a dtype other than the floating ones, more than
``MAXD`` dims after simplification, or arrays on different devices. Pairs must not overlap
one another (they are copied at once, as torch's foreach copies are). A pair of many short
rows (a transpose of a tall, narrow array) takes a program a row: FSDP's rows are long.

Tested by ``tests/cuda/test_kernels_multi_tensor_copy.py`` (on a GPU, and on the CPU under
the Triton interpreter through ``test_multi_tensor_copy_interpreted.py``) and
``test_kernels_multi_tensor_copy_codegen.py``; measured by ``tools/bench/fsdp.py``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from genesis import dtypes as D

from . import optim as _optim
from ._launch import Launcher, cdiv, collapse, numel, tl_dtype
from .optim import _chunk, _offsets, _ptr

MAXD = 4  # dims a pair may keep after simplification (FSDP's copies keep at most 3)
G = 13  # ints of geometry a pair
TABLE_CACHE = 64  # tables kept: two a parameter group (copy-out, packing), typically
_DTYPES = frozenset((D.float32, D.bfloat16, D.float16, D.float64))


# ------------------------------------------------------------------------------ kernel
@triton.jit
def _convert(x, DST: tl.constexpr):
    """``x`` in ``DST`` as the backend's ``copy_`` converts: a 16-bit float through float32."""
    if x.dtype != DST:
        if DST.primitive_bitwidth == 16:
            x = x.to(tl.float32)
        x = x.to(DST)
    return x


@triton.jit
def _run(d_ptr, s_ptr, col0, end, DST: tl.constexpr, BLOCK: tl.constexpr):
    """Copy the contiguous run ``[col0, col0 + end)`` (``col0`` a multiple of ``BLOCK``):
    whole blocks unmasked, so they load as vectors where the pointers allow."""
    for i in range(0, end, BLOCK):
        offs = _offsets(col0, i, BLOCK)
        if i + BLOCK <= end:
            tl.store(d_ptr + offs, _convert(tl.load(s_ptr + offs), DST))
        else:
            mask = i + tl.arange(0, BLOCK) < end
            x = tl.load(s_ptr + offs, mask=mask)
            tl.store(d_ptr + offs, _convert(x, DST), mask=mask)


@triton.jit(do_not_specialize=["T"])
def _copy_kernel(tab_ptr, T, DST: tl.constexpr, SRC: tl.constexpr, G: tl.constexpr,
                 CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    t, start, _, _ = _chunk(tab_ptr, T, 2, CHUNK)
    geo = tab_ptr + T * 3 + 2 * tl.num_programs(0) + t * G  # this pair's geometry
    padded = tl.load(geo)
    row = start // padded
    col0 = tl.multiple_of(start - row * padded, CHUNK)
    end = tl.minimum(tl.load(geo + 3) - col0, CHUNK).to(tl.int32)  # this chunk's elements
    # the row's first element in each operand, from its coordinates over the outer dims
    n1, n2 = tl.load(geo + 1), tl.load(geo + 2)
    q = row // n2
    c2 = row - q * n2
    c0 = q // n1
    c1 = q - c0 * n1
    d_ptr = _ptr(tab_ptr + t * 2, 0, DST, False) + (
        c0 * tl.load(geo + 4) + c1 * tl.load(geo + 5) + c2 * tl.load(geo + 6))
    s_ptr = _ptr(tab_ptr + t * 2, 1, SRC, False) + (
        c0 * tl.load(geo + 8) + c1 * tl.load(geo + 9) + c2 * tl.load(geo + 10))
    mode = tl.load(geo + 12)
    aligned = ((tl.load(tab_ptr + t * 2) | tl.load(tab_ptr + t * 2 + 1)) & 15) == 0
    if (mode == 2) & aligned:  # every row start of both is 16-byte aligned
        _run(tl.multiple_of(d_ptr, 16), tl.multiple_of(s_ptr, 16), col0, end, DST, BLOCK)
    elif mode != 0:
        _run(d_ptr, s_ptr, col0, end, DST, BLOCK)
    else:  # strided rows (a zero source stride broadcasts)
        dc, sc = tl.load(geo + 7), tl.load(geo + 11)
        for i in range(0, end, BLOCK):
            cols = col0 + i + tl.arange(0, BLOCK)
            mask = i + tl.arange(0, BLOCK) < end
            x = tl.load(s_ptr + cols * sc, mask=mask)
            tl.store(d_ptr + cols * dc, _convert(x, DST), mask=mask)


# ---------------------------------------------------------------------------- launcher
_copy = Launcher(_copy_kernel, num_warps=4)
_tables: dict = {}
_geometries: dict = {}  # (shape, strides, dtypes, CHUNK) -> _geometry's answer


def _geometry(shape: tuple, dst_strides: tuple, src_strides: tuple, dst_size: int,
              src_size: int, chunk: int):
    """A pair's ``(chunked shape, geometry row)``: the ``(rows * padded,)`` its chunks are
    laid over and its row of the table's geometry block (see the module docstring); None
    where it keeps more than ``MAXD`` dims."""
    cshape, (dst, src) = collapse(shape, [dst_strides, src_strides])
    if len(cshape) > MAXD:
        return None
    if not cshape:  # one element
        cshape, dst, src = [1], [1], [1]
    pad = MAXD - len(cshape)
    sizes, dst, src = [1] * pad + cshape, [0] * pad + dst, [0] * pad + src
    padded = cdiv(sizes[-1], chunk) * chunk
    mode = 0
    if dst[-1] == 1 and src[-1] == 1:
        aligned = all(d * dst_size % 16 == 0 and s * src_size % 16 == 0
                      for d, s in zip(dst[:-1], src[:-1]))
        mode = 2 if aligned else 1
    return (numel(sizes[:-1]) * padded,), (padded, *sizes[1:], *dst, *src, mode)


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
    device, chunk = dsts[0].device, _optim.CHUNK
    groups: dict = {}  # (dst dtype, src dtype) -> (dsts, srcs, chunked shapes, geometry)
    for dst, src in zip(dsts, srcs):
        dt, st, shape = dst.dtype, src.dtype, dst.shape
        if dt not in _DTYPES or st not in _DTYPES or dst.device != device \
                or src.device != device:
            return NotImplemented  # genesis runs the row's composite
        if src.shape != shape:
            raise ValueError(f"multi_tensor_copy_: a destination of shape {shape} was "
                             f"paired with a source of shape {src.shape}")
        key = (shape, dst.strides, src.strides, dt, st, chunk)
        geo = _geometries.get(key)
        if geo is None:
            geo = _geometry(shape, dst.strides, src.strides, dt.itemsize, st.itemsize, chunk)
            if geo is None:
                return NotImplemented
            if len(_geometries) > 4096:  # many distinct geometries: start over
                _geometries.clear()
            _geometries[key] = geo
        group = groups.get((dt, st))
        if group is None:
            group = groups[(dt, st)] = ([], [], [], [])
        group[0].append(dst)
        group[1].append(src)
        group[2].append(geo[0])
        group[3].extend(geo[1])
    for (dt, st), (ds, ss, chunked, rows) in groups.items():
        table, n_chunks, _ = _optim._table([ds, ss], device, extra=tuple(rows),
                                           shapes=tuple(chunked), cache=_tables,
                                           cache_size=TABLE_CACHE)
        if n_chunks == 0:  # only empty pairs
            continue
        _copy.launch((dt.name, st.name, chunk, _optim.BLOCK), device, (n_chunks,),
                     (table, len(ds), tl_dtype(dt), tl_dtype(st), G, chunk, _optim.BLOCK))
    return None
