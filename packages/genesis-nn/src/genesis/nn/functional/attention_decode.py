"""``attention_decode``: the attention of a decoding step, over a preallocated KV cache.

One op over the fused op ``ATTENTION_DECODE`` of ``genesis.nn.fused_declarations`` (a
split-K flash-decoding kernel on CUDA; its masked matmul-softmax-matmul composite elsewhere). Unlike
``scaled_dot_product_attention`` with a mask, it reads only each row's valid slots and
takes their bounds as device tensors, so a decode step keeps one shape (and a CUDA graph
can capture it) while the cache fills. Inference only: it has no gradient. The op is the
autograd ``Function`` ``AttentionDecode`` (registry name ``attention_decode``), so it goes
through the dispatcher like every op: ``genesis.compile`` records it (its writes into the
caches included) and a replay runs it again.
"""

from __future__ import annotations

import math

from genesis import Tensor
from genesis import dtypes as D
from genesis.autograd.function import Function
from genesis.autograd.grad_mode import is_grad_enabled
from genesis.nn.fused_declarations import ATTENTION_DECODE
from genesis.ops.common import check_same_device, wrap

__all__ = ["attention_decode"]


def _check(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_lens: Tensor,
           key_starts: Tensor | None) -> None:
    if q.ndim != 4 or k_cache.ndim != 4 or tuple(k_cache.shape) != tuple(v_cache.shape):
        raise RuntimeError(f"attention_decode: expected query (B, Hq, n_q, D) and key/value "
                           f"caches of one shape (B, Hk, S_max, D), got query "
                           f"{list(q.shape)}, key_cache {list(k_cache.shape)}, value_cache "
                           f"{list(v_cache.shape)}")
    b, hq, n_q, d = q.shape
    if k_cache.shape[0] != b or k_cache.shape[3] != d or hq % k_cache.shape[1]:
        raise RuntimeError(f"attention_decode: query {list(q.shape)} needs caches (B={b}, Hk, "
                           f"S_max, D={d}) with Hk dividing {hq}, got {list(k_cache.shape)}")
    if not 1 <= n_q <= k_cache.shape[2]:
        raise RuntimeError(f"attention_decode: {n_q} new tokens do not fit a cache of "
                           f"{k_cache.shape[2]} slots")
    if (not q.dtype.is_floating_point or k_cache.dtype is not q.dtype
            or v_cache.dtype is not q.dtype):
        raise RuntimeError(f"attention_decode: expected query and caches of one floating "
                           f"dtype, got {q.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    for name, t in (("cache_lens", cache_lens), ("key_starts", key_starts)):
        if t is not None and (tuple(t.shape) != (b,) or t.dtype not in (D.int32, D.int64)):
            raise RuntimeError(f"attention_decode: {name} must be an int32/int64 tensor of "
                               f"size [{b}], got {t.dtype} of size {list(t.shape)}")
    check_same_device("attention_decode", q, k_cache, v_cache, cache_lens,
                      *(() if key_starts is None else (key_starts,)))
    if is_grad_enabled() and any(t.requires_grad for t in (q, k_cache, v_cache)):
        raise RuntimeError("attention_decode has no gradient (it serves inference): call it "
                           "under genesis.no_grad(), or use scaled_dot_product_attention")


class AttentionDecode(Function):
    """The fused op as a dispatched op (no backward: ``attention_decode`` refuses inputs
    that need a gradient). ``key``/``value``, when given, are written into the caches."""

    differentiable = False

    @staticmethod
    def forward(ctx, query, key_cache, value_cache, cache_lens, key_starts, key, value,
                scale):
        out = ATTENTION_DECODE.forward(
            query._backend, query._data, key_cache._data, value_cache._data, cache_lens._data,
            None if key_starts is None else key_starts._data,
            None if key is None else key._data, None if value is None else value._data, scale)
        if key is not None:  # written in place
            key_cache._version_box[0] += 1
            value_cache._version_box[0] += 1
        return wrap(out, query.device)


def attention_decode(query: Tensor, key_cache: Tensor, value_cache: Tensor, cache_lens: Tensor,
                     key_starts: Tensor | None = None, scale: float | None = None,
                     key: Tensor | None = None, value: Tensor | None = None) -> Tensor:
    """Attention of each sequence's newest tokens over its KV cache.

    Row ``b``'s keys and values are the cache slots ``[key_starts[b], cache_lens[b])``; its
    ``n_q`` new tokens are the last ``n_q`` of them, and new token ``i`` attends causally, to
    the slots up to ``cache_lens[b] - n_q + i``. The new tokens' keys and values are either
    in the cache already or given as ``key``/``value``, which are then written there first
    (in place, as ``flash_attn_with_kvcache`` does). Grouped query heads share their
    key/value head (query head ``h`` uses ``h // (Hq // Hk)``).

    Args:
        query: ``(B, Hq, n_q, D)``, the new tokens' queries.
        key_cache: ``(B, Hk, S_max, D)``.
        value_cache: ``(B, Hk, S_max, D)``.
        cache_lens: ``(B,)`` int32/int64, each row's filled length (its end slot).
        key_starts: ``(B,)`` int32/int64, each row's first valid slot (left padding, a
            sliding window); None: slot 0.
        scale: score scale; default ``1 / sqrt(D)``.
        key, value: ``(B, Hk, n_q, D)``, the new tokens' keys and values to write into the
            caches at their slots (both or neither).

    Returns:
        ``(B, Hq, n_q, D)`` in the query's dtype; zeros for a query with no slot to see.

    Example::

        >>> # lens = slot + 1 per row; k, v (B, Hk, 1, D) go to the caches at the slot
        >>> out = F.attention_decode(q, cache_k, cache_v, lens, key=k, value=v)
    """
    _check(query, key_cache, value_cache, cache_lens, key_starts)
    if key is not None or value is not None:
        _check_new(query, key_cache, key, value)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    return AttentionDecode.apply(query, key_cache, value_cache, cache_lens, key_starts, key,
                                 value, scale)


def _check_new(q: Tensor, k_cache: Tensor, key: Tensor | None, value: Tensor | None) -> None:
    b, hk, n_q, d = q.shape[0], k_cache.shape[1], q.shape[2], q.shape[3]
    for name, t in (("key", key), ("value", value)):
        if t is None or tuple(t.shape) != (b, hk, n_q, d) or t.dtype is not q.dtype:
            raise RuntimeError(f"attention_decode: key and value must both be given, of size "
                               f"{[b, hk, n_q, d]} and dtype {q.dtype}; got {name} "
                               f"{None if t is None else (list(t.shape), t.dtype)}")
    check_same_device("attention_decode", q, key, value)
