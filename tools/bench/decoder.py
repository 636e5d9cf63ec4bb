"""The benchmarks' decoder: one Qwen-style model written once against a torch-like ``lib``
(``import genesis as lib`` or ``import torch as lib``), its shapes, weights and FLOP count.

Token embedding, ``layers`` blocks of pre-RMSNorm grouped-query attention with rotary
embeddings (``F.scaled_dot_product_attention(..., is_causal=True, enable_gqa=True)``) and a
SwiGLU MLP, a final RMSNorm and an LM head (tied to the embedding or not), written the plain
torch way: separate q/k/v ``Linear``s, RoPE composed with ``cat``, ``F.silu(gate) * up``.
``tools/bench/train.py`` trains it under both frameworks; the host-path, memory and
distributed benchmarks build it too.

FLOPs per token (``flops_per_token``): 6 x (matmul parameters, the LM head included, the
embedding lookup not) + 6 x layers x q-heads x head-dim x seq (causal attention: half of the
12 x ... of a full score matrix, forward and backward).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


# ------------------------------------------------------------------------ configuration
@dataclass(frozen=True)
class ModelConfig:
    """Shape of the decoder."""

    vocab: int
    dim: int
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    ffn: int  # SwiGLU hidden size
    tied: bool = False  # LM head shares the embedding matrix
    qkv_bias: bool = False  # Qwen2/2.5 put a bias on the q/k/v projections
    rope_theta: float = 10000.0
    eps: float = 1e-6


MODELS = {
    "0.2b": ModelConfig(vocab=32000, dim=1024, layers=12, q_heads=16, kv_heads=4,
                        head_dim=64, ffn=2816),
    "qwen2.5-0.5b": ModelConfig(vocab=151936, dim=896, layers=24, q_heads=14, kv_heads=2,
                                head_dim=64, ffn=4864, tied=True, qkv_bias=True,
                                rope_theta=1000000.0),
    "tiny": ModelConfig(vocab=256, dim=64, layers=2, q_heads=4, kv_heads=2, head_dim=16,
                        ffn=160, tied=True, qkv_bias=True),
}

# Dense (no sparsity) bf16 tensor-core peaks, FLOP/s (SXM parts).
PEAK_BF16 = {"h100": 989e12, "h200": 989e12}


# ------------------------------------------------------------------------ the model
def build_model(lib, cfg: ModelConfig, seq: int):
    """The decoder as a ``lib.nn.Module`` (``lib`` is ``torch`` or ``genesis``)."""
    nn, F = lib.nn, lib.nn.functional

    def rope_tables():
        inv = 1.0 / cfg.rope_theta ** (np.arange(0, cfg.head_dim, 2) / cfg.head_dim)
        ang = np.outer(np.arange(seq), inv)  # (S, D/2)
        ang = np.concatenate([ang, ang], axis=1)  # (S, D)
        return (lib.from_numpy(np.cos(ang).astype(np.float32)),
                lib.from_numpy(np.sin(ang).astype(np.float32)))

    def rotate(x, cos, sin):
        half = x.shape[-1] // 2
        rot = lib.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos.to(x.dtype) + rot * sin.to(x.dtype)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            hd = cfg.head_dim
            self.q_proj = nn.Linear(cfg.dim, cfg.q_heads * hd, bias=cfg.qkv_bias)
            self.k_proj = nn.Linear(cfg.dim, cfg.kv_heads * hd, bias=cfg.qkv_bias)
            self.v_proj = nn.Linear(cfg.dim, cfg.kv_heads * hd, bias=cfg.qkv_bias)
            self.o_proj = nn.Linear(cfg.q_heads * hd, cfg.dim, bias=False)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            hd = cfg.head_dim
            q = self.q_proj(x).view(b, s, cfg.q_heads, hd).transpose(1, 2)  # (B, Hq, S, D)
            k = self.k_proj(x).view(b, s, cfg.kv_heads, hd).transpose(1, 2)  # (B, Hk, S, D)
            v = self.v_proj(x).view(b, s, cfg.kv_heads, hd).transpose(1, 2)  # (B, Hk, S, D)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return self.o_proj(y.transpose(1, 2).reshape(b, s, cfg.q_heads * hd))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(cfg.dim, cfg.ffn, bias=False)
            self.up_proj = nn.Linear(cfg.dim, cfg.ffn, bias=False)
            self.down_proj = nn.Linear(cfg.ffn, cfg.dim, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = nn.RMSNorm(cfg.dim, eps=cfg.eps)
            self.self_attn = Attention()
            self.post_attention_layernorm = nn.RMSNorm(cfg.dim, eps=cfg.eps)
            self.mlp = MLP()

        def forward(self, x, cos, sin):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
            return x + self.mlp(self.post_attention_layernorm(x))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(cfg.vocab, cfg.dim)
            self.layers = nn.ModuleList([Block() for _ in range(cfg.layers)])
            self.norm = nn.RMSNorm(cfg.dim, eps=cfg.eps)
            if not cfg.tied:
                self.lm_head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
            cos, sin = rope_tables()
            self.register_buffer("cos", cos, persistent=False)  # (S, D)
            self.register_buffer("sin", sin, persistent=False)  # (S, D)

        def forward(self, tokens, targets):
            s = tokens.shape[1]
            cos, sin = self.cos[:s], self.sin[:s]
            x = self.embed_tokens(tokens)  # (B, S, dim)
            for layer in self.layers:
                x = layer(x, cos, sin)
            x = self.norm(x)
            head = self.embed_tokens.weight if cfg.tied else self.lm_head.weight
            logits = F.linear(x, head)  # (B, S, vocab)
            return F.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1))

    return Decoder()


def init_weights(cfg: ModelConfig, seq: int, seed: int) -> dict:
    """float32 numpy weights for every parameter of the decoder: N(0, 0.02) matrices and
    embeddings, ones for the norms, zeros for biases."""
    import torch

    shapes = {k: tuple(v.shape) for k, v in build_model(torch, cfg, 1).state_dict().items()}
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        if name.endswith("norm.weight"):
            out[name] = np.ones(shape, np.float32)
        elif name.endswith(".bias"):
            out[name] = np.zeros(shape, np.float32)
        else:
            out[name] = (rng.standard_normal(shape, dtype=np.float32) * 0.02)
    return out


def matmul_params(cfg: ModelConfig) -> int:
    """Parameters that take part in a matmul per token (all but embedding lookup and norms)."""
    hd = cfg.head_dim
    attn = cfg.dim * hd * (2 * cfg.q_heads + 2 * cfg.kv_heads)
    mlp = 3 * cfg.dim * cfg.ffn
    return cfg.layers * (attn + mlp) + cfg.dim * cfg.vocab


def flops_per_token(cfg: ModelConfig, seq: int) -> float:
    """Training FLOPs per token (forward + backward); see the module docstring."""
    return 6.0 * matmul_params(cfg) + 6.0 * cfg.layers * cfg.q_heads * cfg.head_dim * seq
