"""SwiGLU, ``silu(gate) * up``, forward and backward: one elementwise pass each.

Forward reads gate and up once and writes the product; backward reads grad, gate and up
once and writes both gradients. float32 math (float64 stays), rounded once to the inputs'
dtype. Non-contiguous inputs are copied contiguous first (the activations of a linear layer
are contiguous).
"""

from __future__ import annotations

import triton
import triton.language as tl

from genesis import dtypes as D

from . import _launch
from ._launch import Launcher, aligned, cdiv, is_contiguous, numel

BLOCK = 1024


@triton.jit(do_not_specialize=["n"])
def _swiglu_fwd(g_ptr, u_ptr, o_ptr, n, CT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(CT)
    u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(CT)
    s = 1.0 / (1.0 + tl.exp(-g))
    tl.store(o_ptr + offs, (g * s * u).to(o_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["n"])
def _swiglu_bwd(d_ptr, g_ptr, u_ptr, dg_ptr, du_ptr, n, CT: tl.constexpr,
                BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    d = tl.load(d_ptr + offs, mask=mask, other=0.0).to(CT)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(CT)
    u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(CT)
    s = 1.0 / (1.0 + tl.exp(-g))
    dsilu = s * (1.0 + g * (1.0 - s))
    tl.store(dg_ptr + offs, (d * u * dsilu).to(dg_ptr.dtype.element_ty), mask=mask)
    tl.store(du_ptr + offs, (d * g * s).to(du_ptr.dtype.element_ty), mask=mask)


_fwd = Launcher(_swiglu_fwd, num_warps=4)
_bwd = Launcher(_swiglu_bwd, num_warps=4)


def _dense(a):
    if is_contiguous(a):
        return a
    from .elementwise import contiguous

    return contiguous(a)


def _ct(dtype):
    return tl.float64 if dtype is D.float64 else tl.float32


def swiglu(gate, up):
    """``silu(gate) * up`` in ``gate``'s dtype (a new contiguous array)."""
    gate, up = _dense(gate), _dense(up)
    out = _launch.empty(gate.shape, gate.dtype, gate.device)
    n = numel(gate.shape)
    if n:
        _fwd.launch((gate.dtype.name, aligned(gate, up, out)), gate.device, (cdiv(n, BLOCK),),
                    (gate, up, out, n, _ct(gate.dtype), BLOCK), n >= 2**31)
    return out


def swiglu_backward(grad, gate, up):
    """``(grad_gate, grad_up)`` of ``swiglu``."""
    grad, gate, up = _dense(grad), _dense(gate), _dense(up)
    dg = _launch.empty(gate.shape, gate.dtype, gate.device)
    du = _launch.empty(gate.shape, gate.dtype, gate.device)
    n = numel(gate.shape)
    if n:
        _bwd.launch((gate.dtype.name, grad.dtype.name, aligned(grad, gate, up, dg, du)),
                    gate.device, (cdiv(n, BLOCK),), (grad, gate, up, dg, du, n,
                                                    _ct(gate.dtype), BLOCK), n >= 2**31)
    return dg, du
