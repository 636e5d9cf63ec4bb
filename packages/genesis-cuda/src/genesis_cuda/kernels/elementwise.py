"""Elementwise kernels: unary and binary ops, where, clamp, copies, casts and fill.

Two kernels do all the work:

* ``_ew_flat`` — every operand contiguous (or a single broadcast element, or a Python
  scalar): one 1-D pass in large blocks, unmasked except in the last block, so loads and
  stores are 16 bytes wide.
* ``_ew_tiled`` — anything else. The operands' dims are coalesced (dims that are contiguous
  for every operand merge), the last two become a 2-D tile and up to three leading dims are
  walked by the program id. The tile's axes carry "this stride is 1" constexpr flags, so a
  transposed operand is read along its contiguous axis and the compiler transposes through
  shared memory.

Half types compute in float32; bool computes as int8. ``OP`` is a constexpr string, so each
(op, dtype) pair compiles once into straight-line code. What each ``OP`` computes (the
``_compute`` switch and its math helpers) is in ``_elementwise_math.py``; the two kernels'
loads, stores and indexing are in ``_elementwise_kernels.py``; this file holds the host code
that plans, picks and launches them (the tiled kernel's plans: ``elementwise_tiled.py``), and
the contract functions. Copies and casts of contiguous arrays take flat plans as the unary
ops do (``_one_input_kernel``).
"""

from __future__ import annotations

import struct

from genesis import dtypes as D

from . import _launch
from ._elementwise_kernels import _ew_flat
from ._launch import Launcher, aligned, cdiv, collapse, numel, tl_dtype
from .elementwise_tiled import (
    _BCAST,
    _IS_SCALAR,
    _NONE,
    _SCALAR,
    _TENSOR,
    _big_launch,
    _plan_tiled,
    _tiled,  # noqa: F401 - the tiled kernel's launchers, one per warp count
    _walk_tiled,
)

UNARY_BOOL_OUT = frozenset(("logical_not", "isnan", "isinf", "isfinite"))
BINARY_BOOL_OUT = frozenset(("eq", "ne", "lt", "le", "gt", "ge",
                             "logical_and", "logical_or", "logical_xor"))


# ---------------------------------------------------------------------------- host code
FLAT_BYTES = 4096  # bytes of the widest operand per program, and the warps per program:
FLAT_WARPS = 4  # chosen by `tools/bench/ops.py --sweep` (figures in docs/benchmarks.md)
SMALL_BLOCK = 1024  # blocks for tensors of at most this many elements

_flat = Launcher(_ew_flat)
_flat_small = Launcher(_ew_flat, num_warps=4)
_flat_by_warps: dict = {}

_NBITS = {"int8": 7, "int16": 15, "int32": 31, "int64": 63, "uint8": 8, "bool": 1}


def _ct(dtype):
    """Compute dtype (genesis) for storage ``dtype``."""
    if dtype is D.float16 or dtype is D.bfloat16:
        return D.float32
    if dtype is D.bool_:
        return D.int8
    return dtype


def _scalar_arg(value, dtype):
    """(kernel argument, key tag, is-float64-bits) for a Python scalar operand."""
    if dtype.is_floating_point:
        if dtype is D.float64:
            bits = struct.unpack("<q", struct.pack("<d", float(value)))[0]
            return bits, ("b32" if -2**31 <= bits < 2**31 else "b64"), True
        return float(value), "f", False
    v = int(value)
    return v, ("i32" if -2**31 <= v < 2**31 else "i64"), False


# Launch plans of the general entry point, keyed on everything but the operands' addresses
# and scalar values: (op, operand count, compute dtype, device, out's shape, strides, dtype
# and alignment, then per operand x/y/z: None, a scalar's tag, or dtype, strides, alignment).
# A plan is (launch site, grid, the arguments after the pointers and scalars), or
# (None, ...) for the rare geometries launched without a cache (see _plan).
_plans: dict = {}
_MAX_PLANS = 8192  # bound the cache for programs with ever-changing shapes


def launch(op, out, x=None, y=None, z=None, nin=1, ct=None):
    """Run ``op`` writing ``out`` from operands ``x`` (an array of ``out``'s shape, or None),
    ``y`` and ``z`` (arrays of ``out``'s shape, Python scalars or None); ``ct`` is the
    genesis compute dtype. The general entry point of this module: a geometry seen before
    costs one plan lookup."""
    if ct is None:
        ct = _ct((x if x is not None else out).dtype)
    po = out.data_ptr()
    px = kx = None
    if x is not None:
        px = x.data_ptr()
        kx = (x.dtype, x.strides, px & 15 == 0)
    py, ky, ys = _operand(y, ct) if y is not None else _ABSENT
    pz, kz, zs = _operand(z, ct) if z is not None else _ABSENT
    key = (op, nin, ct, out.device, out.shape, out.strides, out.dtype, po & 15 == 0, kx, ky,
           kz)
    plan = _plans.get(key)
    if plan is None:
        plan = _plan(op, out, (x, y, z), nin, ct)
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        _plans[key] = plan
    site, grid, rest = plan
    if site is not None:
        site.launch(0, out.device, grid[0], 1, (po, px, py, pz, ys, zs),
                    (out, x, None if py is None else y, None if pz is None else z), rest)
    elif grid:  # an uncached geometry (int64 indexing or over five dims after collapsing)
        rest(out, (x, y, z), (0, ys, zs))
    return out


_ABSENT = (None, None, 0)


def _operand(v, ct) -> tuple:
    """(address or None, plan-key part, scalar argument) of operand ``y`` or ``z``: an
    array's dtype, strides and alignment, or a Python scalar's class tag."""
    if v.__class__ in _IS_SCALAR:
        arg, tag, _ = _scalar_arg(v, ct)
        return None, tag, arg
    p = v.data_ptr()
    return p, (v.dtype, v.strides, p & 15 == 0), 0


def _plan(op, out, operands, nin, ct):
    """The launch plan of ``launch`` for this geometry (see ``_plans``); operands' values
    and addresses are not part of it."""
    shape = out.shape
    n = numel(shape)
    if n == 0:
        return None, (), None
    odt = out.dtype
    # Each operand gets a mode (_NONE, _TENSOR, _BCAST, _SCALAR). A Python scalar travels as
    # a kernel argument (ys, zs) and its integer/float class goes into the launcher's key.
    modes, arrays, skey, sbits = [], [], [], False
    for v in operands:
        if v is None:
            modes.append(_NONE)
            arrays.append(None)
            skey.append(None)
        elif v.__class__ in _IS_SCALAR:
            _, tag, bits = _scalar_arg(v, ct)
            sbits = sbits or bits
            modes.append(_SCALAR)
            arrays.append(None)
            skey.append(tag)
        else:
            modes.append(_TENSOR)
            arrays.append(v)
            skey.append(None)
    # geometry: dims in the order of out's strides (outer first), then collapsed
    tens = [out] + [a for a in arrays if a is not None]
    ostr = out.strides
    order = sorted(range(len(shape)), key=lambda i: -ostr[i])
    sizes, strides = collapse([shape[i] for i in order],
                              [[t.strides[i] for i in order] for t in tens])
    # a tensor whose collapsed strides are all zero is one broadcast element
    ti = 1
    for k, a in enumerate(arrays):
        if a is not None:
            if not any(strides[ti]):
                modes[k] = _BCAST
            ti += 1
    any_block = _TENSOR in modes  # else the result is one value, broadcast over the block
    modes = tuple(modes)
    nbits = _NBITS.get(ct.name, 0)
    common = (op, modes, ct.name, odt.name, sbits, nin, nbits)
    keyed = (common, tuple(skey), out.device)
    if len(sizes) <= 1 and (not strides[0] or strides[0][0] == 1) and all(
            not st or st[0] in (0, 1) for st in strides[1:]):
        return _plan_flat(keyed, out, arrays, n, any_block, ct, odt)
    plan = _plan_tiled(keyed, out, arrays, sizes, strides, modes, any_block, ct, odt)
    if plan is None:  # over five dims: walk the leading ones on the host, each launch planned
        def walk(out, operands, scalars):
            _walk_tiled(keyed, out.device, out, operands, scalars, sizes, strides, modes,
                        any_block, ct, odt)
        return None, True, walk
    return plan


def _flat_block(itemsize_max):
    return max(FLAT_BYTES // itemsize_max, 256)


def _plan_flat(keyed, out, ptrs, n, any_block, ct, odt):
    if n <= SMALL_BLOCK:
        block, launcher = SMALL_BLOCK, _flat_small
    else:
        isz = max([out.dtype.itemsize] + [p.dtype.itemsize for p in ptrs if p is not None])
        block = _flat_block(isz)
        launcher = _flat_by_warps.get(FLAT_WARPS)
        if launcher is None:
            launcher = _flat_by_warps[FLAT_WARPS] = Launcher(_ew_flat, num_warps=FLAT_WARPS)
    op, modes, _, _, sbits, nin, nbits = keyed[0]
    big = n > 2**31 - 2**20
    rest = (n, op, modes[0], modes[1], modes[2], tl_dtype(ct), tl_dtype(odt), sbits, nin,
            nbits, any_block, block, big)
    grid = (cdiv(n, block),)
    if big:
        return None, True, _big_launch(launcher, grid, rest)
    return launcher.site((keyed, block, aligned(out, *ptrs))), grid, rest


# ------------------------------------------------------------------- contract functions
def unary(op, a, out=None):
    """Apply unary ``op`` (one of ``Backend.UNARY_OPS``) elementwise."""
    fn = _unary_cache.get(op) or unary_kernel(op)
    return fn(a, out)


def binary(op, a, b, out=None):
    """Apply binary ``op`` (one of ``Backend.BINARY_OPS``) elementwise; ``b`` may be a scalar."""
    fn = _binary_cache.get(op) or binary_kernel(op)
    return fn(a, b, out)


_unary_cache: dict = {}
_binary_cache: dict = {}
_BIG_N = 2**31 - 2**20


def _flat_plan(op, dt, odt, modes, tag, sbits, n_small, ct):
    """``(site, tail, block)`` of one flat-kernel plan computing in ``ct``: the site's
    variants are ``device << 3 | mask`` (bit ``i`` of ``mask``: pointer ``i`` is 16-byte
    aligned)."""
    nin = 1 if modes[1] == _NONE else 2
    if n_small:
        block, launcher = SMALL_BLOCK, _flat_small
    else:
        block = _flat_block(max(dt.itemsize, odt.itemsize))
        launcher = _flat_by_warps.get(FLAT_WARPS)
        if launcher is None:
            launcher = _flat_by_warps[FLAT_WARPS] = Launcher(_ew_flat, num_warps=FLAT_WARPS)
    tail = (op, modes[0], modes[1], modes[2], tl_dtype(ct), tl_dtype(odt), sbits, nin,
            _NBITS.get(ct.name, 0), True, block, False)
    return launcher.site(("flat", op, dt.name, odt.name, modes, tag, block)), tail, block


def unary_kernel(op):
    """A cached fast callable ``(a, out=None) -> array`` for unary ``op``."""
    fn = _unary_cache.get(op)
    if fn is None:
        fn = _unary_cache[op] = _one_input_kernel(op, _unary_ct)
    return fn


def _one_input_kernel(op, compute):
    """``kernel(a, out=None)``: ``op`` elementwise from ``a`` into ``out`` (made when None),
    computing in ``compute(op, a's dtype, out's dtype)``; contiguous operands take one flat
    plan per (dtypes, size class), anything else ``launch``. The unary ops' kernels, and the
    copies and casts (op ``"copy"``, with ``copy_``'s compute dtypes: ``_copy``)."""
    bool_out = op in UNARY_BOOL_OUT
    plans: dict = {}
    modes = (_TENSOR, _NONE, _NONE)

    def kernel(a, out=None):
        dt = a.dtype
        shape = a.shape
        o = "bool_not" if (dt is D.bool_ and op == "bitwise_not") else op
        if out is None:
            out = _launch.empty(shape, D.bool_ if bool_out else dt, a.device)
        g = _launch.geometry(shape)
        cs, n = g
        if a.strides == cs and out.strides == cs and 0 < n < _BIG_N:
            small = n <= SMALL_BLOCK
            odt = out.dtype
            pk = (dt, odt, small)
            plan = plans.get(pk)
            if plan is None:
                plan = plans[pk] = _flat_plan(o, dt, odt, modes, None, False, small,
                                              compute(o, dt, odt))
            site, tail, block = plan
            pa, po = a.data_ptr(), out.data_ptr()
            dev = a.device
            site.launch(dev << 3 | ((po & 15) == 0) | ((pa & 15) == 0) << 1, dev,
                        (n + block - 1) // block, 1, (po, pa, None, None, 0, 0, n), (out, a),
                        tail)
            return out
        return launch(o, out, a, None, None, 1, compute(o, dt, out.dtype))

    return kernel


def _unary_ct(op, dt, odt):
    """The compute dtype of unary ``op`` on ``dt``: half types in float32, bool as int8."""
    return _ct(dt) if op != "bool_not" else D.int8


def _copy_ct(op, src, dst):
    """The compute dtype of a copy from ``src`` to ``dst`` (genesis dtypes)."""
    if dst is D.float16 or dst is D.bfloat16:
        return D.float32  # torch converts to half types through float32 too
    if src is D.bool_:
        return D.bool_ if dst is D.bool_ else D.int8
    ct = _ct(src)
    return D.float64 if ct is D.float32 and dst is D.float64 else ct


def binary_kernel(op):
    """A cached fast callable ``(a, b, out=None) -> array`` for binary ``op``."""
    fn = _binary_cache.get(op)
    if fn is not None:
        return fn
    bool_out = op in BINARY_BOOL_OUT
    plans: dict = {}
    tensor_modes = (_TENSOR, _TENSOR, _NONE)
    scalar_modes = (_TENSOR, _SCALAR, _NONE)

    def kernel(a, b, out=None):
        dt = a.dtype
        shape = a.shape
        if out is None:
            out = _launch.empty(shape, D.bool_ if bool_out else dt, a.device)
        g = _launch.geometry(shape)
        cs, n = g
        if 0 < n < _BIG_N and a.strides == cs and out.strides == cs:
            small = n <= SMALL_BLOCK
            odt = out.dtype
            dev = a.device
            if b.__class__ in _IS_SCALAR:
                arg, tag, bits = _scalar_arg(b, _ct(dt))
                pk = (dt, odt, small, tag)
                plan = plans.get(pk)
                if plan is None:
                    plan = plans[pk] = _flat_plan(op, dt, odt, scalar_modes, tag, bits, small,
                                                  _ct(dt))
                site, tail, block = plan
                pa, po = a.data_ptr(), out.data_ptr()
                site.launch(dev << 3 | ((po & 15) == 0) | ((pa & 15) == 0) << 1, dev,
                            (n + block - 1) // block, 1, (po, pa, None, None, arg, 0, n),
                            (out, a), tail)
                return out
            if b.strides == cs and b.dtype is dt:
                pk = (dt, odt, small)
                plan = plans.get(pk)
                if plan is None:
                    plan = plans[pk] = _flat_plan(op, dt, odt, tensor_modes, None, False, small,
                                                  _ct(dt))
                site, tail, block = plan
                pa, pb, po = a.data_ptr(), b.data_ptr(), out.data_ptr()
                site.launch(dev << 3 | ((po & 15) == 0) | ((pa & 15) == 0) << 1
                            | ((pb & 15) == 0) << 2, dev, (n + block - 1) // block, 1,
                            (po, pa, pb, None, 0, 0, n), (out, a, b), tail)
                return out
        return launch(op, out, a, b, None, 2)

    if op == "pow":
        kernel = _refusing_negative_integer_exponents(kernel)
    _binary_cache[op] = kernel
    return kernel


def _refusing_negative_integer_exponents(pow_kernel):
    """``pow_kernel`` with torch's host-side check: an integer tensor to a negative integer
    Python exponent is an error (a tensor of exponents is not checked: that would need the
    data; its negative entries give torch's 1, -1 or 0)."""
    def kernel(a, b, out=None):
        if b.__class__ is int and b < 0 and not a.dtype.is_floating_point:
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        return pow_kernel(a, b, out)

    return kernel


def where(cond, a, b):
    """``a`` where ``cond`` else ``b``; ``a`` or ``b`` (not both) may be a Python scalar."""
    like = a if a.__class__ not in _IS_SCALAR else b
    out = _launch.empty(cond.shape, like.dtype, cond.device)
    return launch("where", out, cond, a, b, 3, _ct(like.dtype))


def clamp(a, lo, hi, out=None):
    """``min(max(a, lo), hi)`` with scalar bounds, either may be None (NaN propagates)."""
    if out is None:
        out = _launch.empty(a.shape, a.dtype, a.device)
    nin = 1 | (2 if lo is not None else 0) | (4 if hi is not None else 0)
    return launch("clamp", out, a, lo, hi, nin)


def copy_(dst, src):
    """Copy ``src`` into ``dst`` (same shape and device, any strides, casting). Returns dst."""
    return _copy(src, dst)


def cast(a, dtype):
    """``a`` converted to ``dtype`` (a new contiguous array), or ``a`` if it already is."""
    if a.dtype is dtype:
        return a
    return _copy(a, _launch.empty(a.shape, dtype, a.device))


def contiguous(a):
    """``a`` if C-contiguous, else a contiguous copy."""
    if _launch.is_contiguous(a):
        return a
    return _copy(a, _launch.empty(a.shape, a.dtype, a.device))


def fill_(a, value):
    """Fill ``a`` (any strides) with the scalar ``value``. Returns ``a``."""
    ct = _ct(a.dtype) if a.dtype is not D.bool_ else D.int8
    if a.dtype is D.bool_:
        value = int(bool(value))
    return launch("fill", a, None, value, None, 0, ct)


_copy = _one_input_kernel("copy", _copy_ct)  # (src, dst): copies and casts
