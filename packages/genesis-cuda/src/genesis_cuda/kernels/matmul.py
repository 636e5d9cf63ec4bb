"""Batched matrix product ``(..., M, K) @ (..., K, N)`` in Triton, tuned for Hopper.

Kernels, by problem:

* M <= 64, one matrix (a decode step's linear layers): ``matmul_small``, which streams the
  weight over every SM (split-K) instead of one row of output tiles.
* ``_mm_tma_kernel`` for fp16/bf16 operands whose rows or columns are contiguous and
  16-byte aligned (the common case, transposed views included): tiles arrive through the
  bulk tensor copy engine (TMA descriptors built on the host) and feed ``wgmma``;
  fp32 accumulation. A transposed operand is read through a descriptor of its real layout
  and transposed in shared memory (``.T``), never copied. Variants: persistent (one program
  per SM walking tiles), batched (per-matrix descriptors made on the device) and split-K
  (``_mm_tma_splitk_kernel``: output tiles that do not fill whole waves of the SMs, as a
  weight gradient ``grad.T @ x`` over 8k tokens; whole waves of tiles run unsplit, the
  tiles left over are split in K and their float32 partials summed in order by
  ``_tile_reduce_kernel``).
* ``_mm_kernel`` for everything else (fp64, odd strides or alignment, more than one
  batch dim that cannot be merged): pointer loads with any strides.

A batch of left operands times one broadcast right operand (``(B, T, C) @ W``, a linear
layer's input gradient) is one ``(B*T, C) @ W`` product when the rows are evenly spaced.

Precision of float32: torch's default (``torch.backends.cuda.matmul.allow_tf32 = False``)
is full fp32. We match it by default with ``FP32_PRECISION = "ieee"`` (fp32 FMA
products, fp32 accumulation). ``"tf32x3"`` (three tf32 products, error close to fp32) and
``"tf32"`` (10-bit mantissa products, as torch with allow_tf32=True) are faster opt-ins.

Tile configurations are chosen per problem bucket by timing a few candidates the first
time a bucket is seen (``matmul_tuning``); small problems take a rule instead.

The kernels' device code is ``matmul_kernels.py``; this file plans and launches them.
How it compares with cuBLAS (through torch), per shape and precision: ``docs/benchmarks.md``.
"""

import math

import triton.language as tl

from genesis import dtypes as D

from . import _launch, matmul_small
from ._launch import Ptr, cdiv, collapse, contiguous_strides, sm_count
from .layout import clone, copy_strided, fill_
from .matmul_kernels import (
    _mm_kernel,
    _mm_tma_batched_kernel,
    _mm_tma_kernel,
    _mm_tma_persistent_kernel,
    _mm_tma_splitk_kernel,
    _tile_reduce_kernel,
)
from .matmul_small import SMALL_M_MAX
from .matmul_tuning import (
    PTR_CANDIDATES,
    TMA_CANDIDATES,
    bucket,
    plan_site,
    small_config,
    splitk_candidates,
    splitk_plan,
    tuned_kernel,
)

FP32_PRECISION = "ieee"  # "ieee" (torch's default), "tf32x3", or "tf32"
_TUNE_MIN_FLOPS = 2**30  # below this (~2 us of tensor-core time), a config by rule, not timing
# Below this, half-precision products take the pointer kernel: a TMA launch encodes three
# tensor maps on the host (several us), more than such a product takes on the GPU.
_TMA_MIN_FLOPS = 2 * 256**3
REDUCE_BLOCK = 1024  # outputs per program of the split-K tile reduction
REDUCE_WARPS = 4


# --------------------------------------------------------------------------- launchers
def _canon(shape, strides):
    """Strides with those of size-1 dims replaced by the contiguous value (they are free)."""
    out = list(strides)
    acc = 1
    for d in range(len(shape) - 1, -1, -1):
        if shape[d] == 1:
            out[d] = acc
        acc = shape[d] * out[d] if shape[d] != 1 else acc
    return out


def _tma_layout(strides, isz: int):
    """'n' if (rows, cols) is row-major, 't' if column-major, None if TMA cannot read it."""
    sr, sc = strides
    if sc == 1 and (sr * isz) % 16 == 0:
        return "n"
    if sr == 1 and (sc * isz) % 16 == 0:
        return "t"
    return None


def _tile_reducer(M, N, whole, rest, split, bm, bn, gm, has_bias, sbias):
    """``reduce(ws, c, bias)`` for the ``rest`` split tiles of ``_mm_tma_splitk_kernel``
    (C contiguous (M, N)); ``REDUCE_BLOCK`` outputs per program."""
    rows = max(1, REDUCE_BLOCK // bn)
    g0, g1 = rest, cdiv(bm, rows)
    site, tail = plan_site(_tile_reduce_kernel, dict(HAS_BIAS=has_bias, BLOCK_M=bm, BLOCK_N=bn,
                                                     GROUP_M=gm, ROWS=rows),
                           num_warps=REDUCE_WARPS)

    def reduce(ws, c, bias):
        site.launch(0, c.device, g0, g1,
                    (ws, c, c if bias is None else bias, M, N, whole, split, N, 1, sbias), None,
                    tail)

    return reduce


def _tma_binder(dt, M, N, K, batch, sa, sb, has_bias, sbias, device):
    """``bind(cfg) -> go(a, b, c, bias)`` for the TMA kernels, or None when TMA cannot read
    these operands (layout or 16-byte alignment). Host descriptors are built once per plan;
    each call points them at its arrays for the launch only (``launch_on``), so a plan
    never keeps the last call's operands, and their memory, alive. Batched problems build
    per-matrix descriptors on the device instead."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    isz = dt.itemsize
    if N * isz % 16:
        return None
    la = _tma_layout(sa[-2:], isz)
    lb = _tma_layout(sb[-2:], isz)
    if la is None or lb is None:
        return None
    batched = batch > 1
    if batched and ((sa[0] * isz) % 16 or (sb[0] * isz) % 16):
        return None
    a_t, b_t = la == "t", lb == "t"
    sa_row = sa[-1] if a_t else sa[-2]
    sb_row = sb[-1] if b_t else sb[-2]
    placeholder = Ptr(0, dt)

    def desc(rows, cols, transposed, srow):
        # Over the operand's real memory layout; block shape set per config.
        shape = [cols, rows] if transposed else [rows, cols]
        return TensorDescriptor(placeholder, shape, [srow, 1], [16, 16])

    # A batch whose matrices are stacked evenly in memory can share one 2-d descriptor per
    # operand (rows of matrix i start at i * rows). That is exact only if no tile straddles
    # two matrices where it matters: C and A tiles need M % BLOCK_M == 0, and K-tiles
    # crossing into the next matrix must meet zero fill on the other operand.
    a_rows = K if a_t else M
    b_rows = N if b_t else K
    stackable = not batched or (sa[0] == a_rows * sa_row and sb[0] == b_rows * sb_row)
    a_desc = desc(batch * M, K, a_t, sa_row) if not a_t else desc(M, batch * K, True, sa_row)
    b_desc = desc(batch * K, N, b_t, sb_row) if not b_t else desc(K, batch * N, True, sb_row)
    c_desc = desc(batch * M, N, False, N)

    sms = sm_count(device)

    def launch_on(a, b, c, site, g0, g1, tail, *args):
        # The descriptors point at a, b, c for this launch only, then at the placeholder.
        a_desc.base, b_desc.base, c_desc.base = a, b, c
        try:
            site.launch(0, c.device, g0, g1, (a_desc, b_desc, c_desc, *args), None, tail)
        finally:
            a_desc.base = b_desc.base = c_desc.base = placeholder

    def bind(cfg):
        tag = cfg[0] if isinstance(cfg[0], str) else ""
        bm, bn, bk, gm, st, nw = cfg[-6:]
        tiles = cdiv(M, bm) * cdiv(N, bn)
        kw = dict(HAS_BIAS=has_bias, A_T=a_t, B_T=b_t, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                  GROUP_M=gm)
        stacked = batched and stackable and M % bm == 0 and (K % bk == 0 or (not a_t and b_t))
        if batched and not stacked:
            site, tail = plan_site(_mm_tma_batched_kernel, kw, num_stages=st, num_warps=nw)

            def go_batched(a, b, c, bias):
                site.launch(0, c.device, tiles, batch,
                            (a, b, c, M, N, K, sa[0], sa_row, sb[0], sb_row,
                             c if bias is None else bias, sbias), None, tail)

            return go_batched
        a_desc.block_shape = [bk, bm] if a_t else [bm, bk]
        b_desc.block_shape = [bn, bk] if b_t else [bk, bn]
        c_desc.block_shape = [bm, bn]
        if tag == "s":  # whole waves of tiles, the rest split in K (see the kernel)
            whole, rest, split, per = splitk_plan(M, N, K, sms, cfg[1], cfg[2:])
            site, tail = plan_site(_mm_tma_splitk_kernel, kw, num_stages=st, num_warps=nw)
            programs = whole + rest * split
            reduce = _tile_reducer(M, N, whole, rest, split, bm, bn, gm, has_bias, sbias)

            def go_split(a, b, c, bias):
                ws = _launch.empty((rest * split, bm, bn), D.float32, c.device) if rest else c
                launch_on(a, b, c, site, programs, 1, tail, ws, M, N, K, whole, split, per,
                          c if bias is None else bias, sbias)
                if rest:
                    reduce(ws, c, bias)

            return go_split
        if tag == "p":
            kw["NUM_SMS"] = sms
            site, tail = plan_site(_mm_tma_persistent_kernel, kw, num_stages=st, num_warps=nw)
            programs = min(sms, tiles * batch)

            def go_persistent(a, b, c, bias):
                launch_on(a, b, c, site, programs, 1, tail, M, N, K, batch, a_rows, b_rows,
                          c if bias is None else bias, sbias)

            return go_persistent
        site, tail = plan_site(_mm_tma_kernel, kw, num_stages=st, num_warps=nw)

        def go(a, b, c, bias):
            launch_on(a, b, c, site, tiles, batch, tail, M, N, K, a_rows, b_rows,
                      c if bias is None else bias, sbias)

        return go

    key = ("tma", dt.name, a_t, b_t, batched, bucket(M), bucket(N), bucket(K),
           bucket(batch))
    if batched:
        return bind, key, TMA_CANDIDATES, small_config("half", M, N)
    return (bind, key, TMA_CANDIDATES + splitk_candidates(M, N, K, sms),
            small_config("half", M, N, K, sms))


def _ptr_binder(dt, M, N, K, bshape, sa, sb, sc, has_bias, sbias):
    """``bind(cfg) -> go(a, b, c, bias)`` for the strided-pointer kernel (any layout)."""
    kind = "fp64" if dt is D.float64 else "fp32" if dt is D.float32 else "half"
    prec = FP32_PRECISION if kind == "fp32" else "ieee" if kind == "fp64" else None
    acc = tl.float64 if kind == "fp64" else tl.float32
    B0, B1 = (list(bshape) + [1, 1])[:2]
    pa = list(sa[:-2]) + [0, 0]
    pb = list(sb[:-2]) + [0, 0]
    pc = list(sc[:-2]) + [0, 0]
    strides = (B1, pa[0], pa[1], sa[-2], sa[-1], pb[0], pb[1], sb[-2], sb[-1],
               pc[0], pc[1], sc[-2], sc[-1])

    def bind(cfg):
        bm, bn, bk, gm, st, nw = cfg
        site, tail = plan_site(_mm_kernel, dict(HAS_BIAS=has_bias, PREC=prec, ACC=acc,
                                                EVEN_K=K % bk == 0, BLOCK_M=bm, BLOCK_N=bn,
                                                BLOCK_K=bk, GROUP_M=gm),
                               num_stages=st, num_warps=nw)
        g0, g1 = cdiv(M, bm) * cdiv(N, bn), B0 * B1

        def go(a, b, c, bias):
            site.launch(0, c.device, g0, g1,
                        (a, b, c, M, N, K, *strides, c if bias is None else bias, sbias), None,
                        tail)

        return go

    key = ("ptr", dt.name, prec, bucket(M), bucket(N), bucket(K), bucket(B0 * B1))
    return bind, key, PTR_CANDIDATES[kind], small_config(kind, M, N)


def _plan_2d(a, b, bias, cshape, M, N, K, bshape, sa, sb, sc, sbias):
    """Pick the kernel and its tile config (timing candidates on these very operands the
    first time a problem bucket is seen); returns ``run(a, b, bias) -> c``."""
    dt = a.dtype
    batch = math.prod(bshape)
    flops = 2 * M * N * K * batch
    has_bias = bias is not None
    if batch == 1 and M <= SMALL_M_MAX and dt in (D.float16, D.bfloat16, D.float32):
        go = matmul_small.plan(dt, M, N, K, sa[-2:], sb[-2:], has_bias, sbias, FP32_PRECISION,
                               a.device)
    else:
        binder = None
        if (dt in (D.float16, D.bfloat16) and len(bshape) <= 1 and flops >= _TMA_MIN_FLOPS
                and _aligned(a, b)):
            binder = _tma_binder(dt, M, N, K, batch, sa, sb, has_bias, sbias, a.device)
        if binder is None:
            binder = _ptr_binder(dt, M, N, K, bshape, sa, sb, sc, has_bias, sbias)
        bind, key, cands, small = binder
        if flops < _TUNE_MIN_FLOPS:
            go = bind(small)
        else:
            scratch = _launch.empty(cshape, dt, a.device)
            go = tuned_kernel(key, cands, bind, lambda cand: bind(cand)(a, b, scratch, bias),
                              flops, a.device)

    def run(a, b, bias):
        c = _launch.empty(cshape, dt, a.device)
        go(a, b, c, bias)
        return c

    return run


def _aligned(*arrays) -> bool:
    return all(x.data_ptr() % 16 == 0 for x in arrays)


# operand geometry (and device) -> run(a, b, bias); bounded. Plans hold host TMA
# descriptors that each call re-points at its arrays: one thread at a time per plan.
_plans: dict = {}


def _remember(key, plan):
    if len(_plans) > 4096:
        _plans.clear()
    _plans[key] = plan
    return plan


def _plan_matmul(a, b):
    *batch_shape, M, K = a.shape
    N = b.shape[-1]
    dt = a.dtype
    if not dt.is_floating_point:  # as torch's CUDA matmul: floating types only
        raise TypeError(f"matmul on CUDA supports float16, bfloat16, float32 and float64 "
                        f"operands, got {dt} (shapes {tuple(a.shape)} and {tuple(b.shape)})")
    cshape = (*batch_shape, M, N)
    if M == 0 or N == 0 or any(n == 0 for n in batch_shape):
        return lambda a, b, bias: _launch.empty(cshape, dt, a.device)
    if K == 0:
        return lambda a, b, bias: fill_(_launch.empty(cshape, dt, a.device), 0)
    nb = len(batch_shape)
    sa = _canon(a.shape, a.strides)
    sb = _canon(b.shape, b.strides)
    sc = list(contiguous_strides(cshape))
    bshape, bstr = collapse(tuple(batch_shape), [sa[:nb], sb[:nb], sc[:nb]])
    if len(bshape) > 2:  # batch dims that cannot be merged: make the operands contiguous
        return lambda a, b, bias: matmul(clone(a), clone(b))
    batch = math.prod(bshape)
    if len(bshape) == 1 and bstr[1][0] == 0 and bstr[0][0] == M * sa[-2]:
        # (B, M, K) @ a broadcast (K, N): rows of every matrix are evenly spaced in memory,
        # one (B*M, K) @ (K, N) product (a linear layer's input gradient, 3-d activations)
        return _plan_2d(a, b, None, cshape, batch * M, N, K, [], sa[nb:], sb[nb:], [N, 1], 0)
    if batch > 65535:  # contiguous operands: split the batch across two grid axes
        return lambda a, b, bias: _matmul_big_batch(clone(a), clone(b), M, N, K, batch)
    return _plan_2d(a, b, None, cshape, M, N, K, bshape, bstr[0] + sa[nb:], bstr[1] + sb[nb:],
                    bstr[2] + sc[nb:], 0)


def matmul(a, b):
    """Batched matrix product: ``a`` (..., M, K) @ ``b`` (..., K, N) -> (..., M, N).

    Same batch shape and floating dtype for both; half types accumulate in float32. The
    kernel choice for an operand geometry is made once and cached, so repeated calls cost
    one dictionary lookup plus the launch.

    Example: ``matmul(x, w)`` with x (B, T, C) and w (B, C, H) gives (B, T, H).
    """
    key = ("mm", a.shape, a.strides, b.shape, b.strides, a.dtype, a.device, FP32_PRECISION,
           (a.data_ptr() | b.data_ptr()) & 15 == 0)
    plan = _plans.get(key)
    if plan is None:
        plan = _remember(key, _plan_matmul(a, b))
    return plan(a, b, None)


def _matmul_big_batch(a, b, M, N, K, batch):
    # More than 65535 matrices: view the contiguous batch as (batch/B1, B1).
    B1 = 1
    for d in range(min(65535, batch), 0, -1):
        if batch % d == 0 and batch // d <= 65535:
            B1 = d
            break
    if batch // B1 > 65535:
        raise ValueError(f"matmul: batch of {batch} matrices is too large for one launch")
    c = _launch.empty((*a.shape[:-2], M, N), a.dtype, a.device)
    sa = [B1 * M * K, M * K, K, 1]
    sb = [B1 * K * N, K * N, N, 1]
    sc = [B1 * M * N, M * N, N, 1]
    bind, key, cands, small = _ptr_binder(a.dtype, M, N, K, [batch // B1, B1], sa, sb, sc,
                                          False, 0)
    bind(small)(a, b, c, None)
    return c


def _plan_linear(x, weight, bias):
    *lead, K = x.shape
    N = weight.shape[0]
    dt = x.dtype
    cshape = (*lead, N)
    M = math.prod(lead)
    if M == 0 or N == 0:
        return lambda x, w, bias: _launch.empty(cshape, dt, x.device)
    if K == 0:
        def bias_only(x, w, bias):
            c = _launch.empty(cshape, dt, x.device)
            if bias is None:
                return fill_(c, 0)
            copy_strided(c.data_ptr(), dt, contiguous_strides(cshape), bias.data_ptr(),
                         bias.dtype, [0] * len(lead) + [bias.strides[0]], cshape)
            return c
        return bias_only
    lshape, (lstr,) = collapse(tuple(lead), [list(x.strides[:-1])])
    if len(lshape) > 1:  # leading dims that do not merge into one M dim: copy x first
        return lambda x, w, bias: linear(clone(x), w, bias)
    sa = _canon((M, K), [lstr[0] if lshape else K, x.strides[-1]])
    sb = _canon((K, N), [weight.strides[1], weight.strides[0]])
    sbias = bias.strides[0] if bias is not None else 0
    return _plan_2d(x, weight, bias, cshape, M, N, K, [], sa, sb, [N, 1], sbias)


def _plan_swiglu_linear(gate_up, weight, bias):
    """``run(gate_up, weight, bias)`` for ``swiglu_linear``: the gated small-M kernel where
    the rows are few (a decode step), else ``NotImplemented``: genesis runs the row's
    composite (``swiglu`` reading the two halves in place, then ``linear``)."""
    *lead, K2 = gate_up.shape
    K, N, M = K2 // 2, weight.shape[0], math.prod(lead)
    dt = gate_up.dtype
    lshape, (lstr,) = collapse(tuple(lead), [list(gate_up.strides[:-1])])
    if (not 1 <= M <= SMALL_M_MAX or N == 0 or K == 0 or len(lshape) > 1
            or dt not in (D.float16, D.bfloat16, D.float32)):
        return lambda g, w, bias: NotImplemented  # genesis runs the row's composite
    # the column stride as it is (the kernel finds up K columns after gate through it)
    sa = (lstr[0] if lshape else K2, gate_up.strides[-1])
    sb = _canon((K, N), [weight.strides[1], weight.strides[0]])
    sbias = bias.strides[0] if bias is not None else 0
    go = matmul_small.plan(dt, M, N, K, sa, sb, bias is not None, sbias, FP32_PRECISION,
                           gate_up.device, gated=True)
    cshape = (*lead, N)

    def run(g, w, bias):
        c = _launch.empty(cshape, dt, g.device)
        go(g, w, c, bias)
        return c

    return run


def swiglu_linear(gate_up, weight, bias):
    """``linear(swiglu(gate, up), weight, bias)`` with ``gate``/``up`` the two halves of
    ``gate_up``'s last dim: gate_up (..., 2K), weight (N, K), bias (N,) or None -> (..., N).

    At most ``SMALL_M_MAX`` rows (a decode step): one launch of the small-M kernel, which
    makes the SwiGLU product as it loads the left operand; more rows: ``NotImplemented``
    (genesis runs the row's composite, ``swiglu`` then ``linear``). Plans are cached as
    ``linear``'s.

    Example: ``swiglu_linear(h, w_down, None)`` with h (B, 1, 2I), w_down (H, I) gives
    (B, 1, H).
    """
    key = ("swl", gate_up.shape, gate_up.strides, weight.shape, weight.strides,
           gate_up.dtype, gate_up.device, FP32_PRECISION,
           None if bias is None else bias.strides,
           (gate_up.data_ptr() | weight.data_ptr()) & 15 == 0)
    plan = _plans.get(key)
    if plan is None:
        plan = _remember(key, _plan_swiglu_linear(gate_up, weight, bias))
    return plan(gate_up, weight, bias)


def linear(x, weight, bias):
    """``x @ weight.T + bias``: x (..., K), weight (N, K), bias (N,) or None -> (..., N).

    One kernel: the bias is added to the float32 accumulator before rounding (a fused
    epilogue, as cuBLAS does). ``weight.T`` is read in place (a transposed operand).

    Example: ``linear(h, w, b)`` with h (B, T, C), w (4C, C), b (4C,) gives (B, T, 4C).
    """
    key = ("lin", x.shape, x.strides, weight.shape, weight.strides, x.dtype, x.device,
           FP32_PRECISION, None if bias is None else bias.strides,
           (x.data_ptr() | weight.data_ptr()) & 15 == 0)
    plan = _plans.get(key)
    if plan is None:
        plan = _remember(key, _plan_linear(x, weight, bias))
    return plan(x, weight, bias)
