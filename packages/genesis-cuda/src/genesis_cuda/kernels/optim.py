"""Multi-tensor optimizer steps: one launch updates every parameter of a bucket.

The contract's ``adam_step`` and ``sgd_step``. The parameters of a bucket are separate
allocations, so the kernel reads their addresses from a device *table*:

    [ptrs: n_tensors x K int64 | numel: n_tensors | chunk's tensor: C | chunk's start: C]

(``multi_tensor_copy`` lays the chunks over each pair's rows and appends a block of per-pair
geometry after the chunk starts.)

``K`` arrays per tensor (param, grad, then the optimizer's state), and one program per
``CHUNK``-element chunk of some tensor (C chunks in all). The table is built on the host
and uploaded once; it is cached by the addresses it holds, so a training loop whose
parameters, states and (re-allocated at the same addresses) gradients keep their places
reuses it and pays no copy. Math is float32 in registers; for float64 parameters (and
strided or mixed lists) the kernels return ``NotImplemented`` and genesis runs the row's
composite. Parameters and states are stored back in their own dtype, as torch's fused
optimizers do.

Adam's bias corrections are computed in each program, in float64, from the step count: a
kernel argument, or (``capturable``) each tensor's 0-d float32 count in device memory, held in
the table's last column and advanced beforehand by ``_count_kernel``. Both read the same
factors, and nothing is read on the host, so the capturable step replays in a CUDA graph.
"""

from __future__ import annotations

from functools import reduce
from itertools import repeat
from operator import attrgetter, eq, is_, methodcaller, or_

import numpy as np
import triton
import triton.language as tl

from genesis import dtypes as D

from ._launch import Launcher, is_contiguous, numel, tl_dtype
from ._launch import aligned as _launch_aligned

BLOCK = 1024  # elements per inner step
CHUNK = 16 * BLOCK  # elements per program
TABLE_CACHE = 8  # tables kept (one per bucket of a model, typically)


@triton.jit
def _chunk(tab_ptr, T, K: tl.constexpr, CHUNK: tl.constexpr):
    """(tensor index, chunk start, numel, whether the chunk is whole) of this program."""
    pid = tl.program_id(0)
    c = tl.num_programs(0)
    t = tl.load(tab_ptr + T * (K + 1) + pid)
    start = tl.multiple_of(tl.load(tab_ptr + T * (K + 1) + c + pid), CHUNK)
    n = tl.load(tab_ptr + T * K + t)
    return t, start, n, start + CHUNK <= n


@triton.jit
def _ptr(row, j, DT: tl.constexpr, ALIGNED: tl.constexpr):
    """Column ``j``'s address of a table row as a ``DT`` pointer (16-byte aligned when
    ``ALIGNED``: whole blocks then load as vectors)."""
    p = tl.load(row + j).to(tl.pointer_type(DT))
    if ALIGNED:
        p = tl.multiple_of(p, 16)
    return p


@triton.jit
def _offsets(start, i, BLOCK: tl.constexpr):
    return tl.max_contiguous(tl.multiple_of(start + i + tl.arange(0, BLOCK), BLOCK), BLOCK)


@triton.jit
def _adam_block(p_ptr, g_ptr, m_ptr, v_ptr, x_ptr, offs, mask, decay, one_minus_beta1, beta2,
                one_minus_beta2, eps, weight_decay, step_size, bc2_sqrt, DT: tl.constexpr,
                DECOUPLED: tl.constexpr, HAS_WD: tl.constexpr, AMSGRAD: tl.constexpr,
                MAXIMIZE: tl.constexpr):
    p = tl.load(p_ptr + offs, mask=mask).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    m = tl.load(m_ptr + offs, mask=mask).to(tl.float32)
    v = tl.load(v_ptr + offs, mask=mask).to(tl.float32)
    if MAXIMIZE:
        g = -g
    if HAS_WD:
        if DECOUPLED:
            p = p * decay
        else:
            g = g + p * weight_decay
    m = m + (g - m) * one_minus_beta1
    v = v * beta2 + (g * g) * one_minus_beta2
    tl.store(m_ptr + offs, m.to(DT), mask=mask)
    tl.store(v_ptr + offs, v.to(DT), mask=mask)
    if AMSGRAD:
        v = tl.maximum(tl.load(x_ptr + offs, mask=mask).to(tl.float32), v)
        tl.store(x_ptr + offs, v.to(DT), mask=mask)
    denom = tl.sqrt_rn(v) / bc2_sqrt + eps
    tl.store(p_ptr + offs, (p - (m / denom) * step_size).to(DT), mask=mask)


@triton.jit
def _powi(base, e):
    """``base ** e`` for a float64 ``base`` and an integer ``e >= 0`` (by squaring)."""
    r = base * 0.0 + 1.0
    while e > 0:
        if e % 2 == 1:
            r = r * base
        base = base * base
        e = e // 2
    return r


@triton.jit(do_not_specialize=["T", "step"])
def _adam_kernel(tab_ptr, T, lr, step, eps, weight_decay, one_minus_beta1, beta2,
                 one_minus_beta2, BETA1: tl.constexpr, BETA2: tl.constexpr, DT: tl.constexpr,
                 K: tl.constexpr, DECOUPLED: tl.constexpr, HAS_WD: tl.constexpr,
                 AMSGRAD: tl.constexpr, MAXIMIZE: tl.constexpr, STEP_PTR: tl.constexpr,
                 LR_PTR: tl.constexpr, ALIGNED: tl.constexpr, CHUNK: tl.constexpr,
                 BLOCK: tl.constexpr):
    t, start, n, whole = _chunk(tab_ptr, T, K, CHUNK)
    row = tab_ptr + t * K
    p_ptr = _ptr(row, 0, DT, ALIGNED)
    g_ptr = _ptr(row, 1, DT, ALIGNED)
    m_ptr = _ptr(row, 2, DT, ALIGNED)
    v_ptr = _ptr(row, 3, DT, ALIGNED)
    if AMSGRAD:
        x_ptr = _ptr(row, 4, DT, ALIGNED)  # the running max of v
    else:
        x_ptr = v_ptr  # not read
    # The step-dependent factors, in float64 (as the host computes them) from the count:
    # a kernel argument, or (capturable) this tensor's count in device memory, last column.
    if STEP_PTR:
        count = tl.load(_ptr(row, K - 1, tl.float32, False)).to(tl.int32)
    else:
        count = step
    zero = tl.full((), 0.0, tl.float64)  # (adding it widens a float32 scalar argument)
    if LR_PTR:
        lr64 = tl.load(lr).to(tl.float64)
    else:
        lr64 = lr + zero
    bc1 = 1.0 - _powi(tl.full((), BETA1, tl.float64), count)
    bc2 = 1.0 - _powi(tl.full((), BETA2, tl.float64), count)
    step_size = (lr64 / bc1).to(tl.float32)
    bc2_sqrt = tl.sqrt(bc2).to(tl.float32)
    decay = (1.0 - lr64 * (weight_decay + zero)).to(tl.float32)
    for i in range(0, CHUNK, BLOCK):
        offs = _offsets(start, i, BLOCK)
        if whole:  # no mask: full vectors
            _adam_block(p_ptr, g_ptr, m_ptr, v_ptr, x_ptr, offs, None, decay, one_minus_beta1,
                        beta2, one_minus_beta2, eps, weight_decay, step_size, bc2_sqrt, DT,
                        DECOUPLED, HAS_WD, AMSGRAD, MAXIMIZE)
        else:
            _adam_block(p_ptr, g_ptr, m_ptr, v_ptr, x_ptr, offs, offs < n, decay,
                        one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, step_size,
                        bc2_sqrt, DT, DECOUPLED, HAS_WD, AMSGRAD, MAXIMIZE)


@triton.jit(do_not_specialize=["T"])
def _count_kernel(tab_ptr, T, K: tl.constexpr):
    """Advance tensor ``program_id``'s step count (the table's last column) by one."""
    count_ptr = _ptr(tab_ptr + tl.program_id(0) * K, K - 1, tl.float32, False)
    tl.store(count_ptr, tl.load(count_ptr) + 1.0)


@triton.jit
def _sgd_block(p_ptr, g_ptr, b_ptr, offs, mask, lr, momentum, one_minus_dampening,
               weight_decay, DT: tl.constexpr, HAS_WD: tl.constexpr, MOMENTUM: tl.constexpr,
               FIRST: tl.constexpr, NESTEROV: tl.constexpr, MAXIMIZE: tl.constexpr):
    p = tl.load(p_ptr + offs, mask=mask).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    if MAXIMIZE:
        g = -g
    if HAS_WD:
        g = g + p * weight_decay
    if MOMENTUM:
        if FIRST:
            buf = g
        else:
            buf = tl.load(b_ptr + offs, mask=mask).to(tl.float32)
            buf = buf * momentum + g * one_minus_dampening
        tl.store(b_ptr + offs, buf.to(DT), mask=mask)
        if NESTEROV:
            g = g + buf * momentum
        else:
            g = buf
    tl.store(p_ptr + offs, (p - g * lr).to(DT), mask=mask)


@triton.jit(do_not_specialize=["T"])
def _sgd_kernel(tab_ptr, T, lr, momentum, one_minus_dampening, weight_decay, DT: tl.constexpr,
                K: tl.constexpr, HAS_WD: tl.constexpr, MOMENTUM: tl.constexpr,
                FIRST: tl.constexpr, NESTEROV: tl.constexpr, MAXIMIZE: tl.constexpr,
                ALIGNED: tl.constexpr, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    t, start, n, whole = _chunk(tab_ptr, T, K, CHUNK)
    row = tab_ptr + t * K
    p_ptr = _ptr(row, 0, DT, ALIGNED)
    g_ptr = _ptr(row, 1, DT, ALIGNED)
    b_ptr = _ptr(row, K - 1, DT, ALIGNED)  # the momentum buffer (column 2) when K is 3
    for i in range(0, CHUNK, BLOCK):
        offs = _offsets(start, i, BLOCK)
        if whole:
            _sgd_block(p_ptr, g_ptr, b_ptr, offs, None, lr, momentum, one_minus_dampening,
                       weight_decay, DT, HAS_WD, MOMENTUM, FIRST, NESTEROV, MAXIMIZE)
        else:
            _sgd_block(p_ptr, g_ptr, b_ptr, offs, offs < n, lr, momentum, one_minus_dampening,
                       weight_decay, DT, HAS_WD, MOMENTUM, FIRST, NESTEROV, MAXIMIZE)


_adam = Launcher(_adam_kernel, num_warps=4)
_count = Launcher(_count_kernel, num_warps=1)
_sgd = Launcher(_sgd_kernel, num_warps=4)
_tables: dict = {}
_layouts: dict = {}  # (CHUNK, shapes) -> the table's address-free part
_data_ptr = methodcaller("data_ptr")
_shape_of = attrgetter("shape")
_dtype_of = attrgetter("dtype")
_device_of = attrgetter("device")
_KERNEL_DTYPES = (D.float32, D.bfloat16, D.float16)


def upload(table: np.ndarray, device):
    """A device copy of a host int64 table (the kernel tests swap this under the
    interpreter)."""
    from genesis_cuda import transfer

    return transfer.from_numpy(table, device)


def _table(columns, device, aligned_columns: int | None = None, extra: tuple = (),
           shapes: tuple | None = None, cache: dict | None = None,
           cache_size: int = TABLE_CACHE):
    """``(table, chunk count, aligned)`` for ``columns`` (lists of arrays, one list per table
    column): the device table, cached by the addresses and shapes it holds, and whether
    every array of the first ``aligned_columns`` columns (default: all) starts on a 16-byte
    boundary (the kernels' vector loads). ``multi_tensor_copy`` adds the rest: ``extra``
    (ints) is appended after the chunk starts; ``shapes`` replaces the first column's
    shapes as what the chunks are laid over; ``cache`` (default: the optimizers' own) holds
    up to ``cache_size`` tables. All three are part of the cache key."""
    ptrs = []
    for col in columns:
        ptrs += map(_data_ptr, col)
    ptrs = tuple(ptrs)
    if shapes is None:
        shapes = tuple(map(_shape_of, columns[0]))
    t = len(shapes)
    checked = ptrs if aligned_columns is None else ptrs[:aligned_columns * t]
    aligned = (reduce(or_, checked, 0) & 15) == 0
    if cache is None:
        cache = _tables
    key = (device, len(columns), ptrs, shapes, extra)
    hit = cache.get(key)
    if hit is None:
        layout = _layout(shapes)
        grid = np.array(ptrs, dtype=np.int64).reshape(len(columns), t).T.reshape(-1)
        host = np.concatenate([grid, layout, np.array(extra, dtype=np.int64)])
        if len(cache) >= cache_size:
            cache.clear()
        hit = cache[key] = (upload(host, device), (len(layout) - t) // 2)
    return hit + (aligned,)


def _layout(shapes: tuple) -> np.ndarray:
    """The address-free part of a table over arrays of ``shapes``: [numel | chunk's tensor |
    chunk's start]. Cached by the shapes (and CHUNK): gradients re-allocated at new
    addresses every step keep their shapes, so only the address grid is rebuilt."""
    key = (CHUNK, shapes)
    layout = _layouts.get(key)
    if layout is not None:
        return layout
    sizes = np.array([numel(s) for s in shapes], dtype=np.int64)
    t = len(shapes)
    chunks_of = -(-sizes // CHUNK)
    owner = np.repeat(np.arange(t, dtype=np.int64), chunks_of)
    # a chunk's start: CHUNK times its index among its tensor's chunks
    first = np.cumsum(chunks_of) - chunks_of  # index of each tensor's first chunk
    starts = (np.arange(len(owner), dtype=np.int64) - first[owner]) * CHUNK
    if len(_layouts) >= TABLE_CACHE:
        _layouts.clear()
    layout = _layouts[key] = np.concatenate([sizes, owner, starts])
    return layout


def _usable(*lists) -> bool:
    """Whether the fused kernel takes these arrays: contiguous, one dtype, one device,
    a 16- or 32-bit floating dtype (float64 keeps the composite's float64 scalars), and at
    least one element somewhere."""
    first = lists[0][0]
    dtype, device = first.dtype, first.device
    return (dtype in _KERNEL_DTYPES
            and all(all(map(is_, map(_dtype_of, arrays), repeat(dtype)))
                    and all(map(eq, map(_device_of, arrays), repeat(device)))
                    and all(map(is_contiguous, arrays))
                    for arrays in lists)
            and any(map(numel, map(_shape_of, lists[0]))))


def adam_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, step, lr, beta1, beta2,
              eps, weight_decay, decoupled, maximize):
    """One multi-tensor Adam/AdamW step, in place (see the contract). With ``step`` a list
    of 0-d float32 counts (capturable), one launch advances them and the step kernel reads
    each tensor's count (and ``lr``, when an array) from device memory."""
    columns = [params, grads, exp_avgs, exp_avg_sqs]
    if max_exp_avg_sqs is not None:
        columns.append(max_exp_avg_sqs)
    if not params:
        return
    counts = None if isinstance(step, int) else list(step)
    lr_ptr = not isinstance(lr, (int, float))
    scalars = (counts or []) + ([lr] if lr_ptr else [])
    if not _usable(*columns) or not _device_scalars(scalars, params[0].device):
        return NotImplemented  # genesis runs the row's composite
    first = params[0]
    k = len(columns)  # the aligned flag covers these columns, not the counts
    if counts is not None:
        columns.append(counts)
    table, n_chunks, aligned = _table(columns, first.device, k)
    k = len(columns)
    if counts is not None:
        _count.launch((k,), first.device, (len(params),), (table, len(params), k))
    flags = (bool(decoupled), weight_decay != 0, max_exp_avg_sqs is not None, bool(maximize),
             counts is not None, lr_ptr, aligned)
    # (floats passed as floats: a Python int argument would be typed, and specialised, as
    # an integer by Triton)
    args = (table, len(params), lr if lr_ptr else float(lr), 0 if counts else step,
            float(eps), float(weight_decay), 1.0 - beta1, float(beta2), 1.0 - beta2,
            float(beta1), float(beta2), tl_dtype(first.dtype), k) + flags + (CHUNK, BLOCK)
    key = (first.dtype.name, k, CHUNK, BLOCK, float(beta1), float(beta2)) + flags
    if lr_ptr:
        key += _launch_aligned(lr)
    _adam.launch(key, first.device, (n_chunks,), args)


def _device_scalars(arrays, device) -> bool:
    """Whether the step kernel reads these (capturable counts, array lr): one-element
    float32 arrays on ``device``."""
    return all(a.dtype is D.float32 and numel(a.shape) == 1 and a.device == device
               for a in arrays)


def sgd_step(params, grads, momentum_buffers, lr, momentum, dampening, weight_decay,
             nesterov, maximize):
    """One multi-tensor SGD step, in place; returns the momentum buffers (see the
    contract)."""
    if not params:
        return []
    bufs = list(momentum_buffers)
    first_step = all(b is None for b in bufs)
    usable = momentum == 0 or first_step or all(b is not None for b in bufs)
    if not usable or not _usable(params, grads, *(() if first_step else (bufs,))):
        return NotImplemented  # genesis runs the row's composite
    first = params[0]
    columns = [params, grads]
    if momentum != 0:
        if first_step:
            from ._launch import empty

            bufs = [empty(g.shape, g.dtype, g.device) for g in grads]
        columns.append(bufs)
    table, n_chunks, aligned = _table(columns, first.device)
    flags = (weight_decay != 0, momentum != 0, first_step, bool(nesterov), bool(maximize),
             aligned)
    args = (table, len(params), lr, momentum, 1 - dampening, weight_decay,
            tl_dtype(first.dtype), len(columns)) + flags + (CHUNK, BLOCK)
    key = (first.dtype.name, len(columns), CHUNK, BLOCK) + flags
    _sgd.launch(key, first.device, (n_chunks,), args)
    return bufs

