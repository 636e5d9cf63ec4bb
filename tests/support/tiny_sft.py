"""A tiny genesis-sft setup for the app tests: chats, a ChatML tokenizer, a random Qwen3.

``make_base(root)`` writes 48 "repeat these words" conversations and a model directory
(config, weights, tokenizer) under ``root``; ``sft_config(base, out, **overrides)`` is a fast
CPU ``SFTConfig`` for them. ``save_chat_model`` writes such a model directory for any texts
and sizes (the chat and fault tests make their own). ``assert_resume_repeats`` compares a
resumed run's log with the uninterrupted run's, bit for bit, and says why they differ.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

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


def history_difference(got: dict, want: dict, names: tuple[str, str]
                       ) -> tuple[str, int | None] | None:
    """Where two runs' logs first differ: ``(description, step)`` for the earliest step at
    which some value differs (key, both values, relative difference; step None when a
    list's length differs), or None when they are equal value for value (NaN equal to NaN).
    """
    found = []  # (step, key, index)
    for key in sorted(set(got) | set(want)):
        a, b = list(got.get(key, [])), list(want.get(key, []))
        same = [x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x)
                           and math.isnan(y)) for x, y in zip(a, b)]
        if all(same) and len(a) != len(b):
            return (f"history[{key!r}] has {len(a)} values in {names[0]}, {len(b)} in "
                    f"{names[1]}: {a} vs {b}"), None
        if not all(same):
            i = same.index(False)
            steps = want.get("eval_step" if key.startswith("eval_") else "step", [])
            found.append((steps[i] if i < len(steps) else math.inf, key, i))
    if not found:
        return None
    step, key, i = min(found)
    x, y = got[key][i], want[key][i]
    rel = (f", relative difference {abs(x - y) / abs(y):.1e}"
           if isinstance(x, float) and isinstance(y, float) and y else "")
    others = ", ".join(k for _, k, _ in sorted(found)[1:])
    step = None if step == math.inf else step
    return (f"history[{key!r}] first differs at step {step} (index {i}): {names[0]} {x!r}, "
            f"{names[1]} {y!r}{rel}" + (f"; {others} differ too" if others else "")
            + f" (all of {names[0]}: {got[key]}; of {names[1]}: {want[key]})"), step


# On a device whose training is not bit-for-bit deterministic (float atomics: the embedding
# gradient's index_add on CUDA), a resumed run may differ from the uninterrupted one by as
# much as two uninterrupted runs differ from each other. It must stay within this many times
# that spread: a real resume fault (optimizer state, learning-rate step, data order, RNG)
# moves the losses by 1e-3 and more, the atomics' rounding by about 1e-5 (relative).
NONDETERMINISM_SPREAD_FACTOR = 20


def largest_relative_difference(got: dict, want: dict) -> float:
    """The largest ``|x - y| / |y|`` over the float values two runs' logs share."""
    worst = 0.0
    for key in set(got) & set(want):
        for x, y in zip(got[key], want[key]):
            if isinstance(x, float) and isinstance(y, float) and x != y:
                worst = max(worst, abs(x - y) / abs(y) if y else math.inf)
    return worst


def assert_resume_repeats(resumed: dict, full: dict, cut: int,
                          rerun: Callable[[], dict]) -> None:
    """Check that a run stopped after step ``cut`` and resumed logged exactly what the
    uninterrupted run did; on a difference, fail saying where, and whether the fault is the
    resume's or the device's. Where two uninterrupted runs differ as well (the device is not
    deterministic), the resumed run must stay within ``NONDETERMINISM_SPREAD_FACTOR`` times
    their largest relative difference.

    Args:
        resumed, full: the ``history`` of the resumed and of the uninterrupted run.
        cut: the step the first session stopped after (its checkpoint's).
        rerun: runs the uninterrupted run again and returns its history (called only on a
            difference, to measure the device's run-to-run spread).

    Example:
        >>> assert_resume_repeats(resumed["history"], full["history"], 2,
        ...                       lambda: train(cfg_again)["history"])
    """
    found = history_difference(resumed, full, ("the resumed run", "the uninterrupted run"))
    if found is None:
        return
    diff, step = found
    note = (f" Step {step} <= {cut} was computed before the checkpoint (the resumed run's "
            "log of it is the first session's): the runs differ without any resume."
            if step is not None and step <= cut else "")
    second = rerun()
    again = history_difference(second, full, ("a second uninterrupted run", "the first"))
    if again is None:
        verdict = (" Two uninterrupted runs agree exactly, so the resume is at fault: the "
                   f"state restored from step {cut}'s checkpoint differs from the run's at "
                   "that step.")
    else:
        spread = largest_relative_difference(second, full)
        off = largest_relative_difference(resumed, full)
        if again[1] is not None and step is not None and off <= \
                NONDETERMINISM_SPREAD_FACTOR * spread:
            return  # (same lengths; within the device's own run-to-run spread)
        verdict = (f" Two uninterrupted runs differ as well ({again[0]}): this device's "
                   f"training is not bit-for-bit deterministic, and the resumed run is "
                   f"further off ({off:.1e} relative) than {NONDETERMINISM_SPREAD_FACTOR} "
                   f"times their spread ({spread:.1e}).")
    pytest.fail(f"the run resumed from step {cut}'s checkpoint does not repeat the "
                f"uninterrupted run: {diff}.{note}{verdict}", pytrace=False)
