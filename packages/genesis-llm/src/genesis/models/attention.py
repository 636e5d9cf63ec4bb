"""Grouped-query self-attention with RoPE, the attention masks, and the preallocated KV cache.

Masks are boolean, ``True`` where a query may look at a key, built from *slots* (a token's
index in the sequence / cache, as transformers' ``cache_position``) rather than from
position ids, so left padding changes which keys are valid but not the causal order:

    allowed[b, q, k] = key_valid[b, k] and k <= slot[q] (and k > slot[q] - window)

A decode step whose valid keys are one range of slots per row (left padding, a sliding
window) describes them as a ``CacheSpan`` instead: ``F.attention_decode`` then reads only
those slots, with their bounds in device tensors.

In inference (not training, no gradient) the q/k/v projections run as one matmul
(``FusedLinear``).
"""

from __future__ import annotations

from dataclasses import dataclass

import genesis
import genesis.nn as nn
import genesis.nn.functional as F
from genesis import Tensor
from genesis.models.config import Qwen2Config
from genesis.models.fused_weights import FusedLinear

__all__ = ["Attention", "CacheSpan", "KVCache", "attention_mask"]


def attention_mask(query_slots: Tensor, key_valid: Tensor, window: int | None) -> Tensor:
    """Which keys each query may attend to.

    Args:
        query_slots: ``(S,)`` int64, the slot of each query token.
        key_valid: ``(B, K)`` bool, False for padding (and keys are slots ``0 .. K-1``).
        window: sliding-window length, or None for full causal attention.

    Returns:
        ``(B, 1, S, K)`` bool, True = may attend.
    """
    key_slots = genesis.arange(key_valid.shape[1], device=key_valid.device)  # (K,)
    q = query_slots.unsqueeze(1)  # (S, 1)
    allowed = key_slots.unsqueeze(0) <= q  # (S, K)
    if window is not None:
        allowed = allowed & (key_slots.unsqueeze(0) > q - window)
    return allowed.unsqueeze(0).unsqueeze(0) & key_valid.unsqueeze(1).unsqueeze(1)


@dataclass(frozen=True)
class CacheSpan:
    """The cache slots ``[starts[b], lens[b])`` that row ``b``'s new token attends to.

    Attributes:
        starts: ``(B,)`` int64, the first valid slot (after left padding, inside the window).
        lens: ``(B,)`` int64, one past the new token's slot.
    """

    starts: Tensor
    lens: Tensor


class KVCache:
    """Keys and values of every layer, preallocated for ``max_length`` slots.

    Args:
        config: the model config (layers, key/value heads, head size).
        batch_size: sequences in the batch.
        max_length: slots per sequence (prompt + new tokens).
        dtype, device: of the buffers (the model's).

    Shape:
        each buffer: ``(B, Hkv, max_length, D)``.
    """

    def __init__(self, config: Qwen2Config, batch_size: int, max_length: int, dtype,
                 device) -> None:
        shape = (batch_size, config.num_key_value_heads, max_length, config.head_size)
        self.keys = [genesis.zeros(shape, dtype=dtype, device=device)
                     for _ in range(config.num_hidden_layers)]
        self.values = [genesis.zeros(shape, dtype=dtype, device=device)
                       for _ in range(config.num_hidden_layers)]
        self.max_length = max_length

    def update(self, layer: int, k: Tensor, v: Tensor, slots: Tensor) -> tuple[Tensor, Tensor]:
        """Write ``k``, ``v`` ``(B, Hkv, S, D)`` at ``slots (S,)``; return the whole buffers.

        The write is an in-place ``index_put_`` (one kernel per buffer) at slots held in a
        tensor, so a decode step has the same shapes (and addresses) every time.
        """
        self.keys[layer].index_put_((None, None, slots), k)
        self.values[layer].index_put_((None, None, slots), v)
        return self.keys[layer], self.values[layer]

    def write_prompt(self, layer: int, k: Tensor, v: Tensor) -> None:
        """Write a prompt's ``k``, ``v`` ``(B, Hkv, S, D)`` to slots ``0 .. S-1``: a copy into
        the buffers' first ``S`` slots (no index tensor to walk)."""
        s = k.shape[2]
        if s > self.max_length:
            raise ValueError(f"a prompt of {s} tokens does not fit a KV cache of "
                             f"{self.max_length} slots")
        self.keys[layer].narrow(2, 0, s).copy_(k)
        self.values[layer].narrow(2, 0, s).copy_(v)


class Attention(nn.Module):
    """Multi-head attention with grouped key/value heads, RoPE, optional q/k/v bias and
    optional per-head RMSNorm on queries and keys (Qwen3)."""

    def __init__(self, config: Qwen2Config, layer_idx: int, device=None, dtype=None) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_size
        self.window = config.window_of(layer_idx)
        hidden, q_out = config.hidden_size, self.num_heads * self.head_dim
        kv_out = self.num_kv_heads * self.head_dim
        bias, kw = config.attention_bias, {"device": device, "dtype": dtype}
        self.q_proj = nn.Linear(hidden, q_out, bias=bias, **kw)
        self.k_proj = nn.Linear(hidden, kv_out, bias=bias, **kw)
        self.v_proj = nn.Linear(hidden, kv_out, bias=bias, **kw)
        self.o_proj = nn.Linear(q_out, hidden, bias=False, **kw)
        if config.qk_norm:
            self.q_norm = nn.RMSNorm(self.head_dim, eps=config.rms_norm_eps, **kw)
            self.k_norm = nn.RMSNorm(self.head_dim, eps=config.rms_norm_eps, **kw)
        else:
            self.q_norm = self.k_norm = None
        # inference: q/k/v as one matmul (their parameters become views of one buffer)
        self.qkv = FusedLinear([self.q_proj, self.k_proj, self.v_proj], copy=True)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None,
                cache: KVCache | None = None, slots: Tensor | None = None,
                prompt: bool = False) -> Tensor:
        """Attend.

        Args:
            x: ``(B, S, hidden)``.
            cos, sin: RoPE tables ``(B, S, D)``.
            mask: ``(B, 1, S, K)`` bool, None for plain causal attention, or a
                ``CacheSpan`` (a decode step, ``S == 1``, with ``cache``).
            cache: write this step's keys/values there and attend over the cache.
            slots: ``(S,)`` cache slots of the tokens in ``x`` (with ``cache``).
            prompt: the prompt pass (with ``cache``): ``x`` holds slots ``0 .. S-1``, whose
                keys and values are written to the cache and attended as computed.
        """
        b, s, _ = x.shape
        q, k, v = self._project(x)  # (B, S, heads, D)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, S, D)
        q, k = F.apply_rotary_emb(q, k, cos.to(q.dtype), sin.to(q.dtype))  # autocast: bf16 q
        if isinstance(mask, CacheSpan):  # a decode step: writes k, v, reads the valid slots
            i = self.layer_idx
            out = F.attention_decode(q, cache.keys[i], cache.values[i], mask.lens, mask.starts,
                                     key=k, value=v)  # (B, H, 1, D)
        else:
            if cache is not None and prompt:
                cache.write_prompt(self.layer_idx, k, v)
            elif cache is not None:
                k, v = cache.update(self.layer_idx, k, v, slots)  # (B, Hkv, L, D)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                 is_causal=mask is None,
                                                 enable_gqa=True)  # (B, H, S, D)
        out = out.transpose(1, 2).reshape(b, s, self.num_heads * self.head_dim)
        return self.o_proj(out)

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q ``(B, S, Hq, D)``, k and v ``(B, S, Hkv, D)``: in inference views of one matmul's
        output, otherwise three projections."""
        b, s, _ = x.shape
        heads = (self.num_heads, self.num_kv_heads, self.num_kv_heads)
        if not (self.training or genesis.is_grad_enabled()):
            qkv = self.qkv.output(x)  # (B, S, (Hq + 2 * Hkv) * D)
            return qkv.view(b, s, sum(heads), self.head_dim).split(heads, dim=2)
        return tuple(proj(x).view(b, s, n, self.head_dim)
                     for proj, n in zip((self.q_proj, self.k_proj, self.v_proj), heads))
