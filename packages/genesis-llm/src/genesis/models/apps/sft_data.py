"""The rows a fine-tuning run trains on, their train/eval split, and the batch order.

Everything here is a pure function of the files, the tokenizer and the seed: a resumed run
rebuilds the same rows and the same order, and needs to store only its step count.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from genesis.models.apps.chat_data import read_chat_jsonl
from genesis.models.apps.chat_tokens import (
    IGNORE_INDEX,
    Example,
    fit_to_length,
    tokenize_conversation,
)
from genesis.models.apps.packing import pack_examples, pack_token_stream


@dataclass
class DataStats:
    """What building the rows did, for the log."""

    conversations: int = 0
    truncated: int = 0
    skipped: int = 0
    rows: int = 0
    tokens: int = 0
    trained_tokens: int = 0  # tokens with a label (assistant tokens, or all in pretraining)
    files: list = field(default_factory=list)


def build_chat_rows(path: str | os.PathLike, tokenizer, seq_len: int, overflow: str = "truncate",
                    pack: bool = True) -> tuple[list[Example], DataStats]:
    """Chat JSONL -> rows with assistant-only labels.

    Args:
        path: the chat JSONL file.
        tokenizer: a fast ``transformers`` tokenizer with a chat template.
        seq_len: the longest row (the training context).
        overflow: ``"truncate"`` or ``"skip"`` for longer conversations.
        pack: pack several conversations per row (else one per row).

    Returns:
        ``(rows, stats)``.
    """
    conversations = read_chat_jsonl(path)
    stats = DataStats(conversations=len(conversations), files=[os.fspath(path)])
    examples = []
    for messages in conversations:
        example = tokenize_conversation(tokenizer, messages)
        fitted = fit_to_length(example, seq_len, overflow)
        if fitted is None:
            stats.skipped += 1
            continue
        stats.truncated += fitted is not example
        examples.append(fitted)
    if not examples:
        raise ValueError(f"{os.fspath(path)}: every conversation was skipped (longer than "
                         f"seq_len={seq_len} with overflow={overflow!r}); raise --seq-len or "
                         "use --overflow truncate")
    rows = pack_examples(examples, seq_len) if pack else examples
    return rows, _count(rows, stats)


def build_pretrain_rows(paths: list[str | os.PathLike], tokenizer,
                        seq_len: int) -> tuple[list[Example], DataStats]:
    """Plain text files -> packed causal-LM blocks (each file is one document).

    Args:
        paths: UTF-8 text files.
        tokenizer: a ``transformers`` tokenizer with an eos token.
        seq_len: the block length.

    Returns:
        ``(rows, stats)``.
    """
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("--pretrain needs a tokenizer with an eos_token to separate documents")
    documents = []
    for p in paths:
        with open(p, "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{os.fspath(p)}: not UTF-8 text (byte {raw[exc.start]:#04x} at "
                             f"offset {exc.start}); --pretrain reads UTF-8 text files") from None
        documents.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    rows = pack_token_stream(documents, seq_len, eos)
    if not rows:
        raise ValueError(f"{[os.fspath(p) for p in paths]}: no text to train on")
    return rows, _count(rows, DataStats(files=[os.fspath(p) for p in paths]))


def _count(rows: list[Example], stats: DataStats) -> DataStats:
    stats.rows = len(rows)
    stats.tokens = sum(len(r.input_ids) for r in rows)
    stats.trained_tokens = sum(sum(t != IGNORE_INDEX for t in r.labels) for r in rows)
    return stats


def split_eval(rows: list[Example], eval_fraction: float,
               seed: int) -> tuple[list[Example], list[Example]]:
    """Hold out a seeded random ``eval_fraction`` of the rows (at least one if > 0).

    Args:
        rows: all rows.
        eval_fraction: in ``[0, 1)``.
        seed: the split's seed.

    Returns:
        ``(train_rows, eval_rows)``.
    """
    if not 0 <= eval_fraction < 1:
        raise ValueError(f"eval fraction must be in [0, 1), got {eval_fraction}")
    n_eval = math.ceil(eval_fraction * len(rows)) if eval_fraction > 0 else 0
    if n_eval >= len(rows):
        raise ValueError(f"eval fraction {eval_fraction} leaves no training rows "
                         f"out of {len(rows)}")
    order = np.random.default_rng(seed).permutation(len(rows))
    held = set(order[:n_eval].tolist())
    return ([r for i, r in enumerate(rows) if i not in held],
            [r for i, r in enumerate(rows) if i in held])


def step_rows(n_rows: int, rows_per_step: int, seed: int, step: int) -> list[int]:
    """The row indices optimizer step ``step`` (0-based) trains on.

    Each epoch is a fresh seeded permutation cut into full steps of ``rows_per_step`` rows
    (the remainder sits the epoch out, a different one each epoch), so every rank always
    has rows and any step's rows are known without replaying the ones before it: a resumed
    run picks up exactly where it stopped.

    Args:
        n_rows: the number of training rows.
        rows_per_step: rows per optimizer step over all micro-batches and ranks.
        seed: the run's seed.
        step: the global step.

    Returns:
        The indices, in order.
    """
    per_epoch = steps_per_epoch(n_rows, rows_per_step)
    epoch, within = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(n_rows)
    return order[within * rows_per_step:(within + 1) * rows_per_step].tolist()


def steps_per_epoch(n_rows: int, rows_per_step: int) -> int:
    """Full optimizer steps in one pass over ``n_rows`` rows (at least one is needed)."""
    if n_rows < rows_per_step:
        raise ValueError(f"{n_rows} training rows are fewer than one step uses "
                         f"({rows_per_step} = batch size x grad accumulation x world size); "
                         "lower --batch-size or --grad-accum, or add data")
    return n_rows // rows_per_step
