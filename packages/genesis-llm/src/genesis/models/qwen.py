"""The Qwen decoder (Qwen2/2.5, Qwen3 and their mixture-of-experts variants), top to bottom.

    tokens -> embed -> [ x + attn(norm(x)); x + mlp(norm(x)) ] * n_layers -> norm -> lm_head

One code path serves all four families; the config decides q/k/v bias, q/k RMSNorm,
sliding-window layers, and dense versus mixture-of-experts MLPs. Parameter names are those
of the Hugging Face checkpoints, so ``state_dict`` keys are the safetensors keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import genesis
import genesis.nn as nn
import genesis.nn.functional as F
from genesis import Tensor
from genesis.models.attention import Attention, CacheSpan, KVCache, attention_mask
from genesis.models.checkpoint import CheckpointMixin
from genesis.models.config import Qwen2Config
from genesis.models.generation import GenerationMixin
from genesis.models.loss import causal_lm_loss
from genesis.models.moe import MLP, SparseMoeBlock, load_balancing_loss
from genesis.models.rope import RotaryEmbedding

__all__ = ["QwenForCausalLM", "QwenModel", "CausalLMOutput"]


class DecoderLayer(nn.Module):
    """Pre-norm attention block and MLP block, each with a residual connection.

    The MLP's output is handed on un-added (``pending``): the next layer's input norm, or
    the model's final norm, adds it to the residual stream in the same fused pass
    (``F.add_rms_norm``), as this layer's ``post_attention_layernorm`` does for the attention
    output. The sums are the same as ``x + attn`` and ``x + mlp``; the fused pass saves a
    kernel launch and a read of the stream per block.
    """

    def __init__(self, config: Qwen2Config, layer_idx: int, device=None, dtype=None) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = Attention(config, layer_idx, **kw)
        self.sparse = hasattr(config, "is_sparse") and config.is_sparse(layer_idx)
        self.mlp = (SparseMoeBlock(config, **kw) if self.sparse
                    else MLP(config.hidden_size, config.intermediate_size, **kw))
        self.input_layernorm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps, **kw)
        self.post_attention_layernorm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps,
                                                   **kw)

    def forward(self, x: Tensor, pending: Tensor | None, cos: Tensor, sin: Tensor,
                mask: Tensor | None, cache: KVCache | None, slots: Tensor | None,
                prompt: bool) -> tuple[Tensor, Tensor, Tensor | None]:
        """``(x, mlp_out, router_logits)``: the residual stream without, and the MLP output
        to add to it (``pending`` is the previous layer's, None for the first layer)."""
        x, h = _add_norm(pending, x, self.input_layernorm)
        attn = self.self_attn(h, cos, sin, mask, cache, slots, prompt)
        # under autocast the residual stream stays in its own dtype, as ``x + attn`` would
        # promote it
        x, h = _add_norm(attn.to(x.dtype), x, self.post_attention_layernorm)
        if self.sparse:
            h, router_logits = self.mlp(h)
            return x, h.to(x.dtype), router_logits
        return x, self.mlp(h).to(x.dtype), None


def _add_norm(update: Tensor | None, x: Tensor, norm: nn.RMSNorm) -> tuple[Tensor, Tensor]:
    """``x = x + update; (x, norm(x))``, in one fused pass (just the norm without update)."""
    if update is None:
        return x, norm(x)
    return F.add_rms_norm(update, x, norm.normalized_shape, norm.weight, norm.eps)


class QwenModel(nn.Module):
    """Embeddings, decoder layers and the final norm: hidden states, no head."""

    def __init__(self, config: Qwen2Config, device=None, dtype=None) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, **kw)
        self.layers = nn.ModuleList(DecoderLayer(config, i, **kw)
                                    for i in range(config.num_hidden_layers))
        self.norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps, **kw)
        self.rotary_emb = RotaryEmbedding(config.head_size, config.rope_theta,
                                          config.rope_scaling, config.max_position_embeddings,
                                          device=device)

    def masks(self, query_slots: Tensor, key_valid: Tensor | None) -> dict:
        """The attention mask of every window size in use (``None``: full attention).

        Args:
            query_slots: ``(S,)`` slots of the query tokens.
            key_valid: ``(B, K)`` bool over the key slots, False at padding; None: no
                padding and no cache (keys are the queries), where full attention needs no
                mask at all (plain causal).
        """
        out = {}
        for window in {layer.self_attn.window for layer in self.layers}:
            if window is None and key_valid is None:
                out[window] = None
            else:
                valid = key_valid if key_valid is not None else genesis.ones(
                    (1, query_slots.shape[0]), dtype=genesis.bool, device=query_slots.device)
                out[window] = attention_mask(query_slots, valid, window)
        return out

    def spans(self, cache_position: Tensor, key_starts: Tensor) -> dict:
        """A decode step's keys for every window size in use, as ``CacheSpan``s (the
        alternative to ``masks`` when each row's valid keys are one range of slots).

        Args:
            cache_position: ``(1,)`` int64, the slot of the new tokens.
            key_starts: ``(B,)`` int64, each row's first real slot (its left padding).
        """
        lens = (cache_position + 1).expand(key_starts.shape[0]).contiguous()  # (B,)
        out = {}
        for window in {layer.self_attn.window for layer in self.layers}:
            starts = key_starts if window is None else genesis.maximum(key_starts,
                                                                       lens - window)
            out[window] = CacheSpan(starts, lens)
        return out

    def forward(self, input_ids: Tensor, position_ids: Tensor, masks: dict,
                cache: KVCache | None = None, slots: Tensor | None = None,
                prompt: bool = False) -> tuple[Tensor, list[Tensor]]:
        """Final hidden states ``(B, S, hidden)`` and the router logits of sparse layers."""
        x = self.embed_tokens(input_ids)  # (B, S, hidden)
        cos, sin = self.rotary_emb(position_ids, x.dtype)  # (B, S, D)
        router_logits, pending = [], None
        for layer in self.layers:
            x, pending, logits = layer(x, pending, cos, sin, masks[layer.self_attn.window],
                                       cache, slots, prompt)
            if logits is not None:
                router_logits.append(logits)
        return _add_norm(pending, x, self.norm)[1], router_logits


@dataclass
class CausalLMOutput:
    """What ``QwenForCausalLM.forward`` returns.

    ``logits`` ``(B, S, vocab)`` are computed from ``last_hidden_state`` on first access, so a
    training step that reads only ``loss`` never materialises them outside the loss.
    """

    last_hidden_state: Tensor  # (B, S, hidden), after the final norm
    lm_head: nn.Linear
    loss: Tensor | None = None
    aux_loss: Tensor | None = None
    router_logits: list[Tensor] | None = None
    _logits: Tensor | None = None

    @property
    def logits(self) -> Tensor:
        if self._logits is None:
            self._logits = self.lm_head(self.last_hidden_state)
        return self._logits


class QwenForCausalLM(CheckpointMixin, GenerationMixin, nn.Module):
    """A Qwen language model: ``QwenModel`` plus the vocabulary head.

    Args:
        config: a ``Qwen2Config`` / ``Qwen3Config`` / ``Qwen2MoeConfig`` / ``Qwen3MoeConfig``.
        device: where to make the parameters.
        dtype: the parameters' dtype.

    Example::

        >>> cfg = Qwen3Config(vocab_size=100, hidden_size=32, intermediate_size=64,
        ...                   num_hidden_layers=2, num_attention_heads=4,
        ...                   num_key_value_heads=2, head_dim=8)
        >>> model = QwenForCausalLM(cfg)
        >>> model(genesis.tensor([[1, 2, 3]])).logits.shape
        genesis.Size([1, 3, 100])
    """

    def __init__(self, config: Qwen2Config, device=None, dtype=None) -> None:
        super().__init__()
        self.config = config
        self.model = QwenModel(config, device=device, dtype=dtype)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False,
                                 device=device, dtype=dtype)
        self.init_weights()
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def init_weights(self) -> None:
        """transformers' initialisation: weights ~ N(0, initializer_range), biases 0,
        norm scales 1."""
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, 0.0, std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.RMSNorm):
                nn.init.ones_(module.weight)

    @property
    def device(self):
        return self.lm_head.weight.device

    @property
    def dtype(self):
        return self.lm_head.weight.dtype

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                labels: Tensor | None = None, position_ids: Tensor | None = None,
                output_router_logits: bool | None = None) -> CausalLMOutput:
        """Logits for every position and, with ``labels``, the causal LM loss.

        Args:
            input_ids: ``(B, S)`` int64 token ids.
            attention_mask: ``(B, S)``, 1 for tokens and 0 for padding (left or right).
            labels: ``(B, S)`` int64; position ``t`` predicts ``labels[:, t + 1]``; -100 is
                ignored.
            position_ids: ``(B, S)``; default ``0 .. S-1`` in every row, as transformers.
            output_router_logits: MoE only: return the router logits and add
                ``router_aux_loss_coef`` times the load-balancing loss to ``loss``
                (default: the config's ``output_router_logits``).

        Returns:
            ``CausalLMOutput`` with ``logits (B, S, vocab)``, ``loss`` (with labels),
            ``aux_loss`` and ``router_logits`` (MoE, when asked for).
        """
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must be (batch, seq), got shape {list(input_ids.shape)}")
        b, s = input_ids.shape
        slots = genesis.arange(s, device=input_ids.device)
        if position_ids is None:
            position_ids = slots.unsqueeze(0).expand(b, s)
        key_valid = None if attention_mask is None else attention_mask.to(genesis.bool)
        hidden, router_logits = self.model(input_ids, position_ids,
                                           self.model.masks(slots, key_valid))
        out = CausalLMOutput(last_hidden_state=hidden, lm_head=self.lm_head)
        if labels is not None:
            out.loss = causal_lm_loss(hidden, self.lm_head.weight, labels)
        if output_router_logits is None:
            output_router_logits = getattr(self.config, "output_router_logits", False)
        if output_router_logits and router_logits:
            out.router_logits = router_logits
            out.aux_loss = load_balancing_loss(router_logits, self.config.num_experts,
                                               self.config.num_experts_per_tok, attention_mask)
            if out.loss is not None:
                out.loss = out.loss + self.config.router_aux_loss_coef * out.aux_loss
        return out

    def logits_for_last(self, hidden: Tensor) -> Tensor:
        """``(B, vocab)`` logits of the last position of ``hidden (B, S, hidden)``."""
        return F.linear(hidden[:, -1], self.lm_head.weight)
