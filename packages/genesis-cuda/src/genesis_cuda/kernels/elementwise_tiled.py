"""The tiled elementwise kernel's planning, and the launches that leave the plan cache.

``elementwise.launch`` plans a geometry once and keeps the plan; the plans of ``_ew_tiled``
(anything but all-contiguous operands) are made here: the collapsed dims' sizes and
strides padded to ``(b0, b1, b2, rows, cols)`` per operand, the tile's shape, "this stride is
1" flags and the grid. Over five collapsed dims, the leading dim is walked on the host with
one tiled launch per index (``_walk_tiled``); an extent of 2**31 or more goes through
Triton's fully keyed launch (``_big_launch``).
"""

from __future__ import annotations

from . import _launch
from ._elementwise_kernels import _ew_tiled
from ._launch import Launcher, aligned, cdiv, tl_dtype

# Mode of an operand: absent, a tensor read with strides, one broadcast element, a scalar.
_NONE, _TENSOR, _BCAST, _SCALAR = 0, 1, 2, 3
_IS_SCALAR = (int, float, bool)

_tiled = {w: Launcher(_ew_tiled, num_warps=w) for w in (4, 8)}


def _big_launch(launcher, grid, rest):
    """Launches through Triton's own fully keyed path (i64 integer arguments)."""
    def go(out, operands, scalars):
        objs = [None if v is None or v.__class__ in _IS_SCALAR else v for v in operands]
        launcher.launch(None, out.device, grid, (out, *objs, scalars[1], scalars[2], *rest),
                        big=True)
    return go


def _plan_tiled(keyed, out, ptrs, sizes, strides, modes, any_block, ct, odt):
    """The tiled kernel's plan for collapsed ``sizes``/``strides`` (None over five dims)."""
    if len(sizes) > 5:
        return None
    while len(sizes) < 2:
        sizes.insert(0, 1)
        for st in strides:
            st.insert(0, 0)
    nb = len(sizes) - 2
    rows, cols = sizes[-2], sizes[-1]
    # per-operand strides, padded to (b0, b1, b2, r, c); bcast/scalar/absent get zeros
    full = []
    span = 0
    ti = 0
    for m in (_TENSOR,) + modes:
        st = [0] * len(sizes)
        if m == _TENSOR or m == _BCAST:
            if m == _TENSOR:
                st = strides[ti]
            ti += 1
        span = max(span, sum(s * (d - 1) for s, d in zip(st, sizes)))
        full.append(list(st[:nb]) + [0] * (3 - nb) + [st[-2], st[-1]])
    unit = 0
    transposed = False
    for k, st in enumerate(full):
        m = _TENSOR if k == 0 else modes[k - 1]
        if m != _TENSOR:
            continue
        if st[3] == 1:
            unit |= 1 << (2 * k)
        if st[4] == 1:
            unit |= 2 << (2 * k)
        if st[4] != 1 and st[4] != 0 and st[3] == 1:
            transposed = True
    if transposed:
        br, bc, warps = 64, 64, 4
    else:
        bc = min(_launch.next_pow2(cols), 1024)
        br = max(1, min(_launch.next_pow2(rows), 4096 // bc))
        warps = 8 if br * bc >= 4096 else 4
    tr, tcn = cdiv(rows, br), cdiv(cols, bc)
    nbatch = 1
    for s in sizes[:-2]:
        nbatch *= s
    grid = (tr * tcn * nbatch,)
    extent = max(rows, cols, nbatch, 1)
    big = grid[0] * br * bc >= 2**31 or span >= 2**31 or extent >= 2**31
    nb1 = sizes[1] if nb >= 2 else 1
    nb2 = sizes[2] if nb >= 3 else 1
    op, modes_, _, _, sbits, nin, nbits = keyed[0]
    fo, fx, fy, fz = full
    rest = (nb1, nb2, rows, cols, tr, tcn, *fo, *fx, *fy, *fz,
            op, modes_[0], modes_[1], modes_[2], tl_dtype(ct), tl_dtype(odt), sbits, nin, nbits,
            any_block, max(nb, 1), unit, br, bc, big)
    launcher = _tiled[warps]
    if big:
        return None, True, _big_launch(launcher, grid, rest)
    key = (keyed, aligned(out, *ptrs), nb, unit, br, bc,
           _launch.spec(rows, cols, *fo, *fx, *fy, *fz))
    return launcher.site(key), grid, rest


def _walk_tiled(keyed, device, out, operands, scalars, sizes, strides, modes, any_block, ct,
                odt):
    """Over five collapsed dims (rare): one tiled launch per index of the leading dim."""
    rest_sizes, sub_strides = sizes[1:], [st[1:] for st in strides]
    for i in range(sizes[0]):
        o2 = _launch.Ptr(out.data_ptr() + i * strides[0][0] * odt.itemsize, odt)
        p2 = []
        ti = 1
        for p, m in zip(operands, modes):
            if m == _TENSOR:
                p2.append(_launch.Ptr(p.data_ptr() + i * strides[ti][0] * p.dtype.itemsize,
                                      p.dtype))
                ti += 1
            elif m == _BCAST:
                p2.append(p)
                ti += 1
            else:
                p2.append(None if m == _NONE else p)
        arrays = [None if m == _SCALAR else p for p, m in zip(p2, modes)]
        plan = _plan_tiled(keyed, o2, arrays, list(rest_sizes), [list(s) for s in sub_strides],
                           modes, any_block, ct, odt)
        if plan is None:
            _walk_tiled(keyed, device, o2, p2, scalars, list(rest_sizes),
                        [list(s) for s in sub_strides], modes, any_block, ct, odt)
            continue
        site, grid, rest = plan
        if site is None:
            rest(o2, p2, scalars)
            continue
        objs = (o2, *arrays)
        ptrs = [None if a is None else a.data_ptr() for a in objs]
        site.launch(0, device, grid[0], 1, (*ptrs, scalars[1], scalars[2]), objs, rest)
