"""Device code of the matmul family (planned and launched by ``matmul.py``; the small-M
kernels are ``matmul_small.py``): the tensor-core product ``mma`` both files use, the TMA +
wgmma tile kernel and its persistent, batched and split-K variants, the split-K tile
reduction, and the pointer kernel for any strides.
"""

import triton
import triton.language as tl

from ._launch import INTERPRET

if INTERPRET:
    # Triton's CPU interpreter multiplies bfloat16 tiles wrongly in tl.dot; products of
    # half-precision values are exact in float32, so widening first gives the GPU's result.
    @triton.jit
    def mma(a, b, acc, PREC: tl.constexpr, ACC: tl.constexpr):
        """``acc + a @ b`` (``tl.dot`` with input precision PREC, accumulator type ACC)."""
        return tl.dot(a.to(ACC), b.to(ACC), acc, input_precision=PREC, out_dtype=ACC)
else:
    @triton.jit
    def mma(a, b, acc, PREC: tl.constexpr, ACC: tl.constexpr):
        """``acc + a @ b`` (``tl.dot`` with input precision PREC, accumulator type ACC)."""
        return tl.dot(a, b, acc, input_precision=PREC, out_dtype=ACC)


@triton.jit
def _tile_ids(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Grouped ordering: GROUP_M row-tiles share their B column panels in L2."""
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * num_n
    group = pid // width
    first_m = group * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    return pid_m, pid_n


@triton.jit
def _add_bias(acc, bias, sbias, off_n, N, BLOCK_N: tl.constexpr):
    """acc + bias[None, :] in float32, before the result is rounded (a fused epilogue)."""
    rn = off_n + tl.arange(0, BLOCK_N)
    bv = tl.load(bias + rn * sbias, mask=rn < N, other=0.0).to(tl.float32)
    return acc + bv[None, :]


@triton.jit
def _tma_acc(a_desc, b_desc, off_m, off_n, k_lo, k_hi, a_row0, b_row0, A_T: tl.constexpr,
             B_T: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             BLOCK_K: tl.constexpr):
    """The float32 sums of one (BLOCK_M, BLOCK_N) tile over K-tiles ``k_lo .. k_hi - 1``:
    TMA loads feeding wgmma. ``*_row0`` shift the rows of a descriptor that holds a whole
    batch stacked in 2-d."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_lo, k_hi):
        off_k = k * BLOCK_K
        if A_T:
            a = a_desc.load([a_row0 + off_k, off_m]).T
        else:
            a = a_desc.load([a_row0 + off_m, off_k])
        if B_T:
            b = b_desc.load([b_row0 + off_n, off_k]).T
        else:
            b = b_desc.load([b_row0 + off_k, off_n])
        acc = mma(a, b, acc, None, tl.float32)
    return acc


@triton.jit
def _tma_tile(a_desc, b_desc, c_desc, off_m, off_n, N, K, a_row0, b_row0, c_row0,
              bias, sbias, HAS_BIAS: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One (BLOCK_M, BLOCK_N) output tile: TMA loads, wgmma, fused bias, TMA store."""
    acc = _tma_acc(a_desc, b_desc, off_m, off_n, 0, tl.cdiv(K, BLOCK_K), a_row0, b_row0, A_T,
                   B_T, BLOCK_M, BLOCK_N, BLOCK_K)
    if HAS_BIAS:
        acc = _add_bias(acc, bias, sbias, off_n, N, BLOCK_N)
    c_desc.store([c_row0 + off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def _mm_tma_kernel(a_desc, b_desc, c_desc, M, N, K, a_step, b_step, bias, sbias,
                   HAS_BIAS: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr):
    """One program per output tile, descriptors built on the host. A batch (grid axis 1)
    is stacked in the descriptors' rows: matrix ``bid`` starts at row ``bid * step``."""
    pid_m, pid_n = _tile_ids(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    bid = tl.program_id(1)
    _tma_tile(a_desc, b_desc, c_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, N, K, bid * a_step,
              bid * b_step, bid * M, bias, sbias, HAS_BIAS, A_T, B_T, BLOCK_M, BLOCK_N,
              BLOCK_K)


@triton.jit
def _mm_tma_batched_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sa0, sa_row, sb0, sb_row,
                           bias, sbias, HAS_BIAS: tl.constexpr, A_T: tl.constexpr,
                           B_T: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """Batched: each program makes 2-d descriptors of its own matrices on the device, so
    tiles are bounded (zero-filled loads, clipped stores) by that matrix, not the batch."""
    pid_m, pid_n = _tile_ids(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    bid = tl.program_id(1).to(tl.int64)
    if A_T:
        a_desc = tl.make_tensor_descriptor(a_ptr + bid * sa0, shape=[K, M], strides=[sa_row, 1],
                                           block_shape=[BLOCK_K, BLOCK_M])
    else:
        a_desc = tl.make_tensor_descriptor(a_ptr + bid * sa0, shape=[M, K], strides=[sa_row, 1],
                                           block_shape=[BLOCK_M, BLOCK_K])
    if B_T:
        b_desc = tl.make_tensor_descriptor(b_ptr + bid * sb0, shape=[N, K], strides=[sb_row, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr + bid * sb0, shape=[K, N], strides=[sb_row, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr + bid * M * N, shape=[M, N], strides=[N, 1],
                                       block_shape=[BLOCK_M, BLOCK_N])
    _tma_tile(a_desc, b_desc, c_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, N, K, 0, 0, 0, bias,
              sbias, HAS_BIAS, A_T, B_T, BLOCK_M, BLOCK_N, BLOCK_K)


@triton.jit
def _mm_tma_splitk_kernel(a_desc, b_desc, c_desc, ws_ptr, M, N, K, whole, split, tiles_per,
                          bias, sbias, HAS_BIAS: tl.constexpr, A_T: tl.constexpr,
                          B_T: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """Output tiles ``0 .. whole - 1`` whole (one program each, all of K, stored to C), the
    rest split in K: program ``whole + r * split + s`` sums the s-th chunk of ``tiles_per``
    K-tiles of tile ``whole + r`` into the float32 partials ``ws`` (rest, split, BLOCK_M,
    BLOCK_N), which ``_tile_reduce_kernel`` adds up in order.

    ``whole`` is a number of full waves of programs (0 for a problem whose tiles do not fill
    the GPU once): 133 tiles on 132 SMs run as 132 whole tiles and one tile in 32 K-chunks,
    about 1.03 waves' time instead of two (``matmul_tuning.splitk_plan``)."""
    pid = tl.program_id(0)
    k_tiles = tl.cdiv(K, BLOCK_K)
    is_whole = pid < whole
    r = tl.maximum(pid - whole, 0)
    tile = tl.where(is_whole, pid, whole + r // split)
    k_lo = tl.where(is_whole, 0, (r % split) * tiles_per)
    k_hi = tl.where(is_whole, k_tiles, tl.minimum(k_lo + tiles_per, k_tiles))
    pid_m, pid_n = _tile_ids(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = _tma_acc(a_desc, b_desc, off_m, off_n, k_lo, k_hi, 0, 0, A_T, B_T, BLOCK_M, BLOCK_N,
                   BLOCK_K)
    if is_whole:
        if HAS_BIAS:
            acc = _add_bias(acc, bias, sbias, off_n, N, BLOCK_N)
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
    else:
        ri = tl.arange(0, BLOCK_M)
        rj = tl.arange(0, BLOCK_N)
        part = ws_ptr + (pid - whole).to(tl.int64) * (BLOCK_M * BLOCK_N)
        tl.store(part + ri[:, None] * BLOCK_N + rj[None, :], acc)


@triton.jit
def _tile_reduce_kernel(ws_ptr, c_ptr, bias_ptr, M, N, whole, split, scm, scn, sbias,
                        HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        GROUP_M: tl.constexpr, ROWS: tl.constexpr):
    """C over the split tiles of ``_mm_tma_splitk_kernel``: program (r, i) adds the
    ``split`` partials of rows ``i*ROWS ..`` of split tile r in order (s = 0, 1, ...; the
    same bits every run; the loop unrolled so that loads are in flight together, not one L2
    round trip after another), adds the bias and rounds once."""
    r = tl.program_id(0)
    ri = tl.program_id(1) * ROWS + tl.arange(0, ROWS)
    rj = tl.arange(0, BLOCK_N)
    pid_m, pid_n = _tile_ids(whole + r, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs = ri[:, None] * BLOCK_N + rj[None, :]
    part = ws_ptr + r.to(tl.int64) * split * (BLOCK_M * BLOCK_N) + offs
    acc = tl.load(part)
    for s in tl.range(1, split, loop_unroll_factor=8):
        acc += tl.load(part + s * (BLOCK_M * BLOCK_N))
    rm = pid_m * BLOCK_M + ri
    rn = pid_n * BLOCK_N + rj
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn * sbias, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    ptrs = c_ptr + rm[:, None].to(tl.int64) * scm + rn[None, :] * scn
    tl.store(ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _mm_tma_persistent_kernel(a_desc, b_desc, c_desc, M, N, K, batch, a_step, b_step,
                              bias, sbias, HAS_BIAS: tl.constexpr,
                              A_T: tl.constexpr, B_T: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                              BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                              NUM_SMS: tl.constexpr):
    """One program per SM walking output tiles (of every matrix of a stacked batch); the
    flattened loop lets the pipeliner prefetch the next tile's first K-slices while this
    tile's epilogue runs."""
    per_matrix = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), per_matrix * batch, NUM_SMS, flatten=True):
        bid = tile // per_matrix
        pid_m, pid_n = _tile_ids(tile - bid * per_matrix, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        a_row0 = bid * a_step
        b_row0 = bid * b_step
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(k_tiles):  # written out (not _tma_tile) so the nest flattens
            off_k = k * BLOCK_K
            if A_T:
                a = a_desc.load([a_row0 + off_k, off_m]).T
            else:
                a = a_desc.load([a_row0 + off_m, off_k])
            if B_T:
                b = b_desc.load([b_row0 + off_n, off_k]).T
            else:
                b = b_desc.load([b_row0 + off_k, off_n])
            acc = mma(a, b, acc, None, tl.float32)
        if HAS_BIAS:
            acc = _add_bias(acc, bias, sbias, off_n, N, BLOCK_N)
        c_desc.store([bid * M + off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def _mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, B1,
               sa0, sa1, sam, sak, sb0, sb1, sbk, sbn, sc0, sc1, scm, scn,
               bias, sbias, HAS_BIAS: tl.constexpr,
               PREC: tl.constexpr, ACC: tl.constexpr, EVEN_K: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr):
    pid_m, pid_n = _tile_ids(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    bid = tl.program_id(1).to(tl.int64)
    b0 = bid // B1
    b1 = bid % B1
    a_ptr += b0 * sa0 + b1 * sa1
    b_ptr += b0 * sb0 + b1 * sb1
    c_ptr += b0 * sc0 + b1 * sc1
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Wrapped rows/columns keep the loads unmasked (their results are never stored).
    am = (rm % M).to(tl.int64)
    bn = (rn % N).to(tl.int64)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + am[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + bn[None, :] * sbn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            left = K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=rk[None, :] < left, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < left, other=0.0)
        acc = mma(a, b, acc, PREC, ACC)
        a_ptrs += BLOCK_K * sak
        b_ptrs += BLOCK_K * sbk
    if HAS_BIAS:  # in the accumulator's type (float64 stays float64)
        bv = tl.load(bias + rn * sbias, mask=rn < N, other=0.0).to(ACC)
        acc += bv[None, :]
    c_ptrs = c_ptr + rm[:, None].to(tl.int64) * scm + rn[None, :].to(tl.int64) * scn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))
