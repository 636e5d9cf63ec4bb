"""Tiny random Qwen checkpoints made with transformers, for genesis.models tests.

``FAMILIES`` maps a name to transformers' config and model classes and the keyword
arguments of a tiny config; ``make_checkpoint`` builds the model (seeded), saves it with
``save_pretrained`` and returns the torch model. Importing ``one_cpu_thread`` into a test
module makes the module run single-threaded.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers as hf

import genesis


@pytest.fixture(autouse=True, scope="module")
def one_cpu_thread():
    """Run a test module with one intra-op thread (genesis' CPU kernels and transformers are
    both torch). These models are tiny: on a busy machine a second thread only spins, and
    made a 32-token generation 40x slower (16 s against 0.4 s)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


_BASE = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
             eos_token_id=None, pad_token_id=None, bos_token_id=None)
_MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)

FAMILIES = {
    "qwen2": (hf.Qwen2Config, hf.Qwen2ForCausalLM, dict(_BASE)),
    "qwen2_tied_sliding": (hf.Qwen2Config, hf.Qwen2ForCausalLM,
                           dict(_BASE, tie_word_embeddings=True, use_sliding_window=True,
                                sliding_window=4, max_window_layers=1)),
    "qwen3": (hf.Qwen3Config, hf.Qwen3ForCausalLM, dict(_BASE, head_dim=16)),
    "qwen2_moe": (hf.Qwen2MoeConfig, hf.Qwen2MoeForCausalLM,
                  dict(_BASE, **_MOE, shared_expert_intermediate_size=24,
                       output_router_logits=True)),
    "qwen3_moe": (hf.Qwen3MoeConfig, hf.Qwen3MoeForCausalLM,
                  dict(_BASE, **_MOE, head_dim=8, norm_topk_prob=True,
                       output_router_logits=True, mlp_only_layers=[0])),
}


def make_checkpoint(family: str, path, seed: int = 0, **overrides):
    """Save a tiny random ``family`` model to ``path``; returns the (eval) torch model."""
    config_cls, model_cls, kwargs = FAMILIES[family]
    torch.manual_seed(seed)
    model = model_cls(config_cls(**{**kwargs, **overrides})).eval()
    with torch.no_grad():  # router weights start at zero in transformers: make routing real
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.5)
    model.save_pretrained(path)
    return model


def to_genesis(t: torch.Tensor) -> genesis.Tensor:
    return genesis.tensor(t.numpy())


def to_numpy(t: genesis.Tensor) -> np.ndarray:
    return t.detach().numpy()


def left_padded_batch(vocab: int, lengths: list[int], seed: int = 0):
    """``(input_ids, attention_mask)`` torch int64 tensors, each row left-padded to the
    longest length (padding tokens are random ids, masked out)."""
    g = torch.Generator().manual_seed(seed)
    s = max(lengths)
    ids = torch.randint(0, vocab, (len(lengths), s), generator=g)
    mask = torch.zeros(len(lengths), s, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, s - n:] = 1
    return ids, mask
