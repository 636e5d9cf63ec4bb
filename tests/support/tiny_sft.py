"""A tiny genesis-sft setup for the app tests: chats, a ChatML tokenizer, a random Qwen3.

``make_base(root)`` writes 48 "repeat these words" conversations and a model directory
(config, weights, tokenizer) under ``root``; ``sft_config(base, out, **overrides)`` is a fast
CPU ``SFTConfig`` for them. ``save_chat_model`` writes such a model directory for any texts
and sizes (the chat and fault tests make their own).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import genesis
from genesis.models import Qwen3Config, QwenForCausalLM
from genesis.models.apps.chat_data import write_chat_jsonl
from genesis.models.apps.sft import SFTConfig
from genesis.models.apps.tokenizer_training import train_chat_tokenizer

WORDS = ["red", "green", "blue", "cat", "dog", "sun", "moon", "tree"]


def conversations(n: int) -> list[list[dict]]:
    """``n`` chats: the user asks to repeat three words, the assistant repeats them."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        w = [WORDS[i] for i in rng.integers(0, len(WORDS), size=3)]
        out.append([{"role": "user", "content": "repeat " + " ".join(w)},
                    {"role": "assistant", "content": " ".join(w)}])
    return out


def save_chat_model(path: Path, texts: list[str], vocab_size: int = 280, **config) -> None:
    """Save a random Qwen3 (seed 0) and a ChatML tokenizer trained on ``texts`` to ``path``.

    ``config``: the ``Qwen3Config`` fields besides the vocabulary and the eos/pad ids (which
    come from the tokenizer). Example: ``save_chat_model(d, ["hi"], hidden_size=16, ...)``.
    """
    tok = train_chat_tokenizer(texts, vocab_size=vocab_size)
    config = Qwen3Config(vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, **config)
    genesis.manual_seed(0)
    QwenForCausalLM(config).save_pretrained(str(path))
    tok.save_pretrained(str(path))


def make_base(root: Path) -> tuple[Path, Path]:
    """``(model dir, data file)``: a tiny random Qwen3 with a ChatML tokenizer, 48 chats."""
    convs = conversations(48)
    data = root / "train.jsonl"
    write_chat_jsonl(data, convs)
    model_dir = root / "base"
    save_chat_model(model_dir, [m["content"] for c in convs for m in c] + ["user assistant"],
                    hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                    max_position_embeddings=128, tie_word_embeddings=True,
                    attention_bias=False)
    return model_dir, data


def sft_config(base: tuple[Path, Path], out: Path, **overrides) -> SFTConfig:
    """A 6-step CPU run on ``base`` (batches of 4 rows of <= 64 tokens), with overrides."""
    model_dir, data = base
    settings = dict(model=str(model_dir), data=[str(data)], out=str(out), seq_len=64,
                    batch_size=4, max_steps=6, lr=3e-3, warmup_steps=2, eval_fraction=0.1,
                    progress=False, plot=False, device="cpu", threads=1)
    settings.update(overrides)
    return SFTConfig(**settings)
