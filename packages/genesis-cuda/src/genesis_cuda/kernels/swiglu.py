"""SwiGLU, ``silu(gate) * up``, forward and backward: one elementwise pass each.

Forward reads gate and up once and writes the product; backward reads grad, gate and up
once and writes both gradients. float32 math (float64 stays), rounded once to the inputs'
dtype. The forward also reads rows of a wider array in place (``ROWS``: gate and up as the
two halves of one fused gate/up projection's output); other non-contiguous inputs are
copied contiguous first (the activations of a linear layer are contiguous).
"""

from __future__ import annotations

import triton
import triton.language as tl

from genesis import dtypes as D

from . import _launch
from ._launch import Launcher, aligned, cdiv, is_contiguous, numel
from .elementwise import contiguous

BLOCK = 1024


@triton.jit(do_not_specialize=["n", "cols", "gs", "us"])
def _swiglu_fwd(g_ptr, u_ptr, o_ptr, n, cols, gs, us, CT: tl.constexpr, ROWS: tl.constexpr,
                BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g_offs = offs
    u_offs = offs
    if ROWS:  # (rows, cols) operands with row strides gs, us and unit column stride
        row = offs // cols
        col = offs - row * cols
        g_offs = row * gs + col
        u_offs = row * us + col
    g = tl.load(g_ptr + g_offs, mask=mask, other=0.0).to(CT)
    u = tl.load(u_ptr + u_offs, mask=mask, other=0.0).to(CT)
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

    return contiguous(a)


def _ct(dtype):
    return tl.float64 if dtype is D.float64 else tl.float32


def _row_stride(a):
    """The row stride of ``a`` seen as (rows, last dim) with a unit column stride, or None
    when its leading dims do not merge into one strided row index."""
    if a.shape[-1] != 1 and a.strides[-1] != 1:
        return None
    stride = expected = None
    for size, st in zip(reversed(a.shape[:-1]), reversed(a.strides[:-1])):
        if size == 1:
            continue
        if expected is not None and st != expected:
            return None
        stride = st if stride is None else stride
        expected = st * size
    return a.shape[-1] if stride is None else stride


def swiglu(gate, up):
    """``silu(gate) * up`` in ``gate``'s dtype (a new contiguous array)."""
    cols = gate.shape[-1] if gate.shape else 1
    strides = None
    if not (is_contiguous(gate) and is_contiguous(up)) and gate.shape:
        strides = (_row_stride(gate), _row_stride(up))
        if None in strides:
            gate, up, strides = _dense(gate), _dense(up), None
    out = _launch.empty(gate.shape, gate.dtype, gate.device)
    n = numel(gate.shape)
    if n:
        gs, us = strides or (cols, cols)
        _fwd.launch((gate.dtype.name, strides is not None, aligned(gate, up, out)),
                    gate.device, (cdiv(n, BLOCK),),
                    (gate, up, out, n, cols, gs, us, _ct(gate.dtype), strides is not None,
                     BLOCK),
                    n >= 2**31 or (strides is not None and n // cols * max(gs, us) >= 2**31))
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
