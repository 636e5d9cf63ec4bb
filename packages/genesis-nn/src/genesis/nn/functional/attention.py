"""Attention: ``scaled_dot_product_attention`` and ``multi_head_attention_forward``.

``scaled_dot_product_attention`` first offers the call to the backend's kernel of the fused op
``SCALED_DOT_PRODUCT_ATTENTION`` (``genesis.nn.fused_declarations``; flash attention on CUDA in
``genesis_cuda.kernels.attention``, torch's CPU flash attention on the CPU: no S x S matrix in
memory); where the backend has none or it declines (returns ``NotImplemented``: dropout on the
CPU, unsupported head dims or dtypes) it runs the composite written here with core
matmul/softmax ops, whose gradients come from autograd and which is the reference the fused
kernels are tested against.
"""

from __future__ import annotations

import math

import genesis
from genesis import Tensor
from genesis.autograd.function import Function, once_differentiable
from genesis.autograd.grad_mode import is_grad_enabled
from genesis.dispatch import registered_op
from genesis.nn.functional.dropout import dropout
from genesis.nn.functional.linear import linear
from genesis.nn.functional.padding import pad
from genesis.nn.fused_declarations import SCALED_DOT_PRODUCT_ATTENTION

__all__ = ["scaled_dot_product_attention", "multi_head_attention_forward"]


def _repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """``(..., Hk, S, D)`` -> ``(..., Hk * n_rep, S, D)``, each head repeated ``n_rep`` times
    in a row (``repeat_interleave`` along the head dim)."""
    if n_rep == 1:
        return x
    *batch, hk, s, d = x.shape
    expanded = x.unsqueeze(-3).expand(*batch, hk, n_rep, s, d)  # (..., Hk, n_rep, S, D)
    return expanded.reshape(*batch, hk * n_rep, s, d)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """``softmax(Q K^T * scale + mask) V``.

    Shape:
        output: ``(..., Hq, L, Ev)``.

    Rows whose every position is masked out give zeros (not NaN), as torch's.

    Args:
        query: ``(..., Hq, L, E)``.
        key: ``(..., Hk, S, E)``.
        value: ``(..., Hk, S, Ev)``.
        attn_mask: broadcastable to ``(..., Hq, L, S)``; bool (``True`` = may attend) or
            float (added to the scores).
        dropout_p: dropout probability on the attention weights (applied whenever > 0, as
            torch does: pass 0.0 at evaluation).
        is_causal: position ``i`` attends to ``j <= i`` (top-left aligned); excludes
            ``attn_mask``.
        scale: score scale; default ``1 / sqrt(E)``.
        enable_gqa: allow ``Hk`` to divide ``Hq`` (grouped-query attention): each key/value
            head serves ``Hq / Hk`` consecutive query heads.

    Returns:
        A new ``(*, L, Ev)`` tensor.

    Example::

        >>> q = k = v = genesis.randn(2, 4, 5, 8)
        >>> F.scaled_dot_product_attention(q, k, v, is_causal=True).shape
        genesis.Size([2, 4, 5, 8])
    """
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be "
                           "set when is_causal=True")
    if len(query.shape) < 2 or len(key.shape) < 2 or len(value.shape) < 2:
        raise RuntimeError("scaled_dot_product_attention: query, key and value need at least "
                           "2 dims (L, E)")
    if query.shape[-1] != key.shape[-1]:
        raise RuntimeError(
            f"scaled_dot_product_attention: query and key must have the same embedding size, "
            f"got query {list(query.shape)} and key {list(key.shape)}"
        )
    if enable_gqa and len(query.shape) >= 3:
        hq, hk = query.shape[-3], key.shape[-3]
        if hq % hk or hq % value.shape[-3]:
            raise RuntimeError(
                f"scaled_dot_product_attention: number of query heads ({hq}) must be a "
                f"multiple of key/value heads ({hk}, {value.shape[-3]}) with enable_gqa=True"
            )
    if scale is None:  # (an empty embedding gives torch's 1 / sqrt(0) = inf, not an error)
        scale = 1.0 / math.sqrt(query.shape[-1]) if query.shape[-1] else math.inf
    fused = _fused_attention(query, key, value, attn_mask, dropout_p, is_causal, scale,
                             enable_gqa)
    if fused is not None:
        return fused
    if enable_gqa and len(query.shape) >= 3:
        key = _repeat_kv(key, query.shape[-3] // key.shape[-3])
        value = _repeat_kv(value, query.shape[-3] // value.shape[-3])
    L, S = query.shape[-2], key.shape[-2]
    scores = genesis.matmul(query, key.transpose(-2, -1)) * scale  # (..., H, L, S)

    masked = None  # bool, True where attention is NOT allowed
    if is_causal:  # key j > query i
        masked = genesis.ones((L, S), dtype=genesis.bool, device=query.device).triu(1)
    elif attn_mask is not None:
        if attn_mask.dtype is genesis.bool:
            masked = attn_mask.logical_not()
        else:
            scores = scores + attn_mask
    if masked is not None:
        scores = scores.masked_fill(masked, float("-inf"))
    if attn_mask is not None or (is_causal and S == 0):
        # Fully masked rows: softmax would give NaN (and NaN gradients). Give them zeros.
        # (A causal mask leaves key 0 to every query: no such row unless there is no key.)
        dead = (scores == float("-inf")).all(-1, keepdim=True)  # (..., L, 1)
        weights = genesis.where(dead, 0.0, genesis.where(dead, 0.0, scores).softmax(-1))
    else:
        weights = scores.softmax(-1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, training=True)
    return genesis.matmul(weights, value)  # (..., H, L, Ev)


@registered_op("scaled_dot_product_attention_kernel")
def _attention_kernel(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float,
                      is_causal: bool, scale: float):
    """The backend's fused attention forward on (B, H, L, E) tensors: ``(out, lse, rng)``,
    or None where the backend has no kernel for these operands. A registered op (so a
    trace records it, and a replay runs the kernel again) that records no gradient: its
    results feed ``_FusedAttention``, which does."""
    backend = q._backend
    gen = backend.default_generator(q.device.index) if dropout_p > 0.0 else None
    result = SCALED_DOT_PRODUCT_ATTENTION.forward(
        backend, q._data, k._data, v._data, None if mask is None else mask._data,
        float(dropout_p), bool(is_causal), float(scale), gen)
    if result is NotImplemented:
        return None
    out, lse, rng = result
    return Tensor._wrap(out, q.device), Tensor._wrap(lse, q.device), rng  # (B, Hq, L, Ev)


class _FusedAttention(Function):
    """Autograd of the backend's fused attention.

    ``apply`` receives the forward's output and logsumexp, computed by
    ``_attention_kernel`` just before (so a backend can decline and leave the call to the
    composite); ``forward`` returns the output as a new tensor, and ``backward`` hands the
    saved output and logsumexp to the backend's fused backward.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, dropout_p, is_causal, scale, out, lse, rng):
        ctx.save_for_backward(q, k, v, out, lse, mask)  # (out: the kernel's, not the result)
        ctx.rng, ctx.dropout_p, ctx.is_causal, ctx.scale = rng, dropout_p, is_causal, scale
        return Tensor._wrap(out._data, q.device)  # (B, Hq, L, Ev)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        q, k, v, out, lse, mask = ctx.saved_tensors
        grads = SCALED_DOT_PRODUCT_ATTENTION.backward(
            q._backend, grad._data, q._data, k._data, v._data, out._data, lse._data,
            None if mask is None else mask._data, ctx.dropout_p, ctx.is_causal, ctx.scale,
            ctx.rng)
        if grads is NotImplemented:
            raise TypeError(f"backend {q._backend.name!r} ran the scaled_dot_product_attention "
                            "kernel but has no scaled_dot_product_attention_backward kernel")
        dq, dk, dv = grads
        dev = q.device
        return (Tensor._wrap(dq, dev), Tensor._wrap(dk, dev), Tensor._wrap(dv, dev), None, None,
                None, None, None, None, None)


def _fused_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float,
                     is_causal: bool, scale: float, gqa: bool) -> Tensor | None:
    """The backend's fused attention kernel for 3-d/4-d operands of one device, or ``None``
    where there is none or it declines (then the composite runs: it also raises the errors
    for bad arguments)."""
    nd = len(q.shape)  # (not the ndim property: a call)
    if nd not in (3, 4) or len(k.shape) != nd or len(v.shape) != nd:
        return None
    if not (q.device == k.device == v.device) or (mask is not None and mask.device != q.device):
        return None
    hq, hk = q.shape[-3], k.shape[-3]
    if v.shape[-3] != hk or hq % hk or (hq != hk and not gqa):
        return None
    if q.shape[:-3] != k.shape[:-3] or k.shape[:-1] != v.shape[:-1]:
        return None  # batch broadcasting: the composite handles it
    if mask is not None and mask.requires_grad and is_grad_enabled():
        return None  # the fused backward gives no mask gradient
    if genesis.is_autocast_enabled(q.device.type):  # attention is a "lower" autocast op
        low = genesis.get_autocast_dtype(q.device.type)
        q, k, v = (t if t.dtype is genesis.float64 or not t.dtype.is_floating_point
                   else t.to(low) for t in (q, k, v))
    unbatched = nd == 3
    if unbatched:  # (H, L, E): a batch of one
        q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
    b, _, n_q, _ = q.shape
    if mask is not None:
        try:
            mask = mask.expand(b, hq, n_q, k.shape[2])  # (B, Hq, L, S), a view
        except RuntimeError:
            return None
    result = _attention_kernel(q, k, v, mask, float(dropout_p), bool(is_causal), float(scale))
    if result is None:
        return None
    out = _FusedAttention.apply(q, k, v, mask, float(dropout_p), bool(is_causal), float(scale),
                                *result)
    return out.squeeze(0) if unbatched else out


def _canonical_mask(mask: Tensor | None, dtype, name: str) -> Tensor | None:
    """A float additive mask from a bool one (``True`` -> ``-inf``, i.e. not allowed)."""
    if mask is None:
        return None
    if mask.dtype is genesis.bool:
        return genesis.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
            mask, float("-inf"))
    if not mask.dtype.is_floating_point:
        raise AssertionError(f"only bool and floating types of {name} are supported")
    return mask.to(dtype)


def multi_head_attention_forward(
    query: Tensor, key: Tensor, value: Tensor, embed_dim_to_check: int, num_heads: int,
    in_proj_weight: Tensor | None, in_proj_bias: Tensor | None, bias_k: Tensor | None,
    bias_v: Tensor | None, add_zero_attn: bool, dropout_p: float, out_proj_weight: Tensor,
    out_proj_bias: Tensor | None, training: bool = True,
    key_padding_mask: Tensor | None = None, need_weights: bool = True,
    attn_mask: Tensor | None = None, use_separate_proj_weight: bool = False,
    q_proj_weight: Tensor | None = None, k_proj_weight: Tensor | None = None,
    v_proj_weight: Tensor | None = None, static_k: Tensor | None = None,
    static_v: Tensor | None = None, average_attn_weights: bool = True,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Multi-head attention, as ``torch.nn.functional.multi_head_attention_forward``.

    The weights and options are those of ``nn.MultiheadAttention``, with torch's names and
    meanings.

    Args:
        query: ``(L, N, E)`` or unbatched ``(L, E)`` (sequence first).
        key: ``(S, N, Ek)`` or ``(S, Ek)``.
        value: ``(S, N, Ev)`` or ``(S, Ev)``.
        embed_dim_to_check: ``E``, checked against ``query``.
        num_heads: the number of heads (``E`` must be divisible by it).
        in_proj_weight: the packed ``(3E, E)`` q/k/v projection (None with separate weights).
        in_proj_bias: the packed ``(3E,)`` projection bias, or None.
        bias_k: a ``(1, 1, E)`` bias appended to the keys, or None.
        bias_v: a ``(1, 1, E)`` bias appended to the values, or None.
        add_zero_attn: append a row of zeros to the keys and values.
        dropout_p: dropout probability on the attention weights (when ``training``).
        out_proj_weight: the ``(E, E)`` output projection.
        out_proj_bias: the ``(E,)`` output projection bias, or None.
        training: apply dropout.
        key_padding_mask: ``(N, S)``; bool ``True`` = ignore that key, or float (added).
        need_weights: also return the attention weights.
        attn_mask: ``(L, S)`` or ``(N * num_heads, L, S)``; bool ``True`` = not allowed, or
            float (added).
        use_separate_proj_weight: use ``q_proj_weight``/``k_proj_weight``/``v_proj_weight``
            instead of ``in_proj_weight``.
        q_proj_weight: the ``(E, E)`` query projection (separate weights only).
        k_proj_weight: the ``(E, Ek)`` key projection (separate weights only).
        v_proj_weight: the ``(E, Ev)`` value projection (separate weights only).
        static_k: must be None (not supported).
        static_v: must be None (not supported).
        average_attn_weights: average the returned weights over the heads.
        is_causal: with no ``attn_mask``, use a causal mask.

    Returns:
        ``(output (L, N, E), weights)``; weights are ``(N, L, S)`` averaged over heads (or
        ``(N, H, L, S)`` with ``average_attn_weights=False``), ``None`` unless
        ``need_weights``.
    """
    if static_k is not None or static_v is not None:
        raise NotImplementedError("multi_head_attention_forward: static_k/static_v are not "
                                  "supported")
    batched = query.ndim == 3
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    tgt_len, bsz, embed_dim = query.shape
    src_len = key.shape[0]
    if embed_dim != embed_dim_to_check:
        raise AssertionError(
            f"was expecting embedding dimension of {embed_dim_to_check}, but got {embed_dim}")
    if embed_dim % num_heads:
        raise AssertionError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    head_dim = embed_dim // num_heads
    if key.shape[:2] != value.shape[:2]:
        raise AssertionError(
            f"key shape {list(key.shape)} does not match value shape {list(value.shape)}")

    if is_causal and attn_mask is None and not need_weights and key_padding_mask is None:
        causal_only = True
    else:
        causal_only = False
        if is_causal and attn_mask is None:
            attn_mask = genesis.ones((tgt_len, src_len), dtype=genesis.bool,
                                     device=query.device).triu(1)
    key_padding_mask = _canonical_mask(key_padding_mask, query.dtype, "key_padding_mask")
    attn_mask = _canonical_mask(attn_mask, query.dtype, "attn_mask")

    # Input projections.
    if use_separate_proj_weight:
        w_q, w_k, w_v = q_proj_weight, k_proj_weight, v_proj_weight
    else:
        w_q, w_k, w_v = in_proj_weight.chunk(3)
    b_q = b_k = b_v = None
    if in_proj_bias is not None:
        b_q, b_k, b_v = in_proj_bias.chunk(3)
    q = linear(query, w_q, b_q)  # (L, N, E)
    k = linear(key, w_k, b_k)  # (S, N, E)
    v = linear(value, w_v, b_v)  # (S, N, E)

    if attn_mask is not None and attn_mask.ndim == 2:
        if tuple(attn_mask.shape) != (tgt_len, src_len):
            raise RuntimeError(
                f"The shape of the 2D attn_mask is {list(attn_mask.shape)}, but should be "
                f"{[tgt_len, src_len]}.")
        attn_mask = attn_mask.unsqueeze(0)
    elif attn_mask is not None:
        if tuple(attn_mask.shape) != (bsz * num_heads, tgt_len, src_len):
            raise RuntimeError(
                f"The shape of the 3D attn_mask is {list(attn_mask.shape)}, but should be "
                f"{[bsz * num_heads, tgt_len, src_len]}.")

    if bias_k is not None and bias_v is not None:
        k = genesis.cat([k, bias_k.reshape(1, 1, embed_dim).expand(1, bsz, embed_dim)])
        v = genesis.cat([v, bias_v.reshape(1, 1, embed_dim).expand(1, bsz, embed_dim)])
        if attn_mask is not None:
            attn_mask = pad(attn_mask, (0, 1))
        if key_padding_mask is not None:
            key_padding_mask = pad(key_padding_mask, (0, 1))

    # (L, N, E) -> (N, H, L, D)
    q = q.reshape(tgt_len, bsz, num_heads, head_dim).permute(1, 2, 0, 3)
    k = k.reshape(k.shape[0], bsz, num_heads, head_dim).permute(1, 2, 0, 3)
    v = v.reshape(v.shape[0], bsz, num_heads, head_dim).permute(1, 2, 0, 3)

    if add_zero_attn:
        zeros = genesis.zeros((bsz, num_heads, 1, head_dim), dtype=k.dtype, device=k.device)
        k = genesis.cat([k, zeros], dim=2)
        v = genesis.cat([v, zeros], dim=2)
        if attn_mask is not None:
            attn_mask = pad(attn_mask, (0, 1))
        if key_padding_mask is not None:
            key_padding_mask = pad(key_padding_mask, (0, 1))
    src_len = k.shape[2]

    # One additive mask of shape (N, H, L, S) (or broadcastable to it).
    if attn_mask is not None:
        lead = (1, 1) if attn_mask.shape[0] == 1 else (bsz, num_heads)
        attn_mask = attn_mask.reshape(*lead, tgt_len, src_len)
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (bsz, src_len):
            raise AssertionError(
                f"expecting key_padding_mask shape of {(bsz, src_len)}, but got "
                f"{tuple(key_padding_mask.shape)}")
        kpm = key_padding_mask.reshape(bsz, 1, 1, src_len)
        attn_mask = kpm if attn_mask is None else attn_mask + kpm

    if not training:
        dropout_p = 0.0
    if need_weights:
        scores = genesis.matmul(q * (1.0 / math.sqrt(head_dim)), k.transpose(-2, -1))
        if attn_mask is not None:
            scores = scores + attn_mask  # (N, H, L, S)
        weights = scores.softmax(-1)
        if dropout_p > 0.0:
            weights = dropout(weights, dropout_p, training=True)
        out = genesis.matmul(weights, v)  # (N, H, L, D)
        if average_attn_weights:
            weights = weights.mean(1)  # (N, L, S)
    else:
        out = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, causal_only)
        weights = None
    out = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)  # (L, N, E)
    out = linear(out, out_proj_weight, out_proj_bias)
    if not batched:
        out = out.squeeze(1)
        if weights is not None:
            weights = weights.squeeze(0)
    return out, weights
