"""Rotary position embedding of q and k in one launch, forward and backward.

The contract's ``rotary``: programs over (batch x (q heads + k heads), position blocks);
each reads its head's half-split pairs ``(x[..., i], x[..., i + D/2])`` and the angles'
cos/sin at those positions, and writes the rotated pairs (``inverse``: the transpose, for
the backward). float32 math, one rounding; any strides with a unit last stride (else a
contiguous copy); cos/sin may broadcast over the batch with a zero stride.
"""

from __future__ import annotations

import triton
import triton.language as tl

from genesis import dtypes as D

from . import _launch
from ._launch import Launcher, cdiv, next_pow2, pdl_prologue
from .elementwise import contiguous

_INTS = ["HQ", "HK", "S", "qsb", "qsh", "qss", "ksb", "ksh", "kss", "csb", "css", "ssb", "sss"]


@triton.jit(do_not_specialize=_INTS)
def _rotary(q_ptr, k_ptr, c_ptr, s_ptr, qo_ptr, ko_ptr, HQ, HK, S, qsb, qsh, qss, ksb, ksh,
            kss, csb, css, ssb, sss, HALF: tl.constexpr, BD: tl.constexpr, BS: tl.constexpr,
            INVERSE: tl.constexpr, CT: tl.constexpr, PDL: tl.constexpr):
    pdl_prologue(PDL)  # launched early where it can be (see _launch.dependent_launch)
    pid = tl.program_id(0)
    b = pid // (HQ + HK)
    h = pid % (HQ + HK)
    pos = tl.program_id(1) * BS + tl.arange(0, BS)
    d = tl.arange(0, BD)
    mask = (pos < S)[:, None] & (d < HALF)[None, :]
    if h < HQ:
        src = q_ptr + b.to(tl.int64) * qsb + h * qsh + pos[:, None] * qss
        dst = qo_ptr + ((b.to(tl.int64) * HQ + h) * S + pos[:, None]) * (2 * HALF)
    else:
        src = k_ptr + b.to(tl.int64) * ksb + (h - HQ) * ksh + pos[:, None] * kss
        dst = ko_ptr + ((b.to(tl.int64) * HK + h - HQ) * S + pos[:, None]) * (2 * HALF)
    x1 = tl.load(src + d[None, :], mask=mask, other=0.0).to(CT)
    x2 = tl.load(src + HALF + d[None, :], mask=mask, other=0.0).to(CT)
    cb = c_ptr + b.to(tl.int64) * csb + pos[:, None] * css + d[None, :]
    sb = s_ptr + b.to(tl.int64) * ssb + pos[:, None] * sss + d[None, :]
    c1 = tl.load(cb, mask=mask, other=0.0).to(CT)
    c2 = tl.load(cb + HALF, mask=mask, other=0.0).to(CT)
    s1 = tl.load(sb, mask=mask, other=0.0).to(CT)
    s2 = tl.load(sb + HALF, mask=mask, other=0.0).to(CT)
    if INVERSE:
        o1 = x1 * c1 + x2 * s2
        o2 = x2 * c2 - x1 * s1
    else:
        o1 = x1 * c1 - x2 * s1
        o2 = x2 * c2 + x1 * s2
    ty = qo_ptr.dtype.element_ty
    tl.store(dst + d[None, :], o1.to(ty), mask=mask)
    tl.store(dst + HALF + d[None, :], o2.to(ty), mask=mask)


_launcher = Launcher(_rotary, num_warps=4)


def _unit_last(a):
    if a.shape[-1] > 1 and a.strides[-1] != 1:
        return contiguous(a)
    return a


def rotary(q, k, cos, sin, inverse):
    """Rotated ``(q, k)`` (new contiguous arrays); see the contract."""
    q, k, cos, sin = (_unit_last(a) for a in (q, k, cos, sin))
    b, hq, s, d = q.shape
    hk = k.shape[1]
    qo = _launch.empty(q.shape, q.dtype, q.device)
    ko = _launch.empty(k.shape, k.dtype, k.device)
    if b * s * d == 0 or hq + hk == 0:
        return qo, ko
    half = d // 2
    bd = next_pow2(half)
    bs = max(1, min(64, 2048 // bd))
    ct = tl.float64 if q.dtype is D.float64 else tl.float32
    args = (q, k, cos, sin, qo, ko, hq, hk, s, *q.strides[:3], *k.strides[:3],
            cos.strides[0], cos.strides[1], sin.strides[0], sin.strides[1], half, bd, bs,
            bool(inverse), ct, _launch.dependent_launch(q.device))
    key = (q.dtype.name, cos.dtype.name, half, bs, bool(inverse),
           _launch.aligned(q, k, cos, sin, qo, ko))
    _launcher.launch(key, q.device, (b * (hq + hk), cdiv(s, bs)), args,
                     b * max(hq, hk) * s * d >= 2**31)
    return qo, ko
