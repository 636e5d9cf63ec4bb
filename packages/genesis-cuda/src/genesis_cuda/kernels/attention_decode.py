"""Decode attention: a few new query rows per sequence against a preallocated KV cache.

``attention_decode`` (the contract method of the same name): each batch row attends to its
cache slots from its first real token (``key_starts``) to its length (``cache_lens``); all
query heads of a KV group share one program, so each cached key is read once per group.
When one program per (row, KV group) would leave the GPU idle (batch 1), the cache length is
split across programs (``_decode_splits``) and ``_attn_decode_combine`` merges their partial
outputs by their row maxima and sums (flash-decoding). ``_kv_append`` first writes the new
tokens' keys and values into their slots, so a decode step is one or two launches per layer.

The training kernels and the shared helpers (``_mma``, the argument
checks) are in ``attention.py``; the tests are ``tests/cuda/test_kernels_attention.py`` and
``tests/nn/test_attention_decode.py``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from genesis import dtypes as D

from . import _launch
from ._launch import aligned, cdiv, dependent_launch, launcher, next_pow2, pdl_prologue
from .attention import HALF, HEAD_DIMS, LOG2E, _big, _last_dim_unit, _mma


@triton.jit(do_not_specialize=["n_q", "n_rep", "hkv", "chunk"])
def _attn_decode(Q, KC, VC, LENS, STARTS, O, PM, PL, sqb, sqh, sqm, skb, skh, skn, svb, svh,
                 svn, n_q, n_rep, hkv, chunk, qk_scale, CAUSAL: tl.constexpr,
                 HAS_STARTS: tl.constexpr, SPLIT: tl.constexpr, HEAD_DIM: tl.constexpr,
                 BM: tl.constexpr, BN: tl.constexpr, PDL: tl.constexpr):
    """One program: BM query rows (the heads of one KV group x the new tokens) of one batch
    row over cache slots ``[start, len)``, or, with SPLIT, over that range's part
    ``[split * chunk, (split + 1) * chunk)``: then it writes its un-normalised output, row
    maximum and row sum (log2 units) for ``_attn_decode_combine``. PDL: launched early
    (``_launch.dependent_launch``), as are the other kernels of this file."""
    pdl_prologue(PDL)
    bhk = tl.program_id(0).to(tl.int64)  # b * Hk + hk
    b = bhk // hkv
    hk = bhk % hkv
    r = tl.program_id(1) * BM + tl.arange(0, BM)  # row = head-in-group * n_q + query
    rows = r < n_rep * n_q
    h = hk * n_rep + r // n_q
    qi = r % n_q
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n0 = tl.arange(0, BN)
    q = tl.load(Q + b * sqb + h[:, None] * sqh + qi[:, None] * sqm + offs_d[None, :],
                mask=rows[:, None], other=0.0)
    n_k = tl.load(LENS + b).to(tl.int32)
    lo = n_k * 0
    if HAS_STARTS:
        lo = tl.load(STARTS + b).to(tl.int32)
    hi = n_k
    if SPLIT:
        split = tl.program_id(2)
        lo = tl.maximum(lo, split * chunk)
        hi = tl.minimum(hi, (split + 1) * chunk)
    pos = n_k - n_q + qi  # absolute position of each query row (the new rows end the cache)
    k_base = KC + b * skb + hk * skh
    v_base = VC + b * svb + hk * svh
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, HEAD_DIM], tl.float32)
    for start_n in range(lo, hi, BN):
        offs_n = start_n + offs_n0
        kv_rows = (offs_n < hi)[:, None]
        k = tl.load(k_base + offs_n[:, None] * skn + offs_d[None, :], mask=kv_rows, other=0.0)
        s = _mma(q, tl.trans(k)) * qk_scale
        allowed = (offs_n < hi)[None, :]
        if CAUSAL:
            allowed = allowed & (offs_n[None, :] <= pos[:, None])
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + offs_n[:, None] * svn + offs_d[None, :], mask=kv_rows, other=0.0)
        acc = acc * alpha[:, None] + _mma(p.to(v.dtype), v)
        m_i = m_new
    o_rows = (b * hkv * n_rep + h) * n_q + qi  # O is (B, Hq, n_q, D) contiguous
    if SPLIT:  # partials: O (B*Hq*n_q, splits, D), PM/PL (B*Hq*n_q, splits), float32
        n_split = tl.num_programs(2)
        part = o_rows * n_split + split
        tl.store(O + part[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=rows[:, None])
        tl.store(PM + part, m_i, mask=rows)
        tl.store(PL + part, l_i, mask=rows)
    else:
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        tl.store(O + o_rows[:, None] * HEAD_DIM + offs_d[None, :],
                 out.to(O.dtype.element_ty), mask=rows[:, None])


@triton.jit(do_not_specialize=["n_split"])
def _attn_decode_combine(PO, PM, PL, O, n_split, HEAD_DIM: tl.constexpr, BS: tl.constexpr,
                         PDL: tl.constexpr):
    """One program per query row: the splits' partial softmaxes merged,
    ``sum_s acc_s 2^(m_s - M) / sum_s l_s 2^(m_s - M)`` with ``M = max_s m_s`` (a row with
    no key anywhere gives zeros)."""
    pdl_prologue(PDL)
    row = tl.program_id(0).to(tl.int64)
    offs_s = tl.arange(0, BS)
    offs_d = tl.arange(0, HEAD_DIM)
    live = offs_s < n_split
    m = tl.load(PM + row * n_split + offs_s, mask=live, other=float("-inf"))
    l_s = tl.load(PL + row * n_split + offs_s, mask=live, other=0.0)
    m_all = tl.max(m, 0)
    m_safe = tl.where(m_all == float("-inf"), 0.0, m_all)
    w = tl.math.exp2(m - m_safe)  # 0 for empty splits (m = -inf)
    acc = tl.load(PO + (row * n_split + offs_s)[:, None] * HEAD_DIM + offs_d[None, :],
                  mask=live[:, None], other=0.0)
    total = tl.sum(l_s * w, 0)
    out = tl.sum(acc * w[:, None], 0) / tl.where(total == 0.0, 1.0, total)
    tl.store(O + row * HEAD_DIM + offs_d, out.to(O.dtype.element_ty))


@triton.jit(do_not_specialize=["n_q", "hkv"])
def _kv_append(KN, VN, KC, VC, LENS, snb, snh, snm, svnb, svnh, svnm, skb, skh, skn, svb, svh,
               svn, n_q, hkv, HEAD_DIM: tl.constexpr, PDL: tl.constexpr):
    """One program per (batch, KV head, new token): its key and value rows written to the
    caches at slot ``len - n_q + i``."""
    pdl_prologue(PDL)
    pid = tl.program_id(0).to(tl.int64)  # ((b * Hk) + hk) * n_q + i
    i = pid % n_q
    bh = pid // n_q
    b = bh // hkv
    hk = bh % hkv
    slot = tl.load(LENS + b).to(tl.int64) - n_q + i
    d = tl.arange(0, HEAD_DIM)
    k = tl.load(KN + b * snb + hk * snh + i * snm + d)
    v = tl.load(VN + b * svnb + hk * svnh + i * svnm + d)
    tl.store(KC + b * skb + hk * skh + slot * skn + d, k)
    tl.store(VC + b * svb + hk * svh + slot * svn + d, v)


def _decode_splits(programs: int, s_max: int, bn: int, device) -> int:
    """How many parts to cut each row's cache into so that about two programs per
    multiprocessor run (flash-decoding): 1 when the (batch, KV head) programs fill the GPU
    already or the cache is short. Chosen from the cache's capacity, not its current length,
    so a captured CUDA graph keeps its launch shape as the cache fills."""
    want = 2 * _launch.sm_count(device)
    if programs * 2 > want:
        return 1
    return max(1, min(cdiv(want, programs), cdiv(s_max, 2 * bn), 64))


def _contiguous_1d(a):
    """A (B,) array with unit stride (the kernels index it by row)."""
    if a.strides[0] == 1 or a.shape[0] == 1:
        return a
    from .elementwise import contiguous

    return contiguous(a)


def decode_supported(q, k_cache, v_cache) -> bool:
    """Whether ``attention_decode`` covers these operands (the backend's composite runs
    otherwise): half precision, head dims of ``HEAD_DIMS``, at most 16 new tokens."""
    return (q.dtype in HALF and k_cache.dtype is q.dtype and v_cache.dtype is q.dtype
            and q.shape[-1] in HEAD_DIMS and 1 <= q.shape[2] <= 16 and k_cache.shape[2] > 0)


def attention_decode(q, k_cache, v_cache, cache_lens, scale=None, causal=True, key_starts=None,
                     k_new=None, v_new=None):
    """Attention of a few new query rows per sequence over a preallocated KV cache.

    Args:
        q: (B, Hq, n_q, D) float16/bfloat16, 1 <= n_q <= 16: the new tokens' queries.
        k_cache, v_cache: (B, Hk, S_max, D) with Hq a multiple of Hk; positions
            ``[key_starts[b], cache_lens[b])`` of row b are valid and the new tokens'
            keys/values are already written at ``[cache_lens[b] - n_q, cache_lens[b])``.
        cache_lens: (B,) int32/int64 valid lengths (each >= n_q, at most S_max).
        scale: score scale (default ``1/sqrt(D)``).
        causal: new token i sees cache positions ``<= cache_lens[b] - n_q + i`` (else the
            whole valid cache).
        key_starts: (B,) int32/int64 first valid slot of each row (left padding, a sliding
            window), or None for 0.
        k_new, v_new: (B, Hk, n_q, D), any strides: the new tokens' keys and values, written
            into the caches at ``[cache_lens[b] - n_q, cache_lens[b])`` first (one kernel for
            both), or None when they are there already.

    Returns:
        (B, Hq, n_q, D) in q's dtype (zeros for a row with no valid key).

    Long caches with few (batch, KV head) pairs are cut into parts run by separate programs
    and merged by a second kernel (``_decode_splits``).

    Example::

        >>> out = attention_decode(q, k_cache, v_cache, lens)   # one token per sequence
    """
    b, h, n_q, d = q.shape
    hkv = k_cache.shape[1]
    if not 1 <= n_q <= 16:
        raise ValueError(f"attention_decode: query length must be 1..16, got q {q.shape}")
    if d not in HEAD_DIMS or v_cache.shape[-1] != d or k_cache.shape[-1] != d:
        raise ValueError(f"attention_decode: head dim must be one of {HEAD_DIMS} for q, k and "
                         f"v, got q {q.shape}, k_cache {k_cache.shape}, v_cache "
                         f"{v_cache.shape}")
    if h % hkv or tuple(k_cache.shape) != tuple(v_cache.shape) or k_cache.shape[0] != b:
        raise ValueError(f"attention_decode: q {q.shape} needs k_cache and v_cache of one "
                         f"shape (B, Hk, S_max, D) with Hq a multiple of Hk, got "
                         f"{k_cache.shape} and {v_cache.shape}")
    if q.dtype not in HALF or k_cache.dtype is not q.dtype or v_cache.dtype is not q.dtype:
        raise TypeError(f"attention_decode: expected float16/bfloat16 q, k_cache, v_cache of "
                        f"one dtype, got {q.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    for name, a in (("cache_lens", cache_lens), ("key_starts", key_starts)):
        if a is not None and (tuple(a.shape) != (b,) or a.dtype not in (D.int32, D.int64)):
            raise TypeError(f"attention_decode: {name} must be int32/int64 of shape ({b},), "
                            f"got {a.dtype} {a.shape}")
    if (k_new is None) != (v_new is None) or (k_new is not None and (
            tuple(k_new.shape) != (b, hkv, n_q, d) or tuple(v_new.shape) != (b, hkv, n_q, d)
            or k_new.dtype is not q.dtype or v_new.dtype is not q.dtype)):
        raise ValueError(f"attention_decode: k_new and v_new must both be given, of shape "
                         f"{(b, hkv, n_q, d)} and dtype {q.dtype}, got "
                         f"{None if k_new is None else (k_new.shape, k_new.dtype)} and "
                         f"{None if v_new is None else (v_new.shape, v_new.dtype)}")
    q, k_cache, v_cache = (_last_dim_unit(a) for a in (q, k_cache, v_cache))
    cache_lens = _contiguous_1d(cache_lens)
    key_starts = None if key_starts is None else _contiguous_1d(key_starts)
    pdl = dependent_launch(q.device)
    if k_new is not None:
        k_new, v_new = _last_dim_unit(k_new), _last_dim_unit(v_new)
        launcher(_kv_append, num_warps=1, num_stages=1).launch(
            (d, aligned(k_new, v_new, k_cache, v_cache, cache_lens),
             _launch.spec(*k_new.strides[:3], *v_new.strides[:3], *k_cache.strides[:3],
                          *v_cache.strides[:3])), q.device,
            (b * hkv * n_q,), (k_new, v_new, k_cache, v_cache, cache_lens, *k_new.strides[:3],
                               *v_new.strides[:3], *k_cache.strides[:3], *v_cache.strides[:3],
                               n_q, hkv, d, pdl), _big(k_new, v_new, k_cache, v_cache))
    n_rep = h // hkv
    out = _launch.empty((b, h, n_q, d), q.dtype, q.device)
    scale = d ** -0.5 if scale is None else float(scale)
    bm = min(64, max(16, next_pow2(n_rep * n_q)))
    bn = 64
    grid = (b * hkv, cdiv(n_rep * n_q, bm))
    splits = _decode_splits(grid[0] * grid[1], k_cache.shape[2], bn, q.device)
    chunk = cdiv(cdiv(k_cache.shape[2], splits), bn) * bn
    if splits > 1:
        rows = b * h * n_q
        po = _launch.empty((rows, splits, d), D.float32, q.device)
        pm = _launch.empty((rows, splits), D.float32, q.device)
        pl = _launch.empty((rows, splits), D.float32, q.device)
        dst = (po, pm, pl)
    else:
        dst = (out, out, out)  # PM/PL are never read without SPLIT
    starts = cache_lens if key_starts is None else key_starts
    args = (q, k_cache, v_cache, cache_lens, starts, *dst, *q.strides[:3],
            *k_cache.strides[:3], *v_cache.strides[:3], n_q, n_rep, hkv, chunk,
            scale * LOG2E, bool(causal), key_starts is not None, splits > 1, d, bm, bn, pdl)
    key = (d, bm, bn, bool(causal), key_starts is not None, splits > 1,
           aligned(q, k_cache, v_cache, cache_lens, starts, *dst),
           _launch.spec(*q.strides[:3], *k_cache.strides[:3], *v_cache.strides[:3]))
    launcher(_attn_decode, num_warps=4, num_stages=2).launch(key, q.device, (*grid, splits), args,
                                         _big(q, k_cache, v_cache))
    if splits > 1:
        bs = next_pow2(splits)
        launcher(_attn_decode_combine, num_warps=4, num_stages=1).launch(
            (d, bs, aligned(*dst, out)), q.device, (b * h * n_q,),
            (po, pm, pl, out, splits, d, bs, pdl))
    return out
