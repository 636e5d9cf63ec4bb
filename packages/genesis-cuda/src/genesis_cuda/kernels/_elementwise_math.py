"""Device-side op math of the elementwise kernels: what each ``OP`` computes on loaded values.

``_compute`` is the one entry point ``elementwise.py``'s ``_ew_flat`` / ``_ew_tiled`` kernels
call: ``copy``/``fill``/``where``/``clamp`` directly, every other op through ``_unary`` or
``_binary``. The ``_m_*`` names are the math functions they use: libdevice on the GPU,
``triton.language`` fallbacks under the Triton interpreter; ``norms.py`` and ``softmax.py``
use them too. All ``@triton.jit``, no host code.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

from . import _launch

# libdevice gives torch's accuracy on the GPU; the Triton interpreter (CPU tests of the
# kernels) has no libdevice, so there the same names fall back to triton.language math.
if not _launch.INTERPRET:
    _m_exp = libdevice.exp
    _m_exp2 = libdevice.exp2
    _m_log = libdevice.log
    _m_log2 = libdevice.log2
    _m_log1p = libdevice.log1p
    _m_expm1 = libdevice.expm1
    _m_sqrt = libdevice.sqrt
    _m_rsqrt = libdevice.rsqrt
    _m_sin = libdevice.sin
    _m_cos = libdevice.cos
    _m_tanh = libdevice.tanh
    _m_erf = libdevice.erf
    _m_floor = libdevice.floor
    _m_ceil = libdevice.ceil
    _m_rint = libdevice.rint
    _m_div_rn = libdevice.div_rn
    _m_fmod = libdevice.fmod
    _m_pow = libdevice.pow
    _m_atan2 = libdevice.atan2
    _m_copysign = libdevice.copysign
else:  # pragma: no cover - interpreter only
    @triton.jit
    def _m_exp(x):
        return tl.exp(x)

    @triton.jit
    def _m_exp2(x):
        return tl.exp2(x)

    @triton.jit
    def _m_log(x):
        return tl.log(x)

    @triton.jit
    def _m_log2(x):
        return tl.log2(x)

    @triton.jit
    def _m_log1p(x):
        return tl.log(1.0 + x)

    @triton.jit
    def _m_expm1(x):
        return tl.exp(x) - 1.0

    @triton.jit
    def _m_sqrt(x):
        return tl.sqrt(x)

    @triton.jit
    def _m_rsqrt(x):
        return tl.rsqrt(x)

    @triton.jit
    def _m_sin(x):
        return tl.sin(x)

    @triton.jit
    def _m_cos(x):
        return tl.cos(x)

    @triton.jit
    def _m_tanh(x):
        e = tl.exp(-2.0 * tl.abs(x))
        t = (1.0 - e) / (1.0 + e)
        return tl.where(x < 0, -t, t)

    @triton.jit
    def _m_erf(x):
        return tl.erf(x)

    @triton.jit
    def _m_floor(x):
        return tl.floor(x)

    @triton.jit
    def _m_ceil(x):
        return tl.ceil(x)

    @triton.jit
    def _m_rint(x):
        r = tl.floor(x + 0.5)
        odd = (r - 2.0 * tl.floor(r * 0.5)) != 0
        return tl.where(((r - x) == 0.5) & odd, r - 1.0, r)

    @triton.jit
    def _m_div_rn(x, y):
        return x / y

    @triton.jit
    def _m_fmod(x, y):
        q = x / y
        t = tl.where(q < 0, tl.ceil(q), tl.floor(q))
        return x - y * t

    @triton.jit
    def _m_pow(x, y):
        return tl.exp(y * tl.log(x))

    @triton.jit
    def _m_atan2(y, x):
        # libdevice is not available under the interpreter: the angle of (x, y) from the
        # octant's ratio t = min/max in [0, 1], halved twice (atan t = 2 atan(t / (1 +
        # sqrt(1 + t^2)))) to |t| <= tan(pi/16), then 13 terms of atan's series (< 1e-17).
        yd = y.to(tl.float64)
        xd = x.to(tl.float64)
        ay = tl.abs(yd)
        ax = tl.abs(xd)
        big = tl.maximum(ax, ay)
        t = tl.minimum(ax, ay) / tl.where(big == 0, 1.0, big)
        t = tl.where((ax == float("inf")) & (ay == float("inf")), 1.0, t)
        t = t / (1.0 + tl.sqrt(1.0 + t * t))
        t = t / (1.0 + tl.sqrt(1.0 + t * t))
        t2 = t * t
        s = tl.zeros_like(t)
        for k in tl.static_range(12, -1, -1):
            s = s * t2 + (1.0 - 2.0 * (k % 2)) / (2 * k + 1)
        r = 4.0 * t * s
        r = tl.where(ay > ax, 1.5707963267948966 - r, r)
        r = tl.where(xd < 0, 3.141592653589793 - r, r)
        r = tl.where((yd < 0) | ((yd == 0) & (1.0 / yd < 0)), -r, r)  # y's sign, -0.0 too
        r = tl.where((xd != xd) | (yd != yd), xd + yd, r)  # NaN in, NaN out
        return r.to(y.dtype)

    @triton.jit
    def _m_copysign(x, y):
        return tl.where(y < 0, -tl.abs(x), tl.abs(x))


@triton.jit
def _unary(x, OP: tl.constexpr, FAST: tl.constexpr):
    # FAST (half-precision results): hardware approximations, whose error (a couple of
    # float32 ulps) vanishes when the result is rounded to 8 or 11 mantissa bits.
    if OP == "neg":
        r = -x
    elif OP == "abs":
        r = tl.abs(x)
    elif OP == "sign":
        if x.dtype.is_floating():
            r = tl.where(x > 0, 1.0, tl.where(x < 0, -1.0, 0.0)).to(x.dtype)  # NaN -> 0
        else:
            r = (x > 0).to(x.dtype) - (x < 0).to(x.dtype)
    elif OP == "exp":
        if FAST:
            r = tl.exp(x)
        else:
            r = _m_exp(x)
    elif OP == "exp2":
        if FAST:
            r = tl.exp2(x)
        else:
            r = _m_exp2(x)
    elif OP == "log":
        if FAST:
            r = tl.log(x)
        else:
            r = _m_log(x)
    elif OP == "log2":
        if FAST:
            r = tl.log2(x)
        else:
            r = _m_log2(x)
    elif OP == "log1p":
        r = _m_log1p(x)
    elif OP == "expm1":
        r = _m_expm1(x)
    elif OP == "sqrt":
        if FAST:
            r = tl.sqrt(x)
        else:
            r = _m_sqrt(x)
    elif OP == "rsqrt":
        if FAST:
            r = tl.rsqrt(x)
        else:
            r = _m_rsqrt(x)
    elif OP == "sin":
        if FAST:
            r = tl.sin(x)
        else:
            r = _m_sin(x)
    elif OP == "cos":
        if FAST:
            r = tl.cos(x)
        else:
            r = _m_cos(x)
    elif OP == "tanh":
        r = _m_tanh(x)
    elif OP == "sigmoid":
        if FAST:
            r = 1.0 / (1.0 + tl.exp(-x))
        else:
            r = 1.0 / (1.0 + _m_exp(-x))
    elif OP == "silu":  # x * sigmoid(x), rounded once
        if FAST:
            r = x / (1.0 + tl.exp(-x))
        else:
            r = x / (1.0 + _m_exp(-x))
    elif OP == "relu":
        r = tl.where(x < 0, 0, x).to(x.dtype)
    elif OP == "erf":
        r = _m_erf(x)
    elif OP == "floor":
        if x.dtype.is_floating():
            r = _m_floor(x)
        else:
            r = x
    elif OP == "ceil":
        if x.dtype.is_floating():
            r = _m_ceil(x)
        else:
            r = x
    elif OP == "round":
        if x.dtype.is_floating():
            r = _m_rint(x)
        else:
            r = x
    elif OP == "logical_not":
        r = x == 0
    elif OP == "isnan":
        r = x != x
    elif OP == "isinf":  # inf - inf is NaN; finite - finite is 0; NaN fails x == x
        r = (x == x) & ((x - x) != (x - x))
    elif OP == "isfinite":
        r = (x - x) == (x - x)
    elif OP == "bitwise_not":
        r = ~x
    else:
        tl.static_assert(False, "unknown unary op")
    return r


@triton.jit
def _ipow(x, y, NBITS: tl.constexpr):
    # square-and-multiply over the exponent's bits; negative exponents as torch does
    neg = y < 0
    # either operand may be a scalar: give both the block's shape so the loop's types hold
    e = tl.where(neg, 0, y) + tl.zeros_like(x)
    base = x + tl.zeros_like(y)
    result = tl.zeros_like(base) + 1
    for _ in range(NBITS):  # a loop, not unrolled: unrolling 63 steps compiles slowly
        result = tl.where((e & 1) != 0, result * base, result)
        e = e >> 1
        base = base * base
    neg_res = tl.where(x == 1, 1, tl.where((x == -1) & ((y & 1) != 0), -1,
                                           tl.where(x == -1, 1, 0))).to(x.dtype)
    return tl.where(neg, neg_res, result)


@triton.jit
def _binary(x, y, OP: tl.constexpr, NBITS: tl.constexpr):
    if OP == "add":
        r = x + y
    elif OP == "sub":
        r = x - y
    elif OP == "mul":
        r = x * y
    elif OP == "div":
        r = _m_div_rn(x, y)
    elif OP == "floor_divide":
        if x.dtype.is_floating():
            zero = tl.zeros_like(x)
            mod = _m_fmod(x, y)
            div = _m_div_rn(x - mod, y)
            div = tl.where((mod != 0) & ((y < 0) != (mod < 0)), div - 1, div)
            fl = _m_floor(div)
            fl = tl.where(div - fl > 0.5, fl + 1, fl)
            q = _m_div_rn(x, y)
            r = tl.where(div != 0, fl, _m_copysign(zero, q))
            r = tl.where(y == 0, q, r)
        else:
            # Triton's // and % truncate (C semantics): step the quotient down where the
            # remainder's sign differs from the divisor's. Integer math throughout: a float
            # quotient loses digits beyond 2**24 (2**53). y == -1 is the negation, wrapping
            # MIN to MIN as any integer overflow (the hardware's MIN / -1 is unspecified).
            d = y
            if x.dtype.is_int_signed():
                d = tl.where(y == -1, 1, y)
            q = x // d
            rem = x % d
            r = tl.where((rem != 0) & ((rem < 0) != (d < 0)), q - 1, q)
            if x.dtype.is_int_signed():
                r = tl.where(y == -1, -x, r)
    elif OP == "remainder":
        if x.dtype.is_floating():
            mod = _m_fmod(x, y)
            r = tl.where((mod != 0) & ((y < 0) != (mod < 0)), mod + y, mod)
        else:
            d = y
            if x.dtype.is_int_signed():  # (x % -1 is 0; MIN % -1 is unspecified in hardware)
                d = tl.where(y == -1, 1, y)
            rem = x % d
            r = tl.where((rem != 0) & ((rem < 0) != (d < 0)), rem + d, rem)
            if x.dtype.is_int_signed():
                r = tl.where(y == -1, 0, r)
    elif OP == "pow":
        if x.dtype.is_floating():
            r = _m_pow(x, y)
        else:
            r = _ipow(x, y, NBITS)
    elif OP == "maximum":
        if x.dtype.is_floating():
            r = tl.where(x != x, x, tl.where(y != y, y, tl.maximum(x, y)))
        else:
            r = tl.maximum(x, y)
    elif OP == "minimum":
        if x.dtype.is_floating():
            r = tl.where(x != x, x, tl.where(y != y, y, tl.minimum(x, y)))
        else:
            r = tl.minimum(x, y)
    elif OP == "atan2":
        r = _m_atan2(x, y)
    elif OP == "eq":
        r = x == y
    elif OP == "ne":
        r = x != y
    elif OP == "lt":
        r = x < y
    elif OP == "le":
        r = x <= y
    elif OP == "gt":
        r = x > y
    elif OP == "ge":
        r = x >= y
    elif OP == "logical_and":
        r = (x != 0) & (y != 0)
    elif OP == "logical_or":
        r = (x != 0) | (y != 0)
    elif OP == "logical_xor":
        r = (x != 0) ^ (y != 0)
    elif OP == "bitwise_and":
        r = x & y
    elif OP == "bitwise_or":
        r = x | y
    elif OP == "bitwise_xor":
        r = x ^ y
    else:
        tl.static_assert(False, "unknown binary op")
    return r


@triton.jit
def _compute(x, y, z, OP: tl.constexpr, CT: tl.constexpr, OT: tl.constexpr,
             NIN: tl.constexpr, NBITS: tl.constexpr):
    """Apply OP to loaded operands; returns the value in the output dtype OT."""
    if OP == "copy":
        r = x.to(CT).to(OT)
    elif OP == "fill":
        r = y.to(OT)
    elif OP == "where":
        r = tl.where(x != 0, y.to(CT), z.to(CT)).to(OT)
    elif OP == "clamp":  # y: lower bound or absent, z: upper bound or absent
        r = x.to(CT)
        if NIN & 2:
            r = tl.where(r < y.to(CT), y.to(CT), r)
        if NIN & 4:
            r = tl.where(r > z.to(CT), z.to(CT), r)
        r = r.to(OT)
    elif OP == "bool_not":
        r = (x == 0).to(OT)
    elif NIN == 1:
        r = _unary(x.to(CT), OP, (OT == tl.bfloat16) or (OT == tl.float16)).to(OT)
    else:
        r = _binary(x.to(CT), y.to(CT), OP, NBITS).to(OT)
    return r
