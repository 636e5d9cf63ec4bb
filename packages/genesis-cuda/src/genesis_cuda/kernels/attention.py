"""Flash attention: ``softmax(Q K^T * scale + mask) V`` without an S x S matrix in memory.

Read top to bottom like a Triton tutorial:

1. **Forward kernel** (``_attn_fwd``). One program owns ``BM`` query rows of one (batch,
   head) and streams the keys and values past them in blocks of ``BN``, keeping a running
   row maximum ``m``, row sum ``l`` and un-normalised output ``acc`` (the online softmax of
   FlashAttention-2). Scores live in registers in log2 units (the scale is folded with
   log2(e), and ``exp2`` is one instruction); the output is ``acc / l`` and the row's
   ``logsumexp`` is kept for the backward. Causal attention is top-left aligned as in torch
   (row ``i`` sees keys ``j <= i``): a program stops at its diagonal, and only the blocks on
   the diagonal or past the end of the keys pay for masking (the ``BOUNDS`` pass of
   ``_fwd_block``); the blocks left of it run with no mask and no bounds checks.
2. **Backward kernels** (``attention_backward.py``, with their launcher). ``_attn_bwd_dkdv``:
   one program per block of keys of one (batch, KV head) walks every query block of every
   query head in its group and accumulates dK and dV in registers, so grouped-query heads
   need no repeated K/V and no atomics. With ``Tile.trans`` it works transposed (``S^T = K
   Q^T``), so ``P^T`` and ``dS^T`` come out of one product already in the layout the next one
   takes (no trip through shared memory, more registers). ``_attn_bwd_dq``: one program per
   query block walks the keys for dQ; it runs first and also stores ``delta = rowsum(dO *
   O)`` of its rows. Both recompute the probabilities from the saved logsumexp: ``P = exp(S
   - lse)``, ``dS = P * (dP - delta)``; dQ applies the causal mask only on the blocks that
   cross the diagonal (rows past the end load as zeros with ``lse = +inf`` and contribute
   nothing). All three kernels can read their streamed blocks through TMA descriptors made
   on the device (``Tile.tma`` in the tile tables; zero-filled past the end, so no load
   masks) when every operand is 16-byte aligned, else through pointers.
3. **Launchers** (the kernels of the fused op ``scaled_dot_product_attention``, registered
   by that name and ``scaled_dot_product_attention_backward`` in ``genesis_cuda.fused_kernels``).
   The forward returns ``NotImplemented`` for what the kernels do not cover (head dims other
   than 16/32/64/128, dtypes other than float16/bfloat16, empty tensors, a negative scale);
   genesis then runs its composite.

Decode (a few new query rows against a preallocated KV cache) is ``attention_decode.py``.

The autograd wrapper is ``genesis.nn.functional.scaled_dot_product_attention`` (genesis-nn);
the tests are ``tests/cuda/test_kernels_attention.py`` (they also run under
``TRITON_INTERPRET=1``); the benchmark is the attention section of ``tools/bench/ops.py``.

Masks: an optional ``mask`` array broadcast (zero strides) to (B, Hq, L, S): bool (True =
may attend) or floating (added to the scores). Key padding is a bool mask of shape
(B, 1, 1, S). Rows that can attend nowhere give zeros and zero gradients (their logsumexp
is stored as +inf).

Dropout: the keep decision of score (b, h, i, j) is ``philox(seed, base + ((b*H + h)*L +
i)*S + j) >= p``, with ``base`` reserved from the device generator (``next_offset``); the
backward recomputes the same decisions from ``(seed, base)``. No mask is stored.
"""

from __future__ import annotations

from typing import NamedTuple

import triton
import triton.language as tl

from genesis import dtypes as D
from genesis_cuda.array import as_strided

from . import _launch
from ._launch import Launcher, aligned, cdiv, launcher
from .elementwise import contiguous

LOG2E = 1.4426950408889634
HEAD_DIMS = (16, 32, 64, 128)
HALF = (D.float16, D.bfloat16)

if _launch.INTERPRET:
    # Triton's CPU interpreter multiplies bfloat16 tiles wrongly in tl.dot; products of
    # half-precision values are exact in float32, so widening first gives the GPU's result.
    @triton.jit
    def _mma(a, b):
        return tl.dot(a.to(tl.float32), b.to(tl.float32))

    @triton.jit
    def _mma_acc(a, b, acc):
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
else:
    @triton.jit
    def _mma(a, b):
        return tl.dot(a, b)

    @triton.jit
    def _mma_acc(a, b, acc):  # acc + a @ b, accumulated in place by the tensor cores
        return tl.dot(a, b, acc)


# ============================================================================ forward
@triton.jit
def _head(base, n, stride, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, TMA: tl.constexpr):
    """Where one head's (n, HEAD_DIM) rows (of Q, K, V or dO) are read from: a TMA
    descriptor of BLOCK-row boxes, or (without TMA) the base pointer itself."""
    if TMA:
        src = tl.make_tensor_descriptor(base, shape=[n, HEAD_DIM], strides=[stride, 1],
                                        block_shape=[BLOCK, HEAD_DIM])
    else:
        src = base
    return src


@triton.jit
def _rows(src, start, n, stride, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
          BOUNDS: tl.constexpr, TMA: tl.constexpr):
    """BLOCK rows from row ``start`` of a ``_head``: through its TMA descriptor (rows past
    the end read as zeros) or through pointers built here from the row index (a pointer
    tile held across a loop would cost registers), masked only where ``BOUNDS`` says the
    block may run past row ``n``."""
    if TMA:
        x = src.load([start, 0])
    else:
        offs = start + tl.arange(0, BLOCK)
        ptrs = src + offs[:, None] * stride + tl.arange(0, HEAD_DIM)[None, :]
        if BOUNDS:
            x = tl.load(ptrs, mask=(offs < n)[:, None], other=0.0)
        else:
            x = tl.load(ptrs)
    return x


@triton.jit
def _key_blocks(start_m, S, CAUSAL: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """``(full, hi)`` for the query rows ``start_m ..`` of one program: key blocks before
    ``full`` need no mask and no bounds checks (whole blocks, wholly left of the diagonal
    when causal); those from ``full`` to ``hi`` do (the diagonal or the ragged end)."""
    if CAUSAL:
        hi = tl.minimum(S, start_m + BM)
        full = tl.minimum((start_m // BN) * BN, (S // BN) * BN)
    else:
        hi = S
        full = (S // BN) * BN
    return full, hi


@triton.jit
def _fwd_block(acc, m_i, l_i, q, k_src, v_src, m_row, start_n, offs_m, L, S, skn, svn, smn,
               qk_scale, bh, seed, rng_base, p_drop, HEAD_DIM: tl.constexpr, BN: tl.constexpr,
               CAUSAL: tl.constexpr, BOUNDS: tl.constexpr, MASK: tl.constexpr,
               DROPOUT: tl.constexpr, TMA: tl.constexpr):
    """One key block of the online softmax: returns the updated (acc, m, l). Scores are in
    log2 units, -inf where attention is not allowed. ``BOUNDS``: the block crosses the
    causal diagonal or the end of the keys and needs those masks; other blocks need none.
    ``m_row``: the mask's pointers at key 0 of each query row (read only with a mask)."""
    offs_n = start_n + tl.arange(0, BN)
    k = _rows(k_src, start_n, S, skn, HEAD_DIM, BN, BOUNDS, TMA)
    qk = _mma(q, tl.trans(k))
    if BOUNDS or MASK != 0:
        s = qk * qk_scale
        if MASK != 0:
            inside = (offs_m < L)[:, None] & (offs_n < S)[None, :]
            mask_ptrs = m_row + offs_n[None, :] * smn
            if MASK == 1:  # bool: True = may attend
                allowed = tl.load(mask_ptrs, mask=inside, other=0)
                s = tl.where(allowed != 0, s, float("-inf"))
            else:  # float: added to the scores
                s += tl.load(mask_ptrs, mask=inside, other=0.0).to(tl.float32) \
                    * 1.4426950408889634
        if BOUNDS:
            s = tl.where((offs_n < S)[None, :], s, float("-inf"))
            if CAUSAL:
                s = tl.where(offs_n[None, :] <= offs_m[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing allowed
        p = tl.math.exp2(s - m_safe[:, None])
    else:
        # every score is finite and qk_scale >= 0 (the launcher's contract), so the block's
        # largest scaled score is its largest score scaled, and each score costs one FMA
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        m_safe = m_new
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, 1)
    if DROPOUT:  # the normaliser counts every key; the output only the kept ones
        ctr = (bh * L + offs_m.to(tl.int64))[:, None] * S + offs_n[None, :] + rng_base
        p = tl.where(tl.rand(seed, ctr) >= p_drop, p, 0.0)
    v = _rows(v_src, start_n, S, svn, HEAD_DIM, BN, BOUNDS, TMA)
    acc = _mma_acc(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, m_new, l_i


@triton.jit(do_not_specialize=["L", "S", "H", "n_rep", "seed", "rng_base"])
def _attn_fwd(Q, K, V, M, O, LSE,
              sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, smb, smh, smm, smn, sob, soh, som,
              L, S, H, n_rep, qk_scale, seed: tl.int64, rng_base: tl.int64, p_drop,
              inv_keep, HEAD_DIM: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
              CAUSAL: tl.constexpr, MASK: tl.constexpr, DROPOUT: tl.constexpr,
              TMA: tl.constexpr):
    bh = tl.program_id(0).to(tl.int64)  # b * H + h (axis 0: no 65535 limit)
    # last query block first: under a causal mask it has the most keys (a shorter tail)
    start_m = (tl.num_programs(1) - 1 - tl.program_id(1)) * BM
    b = bh // H
    h = bh % H
    hk = h // n_rep
    offs_m = start_m + tl.arange(0, BM)
    offs_d = tl.arange(0, HEAD_DIM)
    q = _rows(_head(Q + b * sqb + h * sqh, L, sqm, HEAD_DIM, BM, TMA), start_m, L, sqm,
              HEAD_DIM, BM, True, TMA)
    k_src = _head(K + b * skb + hk * skh, S, skn, HEAD_DIM, BN, TMA)
    v_src = _head(V + b * svb + hk * svh, S, svn, HEAD_DIM, BN, TMA)
    m_row = M + b * smb + h * smh + offs_m[:, None] * smm
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, HEAD_DIM], tl.float32)
    full, hi = _key_blocks(start_m, S, CAUSAL, BM, BN)
    for start_n in range(0, full, BN):
        acc, m_i, l_i = _fwd_block(acc, m_i, l_i, q, k_src, v_src, m_row, start_n, offs_m, L,
                                   S, skn, svn, smn, qk_scale, bh, seed, rng_base, p_drop,
                                   HEAD_DIM, BN, CAUSAL, False, MASK, DROPOUT, TMA)
    for start_n in range(full, hi, BN):
        acc, m_i, l_i = _fwd_block(acc, m_i, l_i, q, k_src, v_src, m_row, start_n, offs_m, L,
                                   S, skn, svn, smn, qk_scale, bh, seed, rng_base, p_drop,
                                   HEAD_DIM, BN, CAUSAL, True, MASK, DROPOUT, TMA)
    dead = l_i == 0.0
    l_safe = tl.where(dead, 1.0, l_i)
    out = acc * (inv_keep / l_safe)[:, None]
    lse = tl.where(dead, float("inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)
    rows = offs_m < L
    tl.store(O + b * sob + h * soh + offs_m[:, None] * som + offs_d[None, :],
             out.to(O.dtype.element_ty), mask=rows[:, None])
    tl.store(LSE + bh * L + offs_m, lse, mask=rows)


# ============================================================================ launchers
class Tile(NamedTuple):
    """How one attention kernel is launched for one head dim.

    ``bm`` query rows by ``bn`` keys per tile (any powers of two from 16 up; the forward and
    dQ kernels hold ``bm`` rows and walk ``bn``-key blocks, the dK/dV kernel holds ``bn`` keys
    and walks ``bm``-row query blocks), ``warps`` and ``stages`` (software pipelining depth);
    ``tma``: read the streamed blocks through TMA descriptors (where the operands allow);
    ``trans`` (dK/dV only): keep its tiles keys-by-queries; ``maxnreg``: cap on registers per
    thread (0: the compiler's choice), e.g. 128 so that two 8-warp programs fit on an SM.

    Known problem: the plain dK/dV kernel with ``Tile(32, 128, 4, 3)`` at head dim 64 gave a
    wrong dK on an H100 (GQA 16:4, 1031 keys; ``tests/cuda/test_kernels_attention.py``
    ``test_forward_backward``), although the interpreter tests of asymmetric tiles pass. Not
    yet explained: run those GPU tests before shipping a dK/dV tile with ``bm < bn``.
    """

    bm: int
    bn: int
    warps: int
    stages: int
    tma: bool = False
    trans: bool = False
    maxnreg: int = 0

    def __repr__(self) -> str:  # the shortest form that constructs it
        flags = "".join(f", {name}={getattr(self, name)!r}" for name in ("tma", "trans", "maxnreg")
                        if getattr(self, name))
        return f"Tile({self.bm}, {self.bn}, {self.warps}, {self.stages}{flags})"


# Per head dim; chosen by ``tools/bench/ops.py --attention-only --sweep`` on an H100.
FWD_TILES = {16: Tile(64, 32, 4, 3), 32: Tile(64, 32, 4, 3), 64: Tile(128, 64, 8, 4),
             128: Tile(128, 64, 8, 3)}  # (the backward's: attention_backward.py)
def _tile_launcher(fn, t: Tile) -> Launcher:
    """The shared launcher of kernel ``fn`` with tile ``t``'s compile options."""
    opts = {"maxnreg": t.maxnreg} if t.maxnreg else {}
    return launcher(fn, num_warps=t.warps, num_stages=t.stages, **opts)


def _heads_view(a):
    """A ``(B, L, H, D)`` array seen as ``(B, H, L, D)``: the forward writes its output in
    that memory order, so ``out.transpose(1, 2).reshape(B, L, H * D)`` (the output
    projection's input) is a view, not a copy."""
    b, n, h, d = a.shape
    return as_strided(a, (b, h, n, d), (n * h * d, d, h * d, 1), a.offset)


def _last_dim_unit(a):
    """``a`` itself when its last dim is contiguous, else a contiguous copy."""
    if a.strides[-1] == 1 or a.shape[-1] == 1:
        return a

    return contiguous(a)


def _mask_args(mask, q):
    """(array, kind, strides) of the optional mask: kind 0 none, 1 bool, 2 float. Without a
    mask the kernels get ``q`` in its place (never read: its code is compiled out)."""
    if mask is None:
        return q, 0, (0, 0, 0, 0)
    return mask, (1 if mask.dtype is D.bool_ else 2), tuple(mask.strides)


def _big(*arrays) -> bool:
    """Whether an element offset inside any of ``arrays`` can reach 2**31."""
    return any(sum((n - 1) * abs(s) for n, s in zip(a.shape, a.strides)) + a.shape[-1]
               >= 2**31 for a in arrays if a is not None)


def _tma_ready(*arrays) -> bool:
    """Whether TMA descriptors can read these (B, H, n, D) half-precision operands: each
    starts on a 16-byte boundary, its batch, head and row strides are multiples of 16 bytes
    (so every head's first row is aligned too) and its row stride is positive."""
    return all(a.data_ptr() % 16 == 0 and all(s % 8 == 0 for s in a.strides[:3])
               and a.strides[2] > 0 for a in arrays)


def supported(q, k, v, mask) -> bool:
    """Whether the flash kernels cover these operands (otherwise the composite runs)."""
    if q.dtype not in HALF or k.dtype is not q.dtype or v.dtype is not q.dtype:
        return False
    if len(q.shape) != 4 or q.shape[-1] not in HEAD_DIMS or v.shape[-1] != q.shape[-1]:
        return False
    if mask is not None and not (mask.dtype is D.bool_ or mask.dtype.is_floating_point):
        return False
    return all(n > 0 for n in q.shape) and k.shape[2] > 0


def scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale, gen):
    """Flash attention forward.

    Args:
        q: (B, Hq, L, D) float16/bfloat16; k, v: (B, Hk, S, D) with Hq a multiple of Hk.
        mask: None, or bool/float (B, Hq, L, S) (zero strides where broadcast).
        dropout_p: probability of dropping an attention weight (0 for none).
        is_causal: row i attends to keys j <= i.
        scale: score scale.
        gen: the device's Philox generator (used only when ``dropout_p > 0``).

    Returns:
        ``(out (B, Hq, L, D), lse (B, Hq, L) float32, rng)`` where ``rng`` is ``(seed,
        offset)`` of the dropout stream (``None`` without dropout), or ``NotImplemented``
        when these operands are not covered or the scale is negative (genesis then runs its
        composite).
    """
    if not supported(q, k, v, mask) or not scale >= 0.0:  # the kernels need scale >= 0
        return NotImplemented
    q, k, v = _last_dim_unit(q), _last_dim_unit(k), _last_dim_unit(v)
    b, h, n_q, d = q.shape
    n_k = k.shape[2]
    out = _heads_view(_launch.empty((b, n_q, h, d), q.dtype, q.device))
    lse = _launch.empty((b, h, n_q), D.float32, q.device)
    rng = None
    seed = base = 0
    if dropout_p > 0.0:
        # both typed int64 in the kernels (one compiled kernel whatever their size); the
        # seed's bits are what Philox uses
        seed, base = _signed64(int(gen.seed)), _signed64(gen.next_offset(b * h * n_q * n_k))
        rng = (seed, base)
    mask, kind, ms = _mask_args(mask, q)
    t = FWD_TILES[d]
    tma = t.tma and _tma_ready(q, k, v)
    args = (q, k, v, mask, out, lse, *q.strides[:3], *k.strides[:3], *v.strides[:3], *ms,
            *out.strides[:3], n_q, n_k, h, h // k.shape[1], float(scale) * LOG2E, seed, base,
            float(dropout_p), 1.0 / (1.0 - dropout_p) if dropout_p < 1.0 else 0.0, d, t.bm,
            t.bn, bool(is_causal), kind, dropout_p > 0.0, tma)
    key = (d, t.bm, t.bn, bool(is_causal), kind, dropout_p > 0.0, tma,
           aligned(q, k, v, mask, out, lse),
           _launch.spec(*q.strides[:3], *k.strides[:3], *v.strides[:3], *ms, *out.strides[:3]))
    _tile_launcher(_attn_fwd, t).launch(
        key, q.device, (b * h, cdiv(n_q, t.bm)), args, _big(q, k, v, mask, out))
    return out, lse, rng


def _signed64(x: int) -> int:
    """A 64-bit counter as the int64 with the same bits (Philox uses the bits)."""
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= 1 << 63 else x
