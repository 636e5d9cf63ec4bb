"""Device code of the elementwise family: the flat and the tiled kernel (see
``elementwise.py`` for when each runs and ``_elementwise_math.py`` for what each ``OP``
computes). An operand's mode: 0 absent, 1 a tensor read with strides, 2 one broadcast
element, 3 a Python scalar passed as a kernel argument.
"""

import triton
import triton.language as tl

from ._elementwise_math import _compute


@triton.jit
def _scalar(s, SBITS: tl.constexpr):
    if SBITS:  # a float64 scalar travels as its int64 bit pattern
        v = s.to(tl.int64).to(tl.float64, bitcast=True)
    else:
        v = s
    return v


@triton.jit
def _load_flat(ptr, s, offs, mask, MODE: tl.constexpr, SBITS: tl.constexpr):
    if MODE == 1:
        v = tl.load(ptr + offs, mask=mask)
    elif MODE == 2:
        v = tl.load(ptr)
    elif MODE == 3:
        v = _scalar(s, SBITS)
    else:
        v = 0
    return v


@triton.jit(do_not_specialize=["ys", "zs", "n"])
def _ew_flat(out_ptr, x_ptr, y_ptr, z_ptr, ys, zs, n,
             OP: tl.constexpr, XM: tl.constexpr, YM: tl.constexpr, ZM: tl.constexpr,
             CT: tl.constexpr, OT: tl.constexpr, SBITS: tl.constexpr, NIN: tl.constexpr,
             NBITS: tl.constexpr, ANY_BLOCK: tl.constexpr, BLOCK: tl.constexpr,
             BIG: tl.constexpr):
    pid = tl.program_id(0)
    if BIG:
        start = pid.to(tl.int64) * BLOCK
    else:
        start = pid * BLOCK
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= n:  # a full block: no mask, so accesses vectorise
        x = _load_flat(x_ptr, 0, offs, None, XM, False)
        y = _load_flat(y_ptr, ys, offs, None, YM, SBITS)
        z = _load_flat(z_ptr, zs, offs, None, ZM, SBITS)
        r = _compute(x, y, z, OP, CT, OT, NIN, NBITS)
        if not ANY_BLOCK:
            r = tl.broadcast_to(r, (BLOCK,))
        tl.store(out_ptr + offs, r)
    else:
        mask = offs < n
        x = _load_flat(x_ptr, 0, offs, mask, XM, False)
        y = _load_flat(y_ptr, ys, offs, mask, YM, SBITS)
        z = _load_flat(z_ptr, zs, offs, mask, ZM, SBITS)
        r = _compute(x, y, z, OP, CT, OT, NIN, NBITS)
        if not ANY_BLOCK:
            r = tl.broadcast_to(r, (BLOCK,))
        tl.store(out_ptr + offs, r, mask=mask)


@triton.jit
def _offsets(base, r, c, sr, sc, R1: tl.constexpr, C1: tl.constexpr):
    if R1:
        ro = r
    else:
        ro = r * sr
    if C1:
        co = c
    else:
        co = c * sc
    return base + ro[:, None] + co[None, :]


@triton.jit
def _load_tile(ptr, s, base, r, c, sr, sc, mask, MODE: tl.constexpr, R1: tl.constexpr,
               C1: tl.constexpr, SBITS: tl.constexpr):
    if MODE == 1:
        v = tl.load(ptr + _offsets(base, r, c, sr, sc, R1, C1), mask=mask)
    elif MODE == 2:
        v = tl.load(ptr)
    elif MODE == 3:
        v = _scalar(s, SBITS)
    else:
        v = 0
    return v


# The general kernel: out = OP(x, y, z) over a walk of up to three batch dims and a
# (ROWS, COLS) plane cut into (BR, BC) tiles, one tile per program. Its arguments, by group:
#   out_ptr, x_ptr, y_ptr, z_ptr   the operands' first elements (None when absent)
#   ys, zs                         y's / z's value when that operand is a Python scalar
#   NB1, NB2, ROWS, COLS, TR, TC   the walk: batch dims 1 and 2 (dim 0 is the rest of the
#                                  program id), the plane, and its tiles along rows/columns
#   ?b0 ?b1 ?b2 ?sr ?sc            per operand (o, x, y, z): batch strides, row/column strides
#   constexprs                     OP; the operand modes XM/YM/ZM; compute/output types CT/OT;
#                                  SBITS (a float64 scalar travels as its bits); NIN (operand
#                                  count); NBITS (integer width, for shifts); ANY_BLOCK (some
#                                  operand varies); NBATCH; UNIT; the tile BR x BC; BIG (int64)
# Strides are plain arguments rather than tuples so that Triton specialises each on its own
# (a stride of 1, or a multiple of 16, compiles to vector accesses).
@triton.jit(do_not_specialize=["ys", "zs", "NB1", "NB2", "TR", "TC"])
def _ew_tiled(out_ptr, x_ptr, y_ptr, z_ptr, ys, zs,
              NB1, NB2, ROWS, COLS, TR, TC,
              ob0, ob1, ob2, osr, osc, xb0, xb1, xb2, xsr, xsc,
              yb0, yb1, yb2, ysr, ysc, zb0, zb1, zb2, zsr, zsc,
              OP: tl.constexpr, XM: tl.constexpr, YM: tl.constexpr, ZM: tl.constexpr,
              CT: tl.constexpr, OT: tl.constexpr, SBITS: tl.constexpr, NIN: tl.constexpr,
              NBITS: tl.constexpr, ANY_BLOCK: tl.constexpr, NBATCH: tl.constexpr,
              UNIT: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, BIG: tl.constexpr):
    # UNIT: bit flags "stride is 1" — out r,c = 1,2; x 4,8; y 16,32; z 64,128. Sizes and
    # strides are left to Triton's specialisation (multiples of 16 let accesses vectorise).
    pid = tl.program_id(0)
    if BIG:
        pid = pid.to(tl.int64)
    tc = pid % TC
    t = pid // TC
    tr = t % TR
    b = t // TR
    b0 = b
    b1 = b * 0
    b2 = b * 0
    if NBATCH == 2:
        b1 = b % NB1
        b0 = b // NB1
    if NBATCH == 3:
        b2 = b % NB2
        b = b // NB2
        b1 = b % NB1
        b0 = b // NB1
    r = tr * BR + tl.arange(0, BR)
    c = tc * BC + tl.arange(0, BC)
    mask = (r < ROWS)[:, None] & (c < COLS)[None, :]
    x = _load_tile(x_ptr, 0, b0 * xb0 + b1 * xb1 + b2 * xb2, r, c, xsr, xsc, mask, XM,
                   UNIT & 4, UNIT & 8, False)
    y = _load_tile(y_ptr, ys, b0 * yb0 + b1 * yb1 + b2 * yb2, r, c, ysr, ysc, mask, YM,
                   UNIT & 16, UNIT & 32, SBITS)
    z = _load_tile(z_ptr, zs, b0 * zb0 + b1 * zb1 + b2 * zb2, r, c, zsr, zsc, mask, ZM,
                   UNIT & 64, UNIT & 128, SBITS)
    res = _compute(x, y, z, OP, CT, OT, NIN, NBITS)
    if not ANY_BLOCK:
        res = tl.broadcast_to(res, (BR, BC))
    o = _offsets(b0 * ob0 + b1 * ob1 + b2 * ob2, r, c, osr, osc, UNIT & 1, UNIT & 2)
    tl.store(out_ptr + o, res, mask=mask)
