"""Faults against genesis-sft and genesis-chat: bad flags, bad files, foreign checkpoints.

Every bad input ends the app with status 2 and one line naming the flag or the file (and
line) and what is wrong, before anything is written or deleted: a mistyped ``--data`` under
``--overwrite`` loses nothing.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from tiny_sft import save_chat_model

import genesis
from genesis.models.apps.chat import ChatSession, PromptTooLongError
from genesis.models.apps.chat import build_parser as chat_parser
from genesis.models.apps.chat import main as chat_main
from genesis.models.apps.chat_data import write_chat_jsonl
from genesis.models.apps.checkpoint import checkpoint_path, list_checkpoints
from genesis.models.apps.model_dir import load_model, load_tokenizer
from genesis.models.apps.sft_cli import build_parser as sft_parser
from genesis.models.apps.sft_cli import main as sft_main
from genesis.models.apps.training_log import write_json_log
from genesis.models.safetensors_io import save_tensors

CONTEXT = 48


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """(model dir, chat data file): a tiny Qwen3 with a ChatML tokenizer and 8 conversations."""
    genesis.set_num_threads(1)
    root = tmp_path_factory.mktemp("faults")
    convs = [[{"role": "user", "content": f"say {w}"}, {"role": "assistant", "content": w}]
             for w in ("red", "green", "blue", "cat", "dog", "sun", "moon", "tree")]
    data = root / "train.jsonl"
    write_chat_jsonl(data, convs)
    model_dir = root / "model"
    save_chat_model(model_dir, [m["content"] for c in convs for m in c] + ["user assistant"],
                    hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                    num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                    max_position_embeddings=CONTEXT)
    return model_dir, data


def sft_argv(base, out, *extra) -> list[str]:
    model_dir, data = base
    return ["--model", str(model_dir), "--data", str(data), "--out", str(out), "--seq-len",
            "32", "--batch-size", "2", "--max-steps", "1", "--eval-fraction", "0",
            "--no-progress", "--no-plot", "--device", "cpu", *extra]


# ------------------------------------------------------------ --overwrite loses nothing
@pytest.fixture
def previous_run(tmp_path):
    """An --out folder holding a previous run's checkpoint and final model files."""
    out = tmp_path / "run"
    path = checkpoint_path(out, 4)
    path.parent.mkdir(parents=True)
    genesis.save({"step": 4}, path)
    (out / "log.json").write_text("{}")
    return out


@pytest.mark.parametrize("bad", ["data", "model", "data content"])
def test_overwrite_with_a_bad_input_deletes_nothing(base, previous_run, tmp_path, bad, capsys):
    argv = sft_argv(base, previous_run, "--overwrite")
    if bad == "data":
        argv[argv.index("--data") + 1] = str(tmp_path / "trian.jsonl")  # a typo
    elif bad == "model":
        argv[argv.index("--model") + 1] = str(tmp_path / "no_model")
    else:
        (tmp_path / "bad.jsonl").write_text('{"messages": "oops"}\n')
        argv[argv.index("--data") + 1] = str(tmp_path / "bad.jsonl")
    assert sft_main(argv) == 2
    err = capsys.readouterr().err
    assert {"data": "trian.jsonl", "model": "no_model", "data content": "line 1"}[bad] in err
    assert [s for s, _ in list_checkpoints(previous_run)] == [4]
    assert (previous_run / "log.json").read_text() == "{}"


def test_overwrite_with_good_inputs_replaces_the_old_checkpoints(base, previous_run):
    assert sft_main(sft_argv(base, previous_run, "--overwrite")) == 0
    assert list_checkpoints(previous_run) == []
    assert json.loads((previous_run / "log.json").read_text())["steps"] == 1


# ------------------------------------------------------------------ bad settings
BAD_FLAGS = [("--lr", "nan"), ("--lr", "inf"), ("--lr", "-0.001"), ("--batch-size", "0"),
             ("--grad-accum", "0"), ("--seq-len", "1"), ("--epochs", "0"),
             ("--epochs", "nan"), ("--max-steps", "0"), ("--max-grad-norm", "-1"),
             ("--weight-decay", "inf"), ("--min-lr-ratio", "2"), ("--eval-fraction", "1"),
             ("--warmup-steps", "-1"), ("--keep-checkpoints", "0"), ("--seed", "-1"),
             ("--threads", "0"), ("--stop-after", "0"), ("--save-every", "-2")]


@pytest.mark.parametrize("flag,value", BAD_FLAGS, ids=[f"{f} {v}" for f, v in BAD_FLAGS])
def test_a_bad_setting_is_refused_naming_the_flag(base, tmp_path, flag, value, capsys):
    out = tmp_path / "out"
    assert sft_main(sft_argv(base, out, flag, value)) == 2
    err = capsys.readouterr().err
    assert f"{flag} must be" in err and value.lstrip("-") in err, err
    assert not out.exists()


def test_resume_and_overwrite_together_are_refused(base, tmp_path, capsys):
    assert sft_main(sft_argv(base, tmp_path / "o", "--resume", "--overwrite")) == 2
    assert "--resume and --overwrite exclude each other" in capsys.readouterr().err


# ------------------------------------------------------------- foreign checkpoints
FOREIGN = {
    "another genesis.save file": lambda p: genesis.save({"weights": genesis.ones(2)}, p),
    "a plain safetensors file": lambda p: save_tensors({"w": genesis.ones(2)}, p),
    "a run of another model": lambda p: genesis.save(
        {"step": 1, "model": {"w": genesis.ones(3)}, "optimizer": {}, "scheduler": {},
         "rng": genesis.get_rng_state(), "history": {}, "settings": {}}, p),
}


@pytest.mark.parametrize("write", FOREIGN.values(), ids=FOREIGN.keys())
def test_resuming_from_a_foreign_checkpoint_names_it(base, tmp_path, write, capsys):
    path = checkpoint_path(tmp_path / "run", 1)
    path.parent.mkdir(parents=True)
    write(path)
    assert sft_main(sft_argv(base, tmp_path / "run", "--resume")) == 2
    err = capsys.readouterr().err
    assert str(path) in err and ("not a genesis-sft checkpoint" in err
                                 or "does not fit this run's model" in err), err


# ----------------------------------------------------------------- bad data files
def test_app_files_interrupted_mid_write_keep_their_old_version(tmp_path):
    """The run log and a chat data file written by the apps: a writer that fails after
    writing part of the new text (here a value JSON cannot encode, near the end) leaves the
    old file whole, and no temporary behind."""
    log, data = tmp_path / "log.json", tmp_path / "train.jsonl"
    write_json_log(log, {"step": [1]})
    write_chat_jsonl(data, [[{"role": "user", "content": "hi"}]])
    before = {p: p.read_bytes() for p in (log, data)}
    with pytest.raises(TypeError):
        write_json_log(log, {"step": list(range(5000)), "bad": object()})
    with pytest.raises(TypeError):
        write_chat_jsonl(data, [[{"role": "user", "content": "x" * 5000}]] * 3
                         + [[{"role": "user", "content": object()}]])
    assert {p: p.read_bytes() for p in (log, data)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.json", "train.jsonl"]


def test_a_non_utf8_chat_file_names_the_file_and_line(base, tmp_path, capsys):
    bad = tmp_path / "latin1.jsonl"
    good_line = json.dumps({"messages": [{"role": "user", "content": "hi"},
                                         {"role": "assistant", "content": "yo"}]})
    bad.write_bytes(good_line.encode() + b"\n" + good_line.replace("yo", "caf\xe9").encode(
        "latin-1") + b"\n")
    argv = sft_argv(base, tmp_path / "o")
    argv[argv.index("--data") + 1] = str(bad)
    assert sft_main(argv) == 2
    err = capsys.readouterr().err
    assert "latin1.jsonl" in err and "line 2: not UTF-8 text (byte 0xe9" in err, err


def test_a_non_utf8_pretraining_file_names_the_file(base, tmp_path, capsys):
    bad = tmp_path / "doc.txt"
    bad.write_bytes(b"plain words then \xff\xfe")
    argv = sft_argv(base, tmp_path / "o", "--pretrain")
    argv[argv.index("--data") + 1] = str(bad)
    assert sft_main(argv) == 2
    err = capsys.readouterr().err
    assert "doc.txt: not UTF-8 text (byte 0xff at offset 17)" in err, err


@pytest.mark.parametrize("app", ["sft", "chat"])
def test_a_model_path_that_is_a_file_says_so(base, app, tmp_path, capsys):
    model_file = base[0] / "config.json"
    code = sft_main(sft_argv((model_file, base[1]), tmp_path / "o")) if app == "sft" else \
        chat_main([str(model_file), "--prompt", "hi", "--device", "cpu"])
    assert code == 2
    err = capsys.readouterr().err
    assert "is a file" in err and "does not exist" not in err, err


def test_a_config_that_is_a_list_is_named(base, tmp_path, capsys):
    model_dir = tmp_path / "copy"
    model_dir.mkdir()
    for f in base[0].iterdir():
        (model_dir / f.name).write_bytes(f.read_bytes())
    (model_dir / "config.json").write_text("[1, 2]")
    assert chat_main([str(model_dir), "--prompt", "hi", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "config.json must hold a JSON object" in err, err


# ------------------------------------------------------------------ genesis-chat
@pytest.fixture(scope="module")
def session(base):
    model_dir = base[0]
    model = load_model(model_dir, genesis.device("cpu"), dtype=genesis.float32)
    tok = load_tokenizer(model_dir, need_chat_template=True)
    return ChatSession(model, tok, [tok.eos_token_id], context=CONTEXT, max_new_tokens=20,
                       do_sample=False)


def test_a_prompt_longer_than_the_context_is_refused(base, session, capsys):
    session.reset()
    with pytest.raises(PromptTooLongError, match=rf"context is {CONTEXT}"):
        session.ask("red green blue " * 30)
    assert session.messages == []  # the refused message is not kept
    argv = [str(base[0]), "--prompt", "red " * 60, "--greedy", "--device", "cpu"]
    assert chat_main(argv) == 2
    assert f"but the model's context is {CONTEXT}" in capsys.readouterr().err


def test_a_prompt_near_the_context_caps_the_reply_with_a_warning(session, capsys, monkeypatch):
    session.reset()
    text = "red " * 6
    prompt = session.tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=True, add_generation_prompt=True)
    prompt = prompt["input_ids"] if hasattr(prompt, "keys") else prompt
    assert len(prompt) + 20 > CONTEXT > len(prompt)  # the reply would run past the context
    asked, real = [], session.model.generate
    monkeypatch.setattr(session.model, "generate",
                        lambda ids, **kw: asked.append(kw["max_new_tokens"]) or real(ids, **kw))
    session.ask(text)
    assert asked == [CONTEXT - len(prompt)]
    err = capsys.readouterr().err
    assert f"the reply is limited to {CONTEXT - len(prompt)} tokens" in err, err


@pytest.mark.parametrize("flag,value", [("--max-new-tokens", "0"), ("--temperature", "nan"),
                                        ("--temperature", "-1"), ("--top-k", "-5"),
                                        ("--top-p", "1.5"), ("--top-p", "0"),
                                        ("--repetition-penalty", "inf"), ("--threads", "0")])
def test_a_bad_chat_flag_is_refused_naming_it(base, flag, value, capsys):
    assert chat_main([str(base[0]), "--prompt", "hi", "--device", "cpu", flag, value]) == 2
    err = capsys.readouterr().err
    assert f"{flag} must be" in err and value.lstrip("-") in err, err


def test_help_texts_show_defaults_and_how_to_quit():
    sft_help = sft_parser().format_help()
    assert "(default: 8)" in sft_help and "(default: 2e-05)" in sft_help
    assert "--resume" in sft_help and "(default: False)" not in sft_help
    chat_help = chat_parser().format_help()
    assert "/exit" in chat_help and "Ctrl-D" in chat_help and "(default: 256)" in chat_help
