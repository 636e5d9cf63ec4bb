"""Multi-tensor norm, scale and GradScaler unscale: one launch over many arrays.

The contract's ``multi_tensor_norm``, ``multi_tensor_scale_`` and ``amp_unscale_`` (what
``clip_grad_norm_`` and ``GradScaler.unscale_`` do each step to every gradient). They walk
the arrays through ``optim``'s device table of addresses and chunk owners: one program per
chunk. The norm writes one float32 partial per chunk, and a one-program kernel folds the
partials (square root for the 2-norm); the scale factor is read from device memory, so
nothing waits for the host.
"""

from __future__ import annotations

import triton
import triton.language as tl

from genesis import dtypes as D

from . import _launch
from . import optim as _optim
from ._launch import Launcher, tl_dtype
from .optim import _chunk, _offsets, _ptr

FINISH_BLOCK = 1024


@triton.jit
def _norm_block(x_ptr, offs, mask, acc, nan, INF: tl.constexpr):
    if mask is None:
        x = tl.load(x_ptr + offs).to(tl.float32)
    else:
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if INF:  # max |x|, NaN kept aside (maximum would drop it)
        acc = tl.maximum(acc, tl.abs(x))
        nan = tl.maximum(nan, tl.where(x != x, 1.0, 0.0))
    else:
        acc += x * x
    return acc, nan


@triton.jit(do_not_specialize=["T"])
def _norm_partial(tab_ptr, part_ptr, T, DT: tl.constexpr, INF: tl.constexpr,
                  ALIGNED: tl.constexpr, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    t, start, n, whole = _chunk(tab_ptr, T, 1, CHUNK)
    x_ptr = _ptr(tab_ptr + t, 0, DT, ALIGNED)
    acc = tl.zeros([BLOCK], tl.float32)
    nan = tl.zeros([BLOCK], tl.float32)
    for i in range(0, CHUNK, BLOCK):
        offs = _offsets(start, i, BLOCK)
        if whole:
            acc, nan = _norm_block(x_ptr, offs, None, acc, nan, INF)
        else:
            acc, nan = _norm_block(x_ptr, offs, offs < n, acc, nan, INF)
    if INF:
        res = tl.where(tl.max(nan, 0) > 0, float("nan"), tl.max(acc, 0))
    else:
        res = tl.sum(acc, 0)
    tl.store(part_ptr + tl.program_id(0), res)


@triton.jit(do_not_specialize=["C"])
def _norm_finish(part_ptr, out_ptr, C, INF: tl.constexpr, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], tl.float32)
    nan = tl.zeros([BLOCK], tl.float32)
    for c0 in range(0, C, BLOCK):
        offs = c0 + tl.arange(0, BLOCK)
        p = tl.load(part_ptr + offs, mask=offs < C, other=0.0)
        if INF:
            acc = tl.maximum(acc, p)
            nan = tl.maximum(nan, tl.where(p != p, 1.0, 0.0))
        else:
            acc += p
    if INF:
        res = tl.where(tl.max(nan, 0) > 0, float("nan"), tl.max(acc, 0))
    else:
        res = tl.sqrt_rn(tl.sum(acc, 0))
    tl.store(out_ptr, res)


@triton.jit
def _scale_block(x_ptr, offs, mask, s, bad, DT: tl.constexpr, CHECK: tl.constexpr):
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    if CHECK:  # inf or NaN, looked at before scaling (as torch's kernel does)
        hit = (x != x) | (tl.abs(x) == float("inf"))
        if mask is not None:
            hit = hit & mask
        bad = tl.maximum(bad, hit.to(tl.int32))
    tl.store(x_ptr + offs, (x * s).to(DT), mask=mask)
    return bad


@triton.jit(do_not_specialize=["T"])
def _scale(tab_ptr, s_ptr, found_ptr, T, DT: tl.constexpr, CHECK: tl.constexpr,
           ALIGNED: tl.constexpr, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    t, start, n, whole = _chunk(tab_ptr, T, 1, CHUNK)
    x_ptr = _ptr(tab_ptr + t, 0, DT, ALIGNED)
    s = tl.load(s_ptr).to(tl.float32)
    bad = tl.zeros([BLOCK], tl.int32)
    for i in range(0, CHUNK, BLOCK):
        offs = _offsets(start, i, BLOCK)
        if whole:
            bad = _scale_block(x_ptr, offs, None, s, bad, DT, CHECK)
        else:
            bad = _scale_block(x_ptr, offs, offs < n, s, bad, DT, CHECK)
    if CHECK:
        tl.store(found_ptr, 1.0, mask=tl.max(bad, 0) > 0)


_partial = Launcher(_norm_partial, num_warps=4)
_finish = Launcher(_norm_finish, num_warps=4)
_scaler = Launcher(_scale, num_warps=4)


def multi_tensor_norm(arrays, norm_type):
    """2-norm or max-abs norm of all of ``arrays`` together: a 0-d float32 array."""
    if not _optim._usable(arrays):
        return NotImplemented  # genesis runs the row's composite
    first = arrays[0]
    inf = norm_type == float("inf")
    table, n_chunks, aligned = _optim._table([arrays], first.device)
    part = _launch.empty((n_chunks,), D.float32, first.device)
    out = _launch.empty((), D.float32, first.device)
    dt = tl_dtype(first.dtype)
    key = (first.dtype.name, inf, aligned, _optim.CHUNK, _optim.BLOCK)
    _partial.launch(key, first.device, (n_chunks,),
                    (table, part, len(arrays), dt, inf, aligned, _optim.CHUNK, _optim.BLOCK))
    _finish.launch((inf,), first.device, (1,), (part, out, n_chunks, inf, FINISH_BLOCK))
    return out


def multi_tensor_scale_(arrays, scale):
    """In place ``a *= scale`` (a 0-d device array) for every array."""
    if not _optim._usable(arrays):
        return NotImplemented
    _scale_launch(arrays, scale, scale, False)


def amp_unscale_(arrays, inv_scale, found_inf):
    """GradScaler's unscale and inf/NaN check over every array (see the contract)."""
    if not _optim._usable(arrays):
        return NotImplemented
    _scale_launch(arrays, inv_scale, found_inf, True)


def _scale_launch(arrays, scale, found, check):
    first = arrays[0]
    table, n_chunks, aligned = _optim._table([arrays], first.device)
    key = (first.dtype.name, check, aligned, _launch.aligned(scale, found), _optim.CHUNK,
           _optim.BLOCK)
    _scaler.launch(key, first.device, (n_chunks,),
                   (table, scale, found, len(arrays), tl_dtype(first.dtype), check, aligned,
                    _optim.CHUNK, _optim.BLOCK))
