"""genesis-sft's data: chat JSONL errors by line, assistant-only labels, packing, overflow."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from genesis.models.apps.chat_data import ChatDataError, read_chat_jsonl, write_chat_jsonl
from genesis.models.apps.chat_tokens import (
    IGNORE_INDEX,
    Example,
    fit_to_length,
    tokenize_conversation,
)
from genesis.models.apps.packing import pack_examples, pack_token_stream, pad_batch
from genesis.models.apps.sft_data import split_eval, step_rows, steps_per_epoch
from genesis.models.apps.tokenizer_training import train_chat_tokenizer

CONV = [{"role": "system", "content": "Be exact."},
        {"role": "user", "content": "What is 12+345?"},
        {"role": "assistant", "content": "357"},
        {"role": "user", "content": "And 1+1?"},
        {"role": "assistant", "content": "2"}]


@pytest.fixture(scope="module")
def tokenizer():
    texts = [m["content"] for m in CONV] * 5 + ["user assistant system"]
    return train_chat_tokenizer(texts, vocab_size=300)


def test_jsonl_round_trip_and_blank_lines(tmp_path):
    path = tmp_path / "d.jsonl"
    write_chat_jsonl(path, [CONV, CONV[1:3]])
    path.write_text(path.read_text() + "\n\n")
    assert read_chat_jsonl(path) == [CONV, CONV[1:3]]


def test_jsonl_errors_name_every_bad_line(tmp_path):
    lines = [
        json.dumps({"messages": CONV}),                                   # 1 ok
        "{not json",                                                      # 2
        json.dumps({"messages": [{"role": "user", "content": "hi"}]}),    # 3 no assistant
        json.dumps({"msgs": []}),                                         # 4
        "",                                                               # 5 blank: fine
        json.dumps({"messages": [{"role": "bot", "content": "x"}]}),      # 6 bad role
        json.dumps({"messages": [{"role": "assistant", "content": 3}]}),  # 7 content type
        json.dumps([1, 2]),                                               # 8 not an object
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ChatDataError) as info:
        read_chat_jsonl(path)
    assert [n for n, _ in info.value.problems] == [2, 3, 4, 6, 7, 8]
    message = str(info.value)
    assert "6 malformed line(s)" in message and "line 2: invalid JSON" in message
    assert "line 6: messages[0].role is 'bot'" in message
    assert "line 7: messages[0].content is int" in message


def test_empty_file_is_an_error(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    with pytest.raises(ChatDataError, match="no conversations"):
        read_chat_jsonl(path)


def test_labels_cover_exactly_the_assistant_replies(tokenizer):
    ex = tokenize_conversation(tokenizer, CONV)
    assert len(ex.input_ids) == len(ex.labels)
    assert all(lab in (IGNORE_INDEX, tok) for tok, lab in zip(ex.input_ids, ex.labels))
    learned = tokenizer.decode([t for t in ex.labels if t != IGNORE_INDEX])
    assert learned == "357<|im_end|>\n2<|im_end|>\n"
    # the ids are those of the template's text, tokenised whole
    text = tokenizer.apply_chat_template(CONV, tokenize=False)
    assert ex.input_ids == tokenizer(text, add_special_tokens=False)["input_ids"]
    # nothing from the user or system turns is labelled
    masked = tokenizer.decode([t for t, lab in zip(ex.input_ids, ex.labels)
                               if lab == IGNORE_INDEX])
    assert "What is 12+345?" in masked and "Be exact." in masked and "357" not in masked


def test_template_that_rewrites_history_is_refused(tokenizer):
    tok = train_chat_tokenizer(["a b"], vocab_size=270)
    # a template that prints the number of messages first changes every prefix
    tok.chat_template = ("{{ messages|length }}{% for m in messages %}{{ m['content'] }}"
                         "{% endfor %}")
    with pytest.raises(ValueError, match="continuation"):
        tokenize_conversation(tok, CONV)


def test_overflow_truncate_or_skip():
    ex = Example(list(range(10)), [IGNORE_INDEX] * 6 + [6, 7, 8, 9])
    assert fit_to_length(ex, 10, "skip") is ex
    assert fit_to_length(ex, 8, "skip") is None
    cut = fit_to_length(ex, 8, "truncate")
    assert cut.input_ids == list(range(8)) and cut.labels[-2:] == [6, 7]
    assert fit_to_length(ex, 5, "truncate") is None  # no assistant token left
    with pytest.raises(ValueError, match="overflow"):
        fit_to_length(ex, 5, "drop")


def test_packing_keeps_examples_whole_and_fits_rows():
    examples = [Example([i] * n, [i] * n) for i, n in enumerate([5, 3, 4, 2, 1, 7, 2])]
    rows = pack_examples(examples, seq_len=8)
    assert all(len(r.input_ids) <= 8 for r in rows)
    assert sum(len(r.input_ids) for r in rows) == 24
    assert len(rows) == 3  # 24 tokens in rows of 8: best-fit packs them tight
    pieces = sorted(tuple(ex.input_ids) for ex in examples)
    found = []
    for r in rows:  # each row is a concatenation of whole examples
        i = 0
        while i < len(r.input_ids):
            j = i
            while j < len(r.input_ids) and r.input_ids[j] == r.input_ids[i]:
                j += 1
            found.append(tuple(r.input_ids[i:j]))
            i = j
    assert sorted(found) == pieces
    with pytest.raises(ValueError, match="more than seq_len"):
        pack_examples([Example([1] * 9, [1] * 9)], seq_len=8)


def test_pad_batch_masks_padding():
    ids, mask, labels = pad_batch([Example([5, 6, 7], [IGNORE_INDEX, 6, 7]),
                                   Example([8], [8])], pad_id=0)
    assert ids == [[5, 6, 7], [8, 0, 0]]
    assert mask == [[1, 1, 1], [1, 0, 0]]
    assert labels == [[IGNORE_INDEX, 6, 7], [8, IGNORE_INDEX, IGNORE_INDEX]]


def test_pretrain_stream_blocks():
    rows = pack_token_stream([[1, 2, 3], [4, 5]], seq_len=3, eos_id=9)
    assert [r.input_ids for r in rows] == [[1, 2, 3], [9, 4, 5]]  # a 1-token tail is dropped
    assert all(r.labels == r.input_ids for r in rows)
    rows = pack_token_stream([[1, 2, 3, 4]], seq_len=3, eos_id=9)
    assert [r.input_ids for r in rows] == [[1, 2, 3], [4, 9]]


def test_split_and_step_order_are_seeded():
    rows = [Example([i], [i]) for i in range(20)]
    train, held = split_eval(rows, 0.1, seed=3)
    assert len(held) == 2 and len(train) == 18
    assert {r.input_ids[0] for r in train} | {r.input_ids[0] for r in held} == set(range(20))
    assert split_eval(rows, 0.1, seed=3)[1] == held
    with pytest.raises(ValueError, match="no training rows"):
        split_eval(rows[:1], 0.5, seed=0)
    per_epoch = steps_per_epoch(18, 4)
    assert per_epoch == 4
    epoch0 = [i for s in range(per_epoch) for i in step_rows(18, 4, 0, s)]
    assert len(set(epoch0)) == 16  # full steps, no row twice in an epoch
    assert step_rows(18, 4, 0, per_epoch) != step_rows(18, 4, 0, 0)  # a new permutation
    assert step_rows(18, 4, 0, 5) == step_rows(18, 4, 0, 5)
    with pytest.raises(ValueError, match="fewer than one step"):
        steps_per_epoch(3, 4)


def test_build_rows_truncates_or_skips_long_conversations(tokenizer, tmp_path):
    from genesis.models.apps.sft_data import build_chat_rows

    short = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]
    path = tmp_path / "mixed.jsonl"
    write_chat_jsonl(path, [CONV, short, short])
    n_long = len(tokenize_conversation(tokenizer, CONV).input_ids)
    n_short = len(tokenize_conversation(tokenizer, short).input_ids)
    seq_len = n_short + 20
    assert n_long > seq_len
    rows, stats = build_chat_rows(path, tokenizer, seq_len, "skip", pack=False)
    assert (stats.conversations, stats.skipped, stats.truncated, len(rows)) == (3, 1, 0, 2)
    rows, stats = build_chat_rows(path, tokenizer, seq_len, "truncate", pack=True)
    assert (stats.skipped, stats.truncated) == (0, 1)
    assert all(len(r.input_ids) <= seq_len for r in rows)
    assert stats.tokens == 2 * n_short + seq_len
    with pytest.raises(ValueError, match="every conversation was skipped"):
        build_chat_rows(path, tokenizer, 4, "skip")
