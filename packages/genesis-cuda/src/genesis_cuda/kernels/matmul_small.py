"""Matrix products with few rows, ``(M, K) @ (K, N)`` for M <= ``SMALL_M_MAX``: a decode step.

With M this small the product is a stream over the right operand (a linear layer's weight):
each of its N*K elements takes part in only M multiply-adds, so the time is the weight's bytes
over memory bandwidth, if the whole GPU streams it. The tiled kernels of ``matmul`` would give
such a problem one row of 64-128-wide output tiles, ``cdiv(N, 128)`` programs (7 for a
896-wide projection on 132 SMs), each walking all of K. Here instead:

* each program owns ``BLOCK_N`` columns of C (rows of the weight) and one chunk of K
  (split-K, ``matmul_tuning.split_k``), with enough chunks that ``cdiv(N, BLOCK_N) * split`` puts
  the table's ``waves`` programs on every SM;
* M == 1 is a matrix-vector product on the CUDA cores: a (BLOCK_N, BLOCK_K) weight tile
  times the x row, accumulated elementwise in float32 and summed over K once at the end;
* M = 2..64 uses the tensor cores with the operands swapped, ``C^T = W @ x^T``: the weight
  tile is the instruction's large side and the few rows of x its narrow side (padded to 16);
* a split problem writes float32 partials, and the last program to finish an n-block
  (an atomic count per n-block) adds that block's partials in a fixed order
  (deterministic), adds the bias and rounds once: one launch, no reduction kernel (its
  launch gap would be a fifth of a 10 us decode product); an unsplit one adds the bias to
  the float32 sums and stores C directly;
* gated (``GATED``, a SwiGLU MLP's down projection in a decode step): the left operand is
  the fused gate/up projection's (M, 2K) output and each loaded x element is
  ``silu(gate) * up``, computed in float32 and rounded to the activation dtype as
  ``swiglu`` rounds its output, so the result is that of ``swiglu`` then the plain product,
  one launch fewer and no (M, K) intermediate.

A plan is a rule applied to the shape (``SMALL_M_TILES``, revised by
``tools/bench/ops.py --matmul-training --sweep``): no timing run and no host
synchronisation, and every call allocates the same workspace from the caching allocator, so
a CUDA graph captures it (after the warm-up call that compiles the kernels; the counters
are the plan's own, zeroed when it is made and left at zero by every launch).
"""

import triton
import triton.language as tl

from genesis import dtypes as D
from genesis_cuda import capture

from . import _launch
from ._launch import Ptr, cdiv, dependent_launch, next_pow2, pdl_prologue, sm_count
from .layout import fill_
from .matmul_kernels import mma
from .matmul_tuning import plan_site, split_k

SMALL_M_MAX = 64  # products with at most this many rows take this path
# BLOCK_M (1, or M rounded up to a power of two >= 16) ->
#   (BLOCK_N, BLOCK_K, num_warps, num_stages, shortest K-chunk of a split in K-tiles, waves:
#    programs per SM that split-K adds K-chunks up to, 0 for no split).
# Reasoning (H100/H200: 132 SMs, 3.3-4.8 TB/s; at ~0.7 us of memory latency that needs ~3 MB
# in flight, ~25 KB per SM): a program loads an 8-16 KB weight tile per step (32x128 or
# 64x128 half elements; BLOCK_K is halved where that makes it divide K, see _even_block_k),
# two tiles in flight and two or more programs per SM; K-chunks of >= 256 elements (M > 1)
# keep the float32 partials (split*M*N*4 bytes, mostly in L2) small against the weight
# (N*K*2 bytes).
# M = 1 (``ops.py --matmul-training --sweep``, timed inside a CUDA graph over weights cold in
# L2, as a captured decode step runs them; H100, 2026-11-24): tiles of 8 weight rows by 256
# of K (128 where 256 does not divide K), 4 warps, split-K only for K-chunks of >= 4 tiles (so the
# K = 896 projections run unsplit, down_proj's K = 4864 in four chunks) gave 3.9-4.2 us for
# the 896-wide projections, 7.9 us for down_proj and 98 us for lm_head, within 2% of cuBLAS
# in the same graph; 16x256 at 2 warps is 10% faster on gate_up (N = 9728) but 2-3x slower
# on down_proj. The earlier 32x128 entry was chosen from single-call timings, which a ~7 us
# launch latency dominates, and cost 18% more per decode step.
SMALL_M_TILES = {
    1: (8, 256, 4, 3, 4, 4),
    16: (64, 128, 4, 4, 2, 2),
    32: (64, 128, 4, 4, 2, 2),
    64: (64, 128, 4, 3, 2, 2),
}


# ---------------------------------------------------------------------------- kernel
@triton.jit
def _load_tile(w_ptrs, x_ptrs, up, k_left, MASKED: tl.constexpr, GATED: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """One K-tile of w (BLOCK_N, BLOCK_K) and of x: (1, BLOCK_K) for M == 1, else x^T
    (BLOCK_K, BLOCK_M); MASKED: only the first ``k_left`` columns of K are read. Returns
    ``(w, x, u)``: GATED, x is the gate tile and u the up tile (``up`` elements after it),
    else u is x (no load)."""
    if MASKED:
        rk = tl.arange(0, BLOCK_K)
        w = tl.load(w_ptrs, mask=rk[None, :] < k_left, other=0.0)
        if BLOCK_M == 1:
            x_mask = rk[None, :] < k_left
        else:
            x_mask = rk[:, None] < k_left
        x = tl.load(x_ptrs, mask=x_mask, other=0.0)
        u = x
        if GATED:
            u = tl.load(x_ptrs + up, mask=x_mask, other=0.0)
    else:
        w = tl.load(w_ptrs)
        x = tl.load(x_ptrs)
        u = x
        if GATED:
            u = tl.load(x_ptrs + up)
    return w, x, u


@triton.jit
def _accumulate(acc, w, x, u, PREC: tl.constexpr, GATED: tl.constexpr, BLOCK_M: tl.constexpr):
    """acc (BLOCK_N, BLOCK_K) += w * x for M == 1 (CUDA cores), else acc += w @ x^T; GATED,
    x is first ``silu(x) * u`` in float32, rounded to x's dtype (``swiglu``'s output)."""
    if GATED:  # here, not at the load: the next tile's loads stay ahead of this math
        g = x.to(tl.float32)
        s = 1.0 / (1.0 + tl.exp(-g))
        x = (g * s * u.to(tl.float32)).to(x.dtype)
    if BLOCK_M == 1:
        acc += w.to(tl.float32) * x.to(tl.float32)
    else:
        acc = mma(w, x, acc, PREC, tl.float32)
    return acc


@triton.jit
def _prefetch_to_l2(w_ptr, wn, swn, swk, k0, k_len):
    """Asks L2 for the program's weight chunk, rows ``wn`` by columns [k0, k0 + k_len),
    one request per 128-byte line along K. A hint (no data, no wait), so it may run before
    the kernel ahead of this one has finished: the loads after ``gdc_wait`` read memory as
    it then is (L2 takes every write), whatever the hint fetched."""
    LINE: tl.constexpr = 1024 // w_ptr.dtype.element_ty.primitive_bitwidth  # elements
    LINES: tl.constexpr = 16
    last = k0 + k_len - 1
    for t in range(0, k_len, LINE * LINES):
        ks = tl.minimum(k0 + t + tl.arange(0, LINES) * LINE, last).to(tl.int64)
        ptrs = w_ptr + wn[:, None] * swn + ks[None, :] * swk
        tl.inline_asm_elementwise("prefetch.global.L2 [$1]; // $0 unused", "=r,l", [ptrs],
                                  dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _small_m_kernel(x_ptr, w_ptr, out_ptr, bias_ptr, ws_ptr, count_ptr, M, N, K, k_per, split,
                    sxm, sxk, swk, swn, sbias, HAS_BIAS: tl.constexpr, PARTIAL: tl.constexpr,
                    PREC: tl.constexpr, GATED: tl.constexpr, PDL: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Program (n-block, K-chunk): C[:, n-block] (all M rows) summed over its K-chunk.

    ``w`` is the right operand read as (N, K) through its strides (a linear weight as
    stored). The result goes to C (M, N) contiguous. A split problem (PARTIAL, ``split``
    chunks) writes the chunk's float32 sums to the partials ``ws`` (split, M, N) and counts
    the chunks done per n-block in ``count`` (zeros, int32 per n-block): the program that
    finishes an n-block's last chunk adds its partials in order (s = 0, 1, ...: the same
    bits whichever program is last; the loop unrolled so that loads are in flight together),
    adds the bias, rounds once, stores C and sets the count back to 0 for the next launch.
    One launch, no reduction kernel after it.

    GATED (a gated MLP's down projection): x is the (M, 2K) output of the fused gate/up
    projection, gate in columns [0, K) and up in [K, 2K), and the product's left operand is
    ``swiglu(gate, up)`` (M, K), made tile by tile as it is loaded: never written out.

    PDL (launched with programmatic dependent launch, ``_launch.dependent_launch``): the
    program may start while the kernel ahead finishes; it asks L2 for its weight chunk, then
    waits for that kernel before it reads x or writes anything (``pdl_prologue``). H100,
    2026-11-24, Qwen2.5-0.5B shape, graph-captured decode of 256 tokens, this kernel alone
    so launched: batch 1 929 -> 1,007 tok/s, batch 8 6,475 -> 6,663, the same tokens."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.arange(0, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    k0 = pid_k * k_per
    k_len = tl.minimum(k_per, K - k0)
    # Wrapped rows/columns keep the loads unmasked (their results are never stored).
    wn = (rn % N).to(tl.int64)
    xm = (rm % M).to(tl.int64)
    ks = (k0 + rk).to(tl.int64)
    w_ptrs = w_ptr + wn[:, None] * swn + ks[None, :] * swk  # (BLOCK_N, BLOCK_K)
    up = K * sxk  # GATED: from a gate element to its up element
    if PDL:
        _prefetch_to_l2(w_ptr, wn, swn, swk, k0, k_len)
    pdl_prologue(PDL)
    if BLOCK_M == 1:
        x_ptrs = x_ptr + xm[:, None] * sxm + ks[None, :] * sxk  # (1, BLOCK_K)
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    else:
        x_ptrs = x_ptr + xm[None, :] * sxm + ks[:, None] * sxk  # (BLOCK_K, BLOCK_M)
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    full = k_len // BLOCK_K  # whole K-tiles: unmasked, vector loads
    if BLOCK_M == 1:
        # The next tile's loads are issued before this tile's products, so each program has
        # two tiles in flight without relying on the compiler to pipeline loads that feed
        # no tl.dot.
        if full > 0:
            w, x, u = _load_tile(w_ptrs, x_ptrs, up, 0, False, GATED, BLOCK_M, BLOCK_K)
            for _ in range(1, full):
                w_ptrs += BLOCK_K * swk
                x_ptrs += BLOCK_K * sxk
                w_next, x_next, u_next = _load_tile(w_ptrs, x_ptrs, up, 0, False, GATED,
                                                    BLOCK_M, BLOCK_K)
                acc = _accumulate(acc, w, x, u, PREC, GATED, BLOCK_M)
                w, x, u = w_next, x_next, u_next
            acc = _accumulate(acc, w, x, u, PREC, GATED, BLOCK_M)
            w_ptrs += BLOCK_K * swk
            x_ptrs += BLOCK_K * sxk
    else:
        for _ in range(full):  # loads feeding tl.dot: pipelined over num_stages
            w, x, u = _load_tile(w_ptrs, x_ptrs, up, 0, False, GATED, BLOCK_M, BLOCK_K)
            acc = _accumulate(acc, w, x, u, PREC, GATED, BLOCK_M)
            w_ptrs += BLOCK_K * swk
            x_ptrs += BLOCK_K * sxk
    left = k_len - full * BLOCK_K
    if left > 0:  # the K-chunk's masked tail (names of its own: scoped to this branch)
        w_tail, x_tail, u_tail = _load_tile(w_ptrs, x_ptrs, up, left, True, GATED, BLOCK_M,
                                            BLOCK_K)
        acc = _accumulate(acc, w_tail, x_tail, u_tail, PREC, GATED, BLOCK_M)
    if BLOCK_M == 1:
        res = tl.sum(acc, axis=1)[:, None]  # (BLOCK_N, 1)
    else:
        res = acc  # (BLOCK_N, BLOCK_M) = C^T tile
    mask = (rn[:, None] < N) & (rm[None, :] < M)
    offs = rm[None, :].to(tl.int64) * N + rn[:, None]
    last = True
    if PARTIAL:
        tl.store(ws_ptr + pid_k.to(tl.int64) * M * N + offs, res, mask=mask)
        tl.debug_barrier()  # every thread's partial is written before the count is raised
        # acq_rel at GPU scope: the partials of the programs counted before are visible
        done = tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        last = done == split - 1
        if last:
            res = tl.zeros_like(res)
            # from L2 (.cg): never a stale line of this SM's L1
            for s in tl.range(0, split, loop_unroll_factor=8):
                res += tl.load(ws_ptr + s * M * N + offs, mask=mask, other=0.0,
                               cache_modifier=".cg")
            tl.atomic_xchg(count_ptr + pid_n, 0, sem="relaxed", scope="gpu")
    if last:
        if HAS_BIAS:
            res += tl.load(bias_ptr + rn * sbias, mask=rn < N, other=0.0).to(tl.float32)[:, None]
        tl.store(out_ptr + offs, res.to(out_ptr.dtype.element_ty), mask=mask)


# --------------------------------------------------------------------------- launcher
_COUNTER_SLAB = 1 << 16  # int32 chunk counters allocated at a time
_slabs: dict = {}  # device -> [slab, first unused index, every slab of the device]


def _counters(device, n: int) -> Ptr:
    """``n`` zeroed int32 counters of a split plan's n-blocks, never handed to another plan:
    every launch leaves them at zero, and a CUDA graph that captured the plan's launch keeps
    using them after the plan cache has dropped the plan (slabs live as long as the
    process). One plan runs on one stream at a time."""
    slab = _slabs.get(device)
    if slab is None or slab[1] + n > slab[0].shape[0]:
        capture.check_not_capturing(
            "allocate the split-K counters of a new decode-sized matmul (they would belong "
            "to the graph's memory pool); run the captured code once before capturing")
        arr = fill_(_launch.empty((max(n, _COUNTER_SLAB),), D.int32, device), 0)
        slab = _slabs[device] = [arr, 0, (slab[2] if slab else []) + [arr]]
    start = slab[1]
    slab[1] += n
    return Ptr(slab[0].data_ptr() + 4 * start, D.int32)


def _even_block_k(K: int, bk: int) -> int:
    """``bk``, halved (down to 32) while it does not divide K: a K-tile that is never cut
    short loads whole 16-byte vectors (a masked tail load goes element by element), and the
    models' widths (896, 4864, ...) are multiples of 128 but not always of 256."""
    b = bk
    while b > 32 and K % b:
        b //= 2
    return b if K % b == 0 else bk


def plan(dt, M: int, N: int, K: int, sa, sb, has_bias: bool, sbias: int, precision, device,
         gated: bool = False):
    """``go(a, b, c, bias)`` computing ``c = a @ b (+ bias)`` for ``a`` (M, K) with strides
    ``sa``, ``b`` (K, N) with strides ``sb`` (a linear weight ``(N, K)`` is ``b`` with its
    strides swapped), ``c`` contiguous (M, N); ``dt`` float16, bfloat16 or float32 and
    ``1 <= M <= SMALL_M_MAX``. ``precision`` is the float32 ``tl.dot`` input precision.
    ``gated``: ``a`` is (M, 2K), gate then up along its rows (strides ``sa``), and the
    product is ``swiglu(gate, up) @ b``."""
    bm = 1 if M == 1 else max(16, next_pow2(M))
    bn, bk, warps, stages, min_tiles, waves = SMALL_M_TILES[bm]
    if dt is D.float32 and bm > 1:  # 4-byte tiles: half as deep, two stages of shared memory
        bk, stages = min(bk, 64), 2
    bk = _even_block_k(K, bk)
    n_blocks = cdiv(N, bn)
    split, per = split_k(n_blocks, cdiv(K, bk), min_tiles, waves * sm_count(device))
    k_per = per * bk
    pdl = dependent_launch(device)
    site, tail = plan_site(_small_m_kernel,
                           dict(HAS_BIAS=has_bias, PARTIAL=split > 1,
                                PREC=precision if dt is D.float32 else None, GATED=gated,
                                PDL=pdl, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk),
                           num_warps=warps, num_stages=stages)
    sam, sak = sa
    sbk, sbn = sb
    if split == 1:
        def go(a, b, c, bias):
            site.launch(0, c.device, n_blocks, 1,
                        (a, b, c, c if bias is None else bias, c, c, M, N, K, k_per, 1, sam, sak,
                         sbk, sbn, sbias), None, tail)

        return go
    count = _counters(device, n_blocks)

    def go_split(a, b, c, bias):
        ws = _launch.empty((split, M, N), D.float32, c.device)
        site.launch(0, c.device, n_blocks, split,
                    (a, b, c, c if bias is None else bias, ws, count, M, N, K, k_per, split, sam,
                     sak, sbk, sbn, sbias), None, tail)

    return go_split
