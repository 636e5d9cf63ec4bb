"""Flash attention's backward: ``dQ``, ``dK``, ``dV`` of ``attention.py``'s forward.

Read top to bottom like a Triton tutorial (the forward, the shared device helpers and the
argument checks are ``attention.py``, whose docstring explains the algorithm):

1. **Kernels**. ``_attn_bwd_dkdv``: one program per block of keys of one (batch, KV head)
   walks every query block of every query head in its group and accumulates dK and dV in
   registers (grouped-query heads need no repeated K/V and no atomics); ``Tile.trans`` keeps
   its tiles keys-by-queries. ``_attn_bwd_dq``: one program per query block walks the keys
   for dQ; it runs first and also stores ``delta = rowsum(dO * O)`` of its rows. Both
   recompute the probabilities from the saved logsumexp (``P = exp(S - lse)``, ``dS = P *
   (dP - delta)``) and the dropout decisions from the forward's ``(seed, base)``.
2. **Launcher**: ``scaled_dot_product_attention_backward``, registered as the kernel of the
   fused op ``scaled_dot_product_attention_backward`` in ``genesis_cuda.fused_kernels``.

The autograd wrapper is ``genesis.nn.functional.scaled_dot_product_attention`` (genesis-nn);
the tests are ``tests/cuda/test_kernels_attention.py`` (they also run under
``TRITON_INTERPRET=1``); the benchmark is the attention section of ``tools/bench/ops.py``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from genesis import dtypes as D

from . import _launch
from ._launch import aligned, cdiv
from .attention import (
    LOG2E,
    Tile,
    _big,
    _head,
    _heads_view,
    _key_blocks,
    _last_dim_unit,
    _mask_args,
    _mma,
    _mma_acc,
    _rows,
    _tile_launcher,
    _tma_ready,
)


# ============================================================================ kernels
@triton.jit
def _dkdv_block(dk, dv, k, v, q_src, do_src, lse_ptr, delta_ptr, m_base, start_m, offs_n, L,
                S, sqm, sdom, smm, smn, qk_scale, bh, seed, rng_base, p_drop, inv_keep,
                HEAD_DIM: tl.constexpr, BM: tl.constexpr, CAUSAL: tl.constexpr,
                MASK: tl.constexpr, DROPOUT: tl.constexpr, TMA: tl.constexpr,
                TRANS: tl.constexpr):
    """One query block of the dK/dV kernel. ``TRANS``: the tiles are kept transposed (keys
    along rows, ``S^T = K Q^T``), so P^T and dS^T feed the next products from registers;
    otherwise they are (queries, keys) and P, dS are transposed through shared memory
    (fewer registers). Rows past L load as zeros (and lse as +inf) and add nothing; keys
    past S only touch dK/dV rows that are never stored."""
    offs_m = start_m + tl.arange(0, BM)
    rows = offs_m < L
    q = _rows(q_src, start_m, L, sqm, HEAD_DIM, BM, True, TMA)
    do = _rows(do_src, start_m, L, sdom, HEAD_DIM, BM, True, TMA)
    lse2 = tl.load(lse_ptr + offs_m, mask=rows, other=float("inf")) * 1.4426950408889634
    delta = tl.load(delta_ptr + offs_m, mask=rows, other=0.0)
    if TRANS:  # (BN, BM) tiles
        qi = offs_m[None, :]
        kj = offs_n[:, None]
        s = _mma(k, tl.trans(q))
        dp = _mma(v, tl.trans(do))
        lse2 = lse2[None, :]
        delta = delta[None, :]
    else:  # (BM, BN) tiles
        qi = offs_m[:, None]
        kj = offs_n[None, :]
        s = _mma(q, tl.trans(k))
        dp = _mma(do, tl.trans(v))
        lse2 = lse2[:, None]
        delta = delta[:, None]
    s = s * qk_scale  # log2 units
    if MASK != 0:
        inside = (qi < L) & (kj < S)
        mask_ptrs = m_base + qi * smm + kj * smn
        if MASK == 1:
            allowed = tl.load(mask_ptrs, mask=inside, other=0)
        else:
            s += tl.load(mask_ptrs, mask=inside, other=0.0).to(tl.float32) * 1.4426950408889634
    p = tl.math.exp2(s - lse2)
    if MASK == 1:
        p = tl.where(allowed != 0, p, 0.0)
    if CAUSAL:
        p = tl.where(qi >= kj, p, 0.0)
    if DROPOUT:
        keep = tl.rand(seed, (bh * L + qi.to(tl.int64)) * S + kj + rng_base) >= p_drop
        pd = tl.where(keep, p * inv_keep, 0.0)
        dp = tl.where(keep, dp * inv_keep, 0.0)
    else:
        pd = p
    ds = p * (dp - delta)
    if TRANS:
        dv = _mma_acc(pd.to(do.dtype), do, dv)
        dk = _mma_acc(ds.to(q.dtype), q, dk)
    else:
        dv = _mma_acc(tl.trans(pd.to(do.dtype)), do, dv)
        dk = _mma_acc(tl.trans(ds.to(q.dtype)), q, dk)
    return dk, dv


@triton.jit(do_not_specialize=["L", "S", "H", "n_rep", "seed", "rng_base"])
def _attn_bwd_dkdv(Q, K, V, M, DO, LSE, DELTA, DK, DV,
                   sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, smb, smh, smm, smn,
                   sdob, sdoh, sdom, sdkb, sdkh, sdkn, sdvb, sdvh, sdvn, L, S, H, n_rep,
                   qk_scale, scale,
                   seed: tl.int64, rng_base: tl.int64, p_drop, inv_keep,
                   HEAD_DIM: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                   CAUSAL: tl.constexpr, MASK: tl.constexpr, DROPOUT: tl.constexpr,
                   TMA: tl.constexpr, TRANS: tl.constexpr):
    bhk = tl.program_id(0).to(tl.int64)  # b * Hk + hk
    start_n = tl.program_id(1) * BN  # the first key blocks (most queries, causal) first
    hkv = H // n_rep
    b = bhk // hkv
    hk = bhk % hkv
    offs_n = start_n + tl.arange(0, BN)
    offs_d = tl.arange(0, HEAD_DIM)
    k = _rows(K + b * skb + hk * skh, start_n, S, skn, HEAD_DIM, BN, True, False)
    v = _rows(V + b * svb + hk * svh, start_n, S, svn, HEAD_DIM, BN, True, False)
    dk = tl.zeros([BN, HEAD_DIM], tl.float32)
    dv = tl.zeros([BN, HEAD_DIM], tl.float32)
    # earlier query rows see none of these keys (causal)
    lo = (start_n // BM) * BM if CAUSAL else 0
    for h in range(hk * n_rep, hk * n_rep + n_rep):
        bh = b * H + h
        q_src = _head(Q + b * sqb + h * sqh, L, sqm, HEAD_DIM, BM, TMA)
        do_src = _head(DO + b * sdob + h * sdoh, L, sdom, HEAD_DIM, BM, TMA)
        m_base = M + b * smb + h * smh
        # one loop, the causal mask on every block: splitting off the diagonal blocks into a
        # loop of their own (as the forward does) made the compiler spill here
        for start_m in range(lo, L, BM):
            dk, dv = _dkdv_block(dk, dv, k, v, q_src, do_src, LSE + bh * L, DELTA + bh * L,
                                 m_base, start_m, offs_n, L, S, sqm, sdom, smm, smn, qk_scale,
                                 bh, seed, rng_base, p_drop, inv_keep, HEAD_DIM, BM, CAUSAL,
                                 MASK, DROPOUT, TMA, TRANS)
    kv_rows = (offs_n < S)[:, None]
    tl.store(DK + b * sdkb + hk * sdkh + offs_n[:, None] * sdkn + offs_d[None, :],
             (dk * scale).to(DK.dtype.element_ty), mask=kv_rows)
    tl.store(DV + b * sdvb + hk * sdvh + offs_n[:, None] * sdvn + offs_d[None, :],
             dv.to(DV.dtype.element_ty), mask=kv_rows)


@triton.jit
def _dq_block(dq, q, do, lse2, delta, k_src, v_src, m_row, start_n, offs_m, L, S, skn, svn,
              smn, qk_scale, bh, seed, rng_base, p_drop, inv_keep, HEAD_DIM: tl.constexpr,
              BN: tl.constexpr, CAUSAL: tl.constexpr, BOUNDS: tl.constexpr,
              MASK: tl.constexpr, DROPOUT: tl.constexpr, TMA: tl.constexpr):
    """One key block of the dQ kernel. ``BOUNDS``: the block crosses the causal diagonal or
    the end of the keys (masked loads and scores); other blocks need neither. Query rows
    past L have zero dO and +inf lse, and are never stored."""
    offs_n = start_n + tl.arange(0, BN)
    k = _rows(k_src, start_n, S, skn, HEAD_DIM, BN, BOUNDS, TMA)
    v = _rows(v_src, start_n, S, svn, HEAD_DIM, BN, BOUNDS, TMA)
    s = _mma(q, tl.trans(k)) * qk_scale
    if MASK != 0:
        inside = (offs_m < L)[:, None] & (offs_n < S)[None, :]
        mask_ptrs = m_row + offs_n[None, :] * smn
        if MASK == 1:
            allowed = tl.load(mask_ptrs, mask=inside, other=0)
        else:
            s += tl.load(mask_ptrs, mask=inside, other=0.0).to(tl.float32) * 1.4426950408889634
    p = tl.math.exp2(s - lse2[:, None])
    if MASK == 1:
        p = tl.where(allowed != 0, p, 0.0)
    if BOUNDS:
        ok = (offs_n < S)[None, :]
        if CAUSAL:
            ok = ok & (offs_n[None, :] <= offs_m[:, None])
        p = tl.where(ok, p, 0.0)
    dp = _mma(do, tl.trans(v))
    if DROPOUT:
        ctr = (bh * L + offs_m.to(tl.int64))[:, None] * S + offs_n[None, :] + rng_base
        dp = tl.where(tl.rand(seed, ctr) >= p_drop, dp * inv_keep, 0.0)
    ds = p * (dp - delta[:, None])
    return _mma_acc(ds.to(k.dtype), k, dq)


@triton.jit(do_not_specialize=["L", "S", "H", "n_rep", "seed", "rng_base"])
def _attn_bwd_dq(Q, K, V, M, DO, O, LSE, DELTA, DQ,
                 sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, smb, smh, smm, smn,
                 sdob, sdoh, sdom, sob, soh, som, sdqb, sdqh, sdqm, L, S, H, n_rep, qk_scale,
                 scale, seed: tl.int64, rng_base: tl.int64, p_drop, inv_keep,
                 HEAD_DIM: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                 CAUSAL: tl.constexpr, MASK: tl.constexpr, DROPOUT: tl.constexpr,
                 TMA: tl.constexpr):
    bh = tl.program_id(0).to(tl.int64)
    start_m = (tl.num_programs(1) - 1 - tl.program_id(1)) * BM  # longest rows first
    b = bh // H
    h = bh % H
    hk = h // n_rep
    offs_m = start_m + tl.arange(0, BM)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = (offs_m < L)[:, None]
    q = _rows(_head(Q + b * sqb + h * sqh, L, sqm, HEAD_DIM, BM, TMA), start_m, L, sqm,
              HEAD_DIM, BM, True, TMA)
    do = _rows(_head(DO + b * sdob + h * sdoh, L, sdom, HEAD_DIM, BM, TMA), start_m, L, sdom,
               HEAD_DIM, BM, True, TMA)
    lse2 = tl.load(LSE + bh * L + offs_m, mask=offs_m < L, other=float("inf")) \
        * 1.4426950408889634
    # delta = rowsum(dO * O) of these rows, also stored for the dK/dV kernel
    o = tl.load(O + b * sob + h * soh + offs_m[:, None] * som + offs_d[None, :], mask=rows,
                other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(DELTA + bh * L + offs_m, delta, mask=offs_m < L)
    k_src = _head(K + b * skb + hk * skh, S, skn, HEAD_DIM, BN, TMA)
    v_src = _head(V + b * svb + hk * svh, S, svn, HEAD_DIM, BN, TMA)
    m_row = M + b * smb + h * smh + offs_m[:, None] * smm
    dq = tl.zeros([BM, HEAD_DIM], tl.float32)
    full, hi = _key_blocks(start_m, S, CAUSAL, BM, BN)
    for start_n in range(0, full, BN):
        dq = _dq_block(dq, q, do, lse2, delta, k_src, v_src, m_row, start_n, offs_m, L, S, skn,
                       svn, smn, qk_scale, bh, seed, rng_base, p_drop, inv_keep, HEAD_DIM, BN,
                       CAUSAL, False, MASK, DROPOUT, TMA)
    for start_n in range(full, hi, BN):
        dq = _dq_block(dq, q, do, lse2, delta, k_src, v_src, m_row, start_n, offs_m, L, S, skn,
                       svn, smn, qk_scale, bh, seed, rng_base, p_drop, inv_keep, HEAD_DIM, BN,
                       CAUSAL, True, MASK, DROPOUT, TMA)
    tl.store(DQ + b * sdqb + h * sdqh + offs_m[:, None] * sdqm + offs_d[None, :],
             (dq * scale).to(DQ.dtype.element_ty), mask=rows)


# ============================================================================ launcher
# Per head dim; chosen by ``tools/bench/ops.py --attention-only --sweep`` on an H100.
DKDV_TILES = {16: Tile(32, 32, 4, 2), 32: Tile(32, 32, 4, 2), 64: Tile(64, 64, 4, 3),
              128: Tile(64, 64, 4, 2)}
DQ_TILES = {16: Tile(32, 32, 4, 2), 32: Tile(32, 32, 4, 2), 64: Tile(64, 64, 4, 3),
            128: Tile(128, 64, 8, 3)}

def _empty_like_heads(a):
    """A new array for the gradient of ``a`` (B, H, n, D) in ``a``'s memory order: query-major
    (as ``_heads_view``) where ``a`` is a transposed view of (B, n, H, D) memory, as a
    model's projections make q, k and v, so the gradient flows back into the projection's
    (B, n, H * D) as a view; head-major otherwise."""
    b, h, n, d = a.shape
    if a.strides[2] > a.strides[1]:
        return _heads_view(_launch.empty((b, n, h, d), a.dtype, a.device))
    return _launch.empty(a.shape, a.dtype, a.device)


def scaled_dot_product_attention_backward(grad, q, k, v, out, lse, mask, dropout_p, is_causal,
                                          scale, rng):
    """``(dq, dk, dv)`` of ``scaled_dot_product_attention`` from its ``out``, ``lse`` and
    ``rng``; dk and dv have k's and v's (B, Hk, S, D) shapes (GQA groups are summed)."""
    q, k, v, grad = (_last_dim_unit(a) for a in (q, k, v, grad))
    b, h, n_q, d = q.shape
    hk, n_k = k.shape[1], k.shape[2]
    dq, dk, dv = _empty_like_heads(q), _empty_like_heads(k), _empty_like_heads(v)
    delta = _launch.empty((b, h, n_q), D.float32, q.device)
    seed, base = rng if rng is not None else (0, 0)
    mask, kind, ms = _mask_args(mask, q)
    dropout = dropout_p > 0.0
    inv_keep = 1.0 / (1.0 - dropout_p) if dropout_p < 1.0 else 0.0
    big = _big(q, k, v, mask, grad, out)
    strides = (*q.strides[:3], *k.strides[:3], *v.strides[:3], *ms, *grad.strides[:3])
    common = (n_q, n_k, h, h // hk, float(scale) * LOG2E, float(scale), seed, base,
              float(dropout_p), inv_keep, d)
    flags = (bool(is_causal), kind, dropout)
    key = (d, *flags, aligned(q, k, v, mask, grad, out, lse, dk),
           _launch.spec(*strides, *out.strides[:3], *dq.strides[:3], *dk.strides[:3],
                        *dv.strides[:3]))
    ready = _tma_ready(q, k, v, grad)
    # dQ first: it also writes delta = rowsum(dO * O), which the dK/dV kernel reads
    t = DQ_TILES[d]
    tma = t.tma and ready
    _tile_launcher(_attn_bwd_dq, t).launch(
        (t.bm, t.bn, tma, *key), q.device, (b * h, cdiv(n_q, t.bm)),
        (q, k, v, mask, grad, out, lse, delta, dq, *strides, *out.strides[:3],
         *dq.strides[:3], *common, t.bm, t.bn, *flags, tma),
        big)
    t = DKDV_TILES[d]
    tma = t.tma and ready
    _tile_launcher(_attn_bwd_dkdv, t).launch(
        (t.bm, t.bn, tma, t.trans, *key), q.device, (b * hk, cdiv(n_k, t.bn)),
        (q, k, v, mask, grad, lse, delta, dk, dv, *strides, *dk.strides[:3], *dv.strides[:3],
         *common, t.bm, t.bn, *flags, tma, t.trans), big)
    return dq, dk, dv
