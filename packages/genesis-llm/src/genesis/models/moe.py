"""The SwiGLU MLP and the mixture-of-experts block (Qwen2-MoE, Qwen3-MoE).

Routing: ``softmax(router(x))`` over the experts, keep each token's top ``k`` (optionally
renormalised to sum to 1). Each expert then runs once, on the tokens routed to it: the
``(token, choice)`` pairs are sorted by expert, so every expert's tokens are one contiguous
slice, and one host sync (the per-expert counts) sizes the slices. The weighted outputs are
summed back into their tokens with one ``index_add``. Qwen2-MoE adds a shared expert scaled
by ``sigmoid(shared_expert_gate(x))``.

Without gradients, short queries (a decode step: at most ``_DECODE_QUERY_LEN`` positions per
row) take a path of fixed shapes with no host read, so a CUDA graph can capture it, that reads
only the routed experts' weights: every expert's gate/up and down weights are views of two
stacked buffers ``(E, 2 * I, H)`` and ``(E, H, I)`` (``share_weights``, the idea of
``fused_weights.FusedLinear.share``: the parameters keep their identity and names, their data
becomes slabs of one buffer), so the ``T * k`` picked slabs are gathered with one
``index_select`` each and run as batched matmuls, weighted and summed per token.
"""

from __future__ import annotations

import genesis
import genesis.nn as nn
import genesis.nn.functional as F
from genesis import Tensor
from genesis.models.config import Qwen2Config
from genesis.models.fused_weights import FusedLinear, views_of

__all__ = ["MLP", "SparseMoeBlock", "load_balancing_loss"]

# Without gradients, queries of at most this many positions per row route at fixed shapes.
_DECODE_QUERY_LEN = 16


class MLP(nn.Module):
    """``down(silu(gate(x)) * up(x))``.

    In inference (not training, no gradient) gate and up run as one matmul and the SwiGLU
    is folded into the down projection (``F.swiglu_linear``): two launches on a decode
    step instead of three."""

    def __init__(self, hidden_size: int, intermediate_size: int, device=None,
                 dtype=None) -> None:
        super().__init__()
        kw = {"bias": False, "device": device, "dtype": dtype}
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, **kw)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, **kw)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, **kw)
        # inference: gate and up as one matmul (their parameters become views of one buffer)
        self.gate_up = FusedLinear([self.gate_proj, self.up_proj], copy=False)

    def forward(self, x: Tensor) -> Tensor:
        if not (self.training or genesis.is_grad_enabled()):
            gate_up = self.gate_up.output(x)  # (*, 2 * intermediate): gate | up, or None
            if gate_up is not None:
                return F.swiglu_linear(gate_up, self.down_proj.weight, self.down_proj.bias)
        return self.down_proj(F.swiglu(self.gate_proj(x), self.up_proj(x)))


class SparseMoeBlock(nn.Module):
    """Top-k routed experts (plus a gated shared expert where the config has one).

    Shape:
        forward: ``(B, S, hidden)`` -> ``(B, S, hidden)`` and router logits ``(B*S, E)``.
    """

    def __init__(self, config: Qwen2Config, device=None, dtype=None) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        hidden = config.hidden_size
        self.num_experts, self.top_k = config.num_experts, config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        self.gate = nn.Linear(hidden, self.num_experts, bias=False, **kw)
        self.experts = nn.ModuleList(MLP(hidden, config.moe_intermediate_size, **kw)
                                     for _ in range(self.num_experts))
        shared = getattr(config, "shared_expert_intermediate_size", 0)
        if shared:
            self.shared_expert = MLP(hidden, shared, **kw)
            self.shared_expert_gate = nn.Linear(hidden, 1, bias=False, **kw)
        else:
            self.shared_expert = self.shared_expert_gate = None
        self.stacked = None  # (gate_up (E, 2I, H), down (E, H, I)): the experts' weights view
        self.share_weights()

    def share_weights(self) -> None:
        """Make every expert's gate/up/down weights slabs of two stacked buffers, with their
        current values (the parameters keep their identity: their data is swapped): expert
        ``e``'s gate and up are rows ``[:I]`` and ``[I:]`` of ``gate_up[e]`` (which its own
        fused gate/up also reads), its down is ``down[e]``. Done when built;
        ``QwenForCausalLM.to()`` does it again after moving them (``share_all``)."""
        with genesis.no_grad():
            gate_up = genesis.stack([genesis.cat([m.gate_proj.weight, m.up_proj.weight])
                                     for m in self.experts])  # (E, 2I, H)
            down = genesis.stack([m.down_proj.weight for m in self.experts])  # (E, H, I)
            inter = self.experts[0].gate_proj.out_features
            for e, m in enumerate(self.experts):
                m.gate_proj.weight.data = gate_up[e, :inter]
                m.up_proj.weight.data = gate_up[e, inter:]
                m.down_proj.weight.data = down[e]
                m.gate_up.adopt(gate_up[e])
        self.stacked = (gate_up, down)

    def _stacked_weights(self) -> tuple[Tensor, Tensor]:
        """The stacked buffers, shared again first if any expert's weight no longer views
        them (its data set by hand)."""
        gate_up, down = self.stacked
        for e, m in enumerate(self.experts):
            if not (views_of(gate_up[e], [m.gate_proj.weight, m.up_proj.weight])
                    and views_of(down[e], [m.down_proj.weight])):
                self.share_weights()
                return self.stacked
        return self.stacked

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        b, s, hidden = x.shape
        flat = x.reshape(b * s, hidden)  # (T, H)
        router_logits = self.gate(flat)  # (T, E)
        probs = router_logits.softmax(-1, dtype=genesis.float32)
        weights, chosen = probs.topk(self.top_k, dim=-1)  # (T, k)
        if self.norm_topk_prob:
            weights = weights / weights.sum(-1, keepdim=True)
        weights = weights.to(x.dtype)

        if s <= _DECODE_QUERY_LEN and not genesis.is_grad_enabled():  # no autograd graph
            out = self._routed_slabs(flat, weights, chosen)
        else:
            out = self._grouped_by_expert(flat, weights, chosen)

        if self.shared_expert is not None:
            gate = F.sigmoid(self.shared_expert_gate(flat))  # (T, 1)
            out = out + gate * self.shared_expert(flat)
        return out.reshape(b, s, hidden), router_logits

    def _grouped_by_expert(self, flat: Tensor, weights: Tensor, chosen: Tensor) -> Tensor:
        """``(T, H)`` routed output, each expert run on just its tokens (one host sync)."""
        # Sort the T*k (token, choice) pairs by expert: expert e owns one contiguous run.
        choice = chosen.reshape(-1)  # (T*k,)
        order = choice.argsort(stable=True)  # (T*k,)
        experts = genesis.arange(self.num_experts, device=flat.device)
        counts = (choice.unsqueeze(-1) == experts).sum(0).tolist()  # the one host sync
        token_of = order // self.top_k  # (T*k,) token of each sorted pair
        pair_weight = weights.reshape(-1).index_select(0, order).unsqueeze(-1)  # (T*k, 1)
        outputs, start = [], 0
        for expert, n in zip(self.experts, counts):
            if n:
                tokens = token_of[start:start + n]
                outputs.append(expert(flat.index_select(0, tokens)))  # (n, H)
            start += n
        routed = genesis.cat(outputs) * pair_weight  # (T*k, H), in sorted order
        return genesis.zeros_like(flat).index_add(0, token_of, routed)  # (T, H)

    def _routed_slabs(self, flat: Tensor, weights: Tensor, chosen: Tensor) -> Tensor:
        """``(T, H)`` routed output at fixed shapes, no host read: each of the ``T * k``
        (token, choice) pairs runs its expert's gathered weight slabs as a batched matmul."""
        gate_up, down = self._stacked_weights()
        tokens, hidden = flat.shape
        inter = down.shape[-1]
        choice = chosen.reshape(-1)  # (T*k,), token-major
        x = flat.unsqueeze(1).expand(tokens, self.top_k, hidden)
        x = x.reshape(tokens * self.top_k, 1, hidden)  # (T*k, 1, H)
        h = genesis.matmul(x, gate_up.index_select(0, choice).transpose(-1, -2))  # (T*k, 1, 2I)
        act = F.swiglu(h[..., :inter], h[..., inter:])  # (T*k, 1, I)
        out = genesis.matmul(act, down.index_select(0, choice).transpose(-1, -2))  # (T*k, 1, H)
        out = out.reshape(tokens, self.top_k, hidden) * weights.unsqueeze(-1)
        return out.sum(1)  # (T, H)

def load_balancing_loss(router_logits: list[Tensor], num_experts: int, top_k: int,
                        attention_mask: Tensor | None = None) -> Tensor:
    """Switch-Transformer load-balancing loss over all sparse layers, as transformers':
    ``E * sum_e f_e * P_e`` with ``f_e`` the fraction of top-k picks going to expert ``e``
    and ``P_e`` its mean routing probability (padding tokens left out).

    Args:
        router_logits: one ``(T, E)`` tensor per sparse layer (``T = B * S``).
        num_experts: ``E``.
        top_k: experts per token.
        attention_mask: ``(B, S)``, 0 at padding, or None.

    Returns:
        A scalar float32 tensor.
    """
    device = router_logits[0].device
    picks = genesis.zeros(num_experts, device=device)
    prob_sum = genesis.zeros(num_experts, device=device)
    rows = None
    keep = None if attention_mask is None else attention_mask.reshape(-1, 1).to(genesis.float32)
    for logits in router_logits:
        probs = logits.softmax(-1, dtype=genesis.float32)  # (T, E)
        chosen = probs.topk(top_k, dim=-1).indices  # (T, k)
        hits = F.one_hot(chosen, num_experts).to(genesis.float32).sum(1)  # (T, E)
        if keep is not None:
            hits, probs = hits * keep, probs * keep
        picks = picks + hits.sum(0)
        prob_sum = prob_sum + probs.sum(0)
        n = keep.sum() if keep is not None else float(probs.shape[0])
        rows = n if rows is None else rows + n
    return (picks / rows * (prob_sum / rows)).sum() * num_experts
