"""genesis-chat: one --prompt answer, streamed text, history and /reset, bad model folders."""

from __future__ import annotations

import io
import json

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from tiny_sft import save_chat_model

import genesis
from genesis.models.apps.chat import ChatSession, TextPrinter, stop_token_ids
from genesis.models.apps.chat import main as chat_main
from genesis.models.apps.model_dir import load_model, load_tokenizer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny random Qwen3 (untied: a tied one echoes its last token, a newline)."""
    genesis.set_num_threads(1)  # tiny kernels: more threads only wait on a busy machine
    path = tmp_path_factory.mktemp("chat") / "model"
    save_chat_model(path, ["hello there, how are you? fine thanks", "user assistant"],
                    hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                    max_position_embeddings=96, tie_word_embeddings=False,
                    attention_bias=False)
    return path


def greedy_reply(model_dir, messages, max_new_tokens):
    tok = load_tokenizer(model_dir)
    model = load_model(model_dir, genesis.device("cpu"), dtype=genesis.float32)
    ids = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tok(ids, add_special_tokens=False)["input_ids"]
    out = model.generate(genesis.tensor([ids]), max_new_tokens=max_new_tokens,
                         eos_token_id=tok.eos_token_id)
    return tok.decode(out[0, len(ids):].tolist(), skip_special_tokens=True).strip()


def test_prompt_prints_the_greedy_reply(model_dir, capsys):
    argv = [str(model_dir), "--prompt", "hello there", "--greedy", "--max-new-tokens", "12",
            "--device", "cpu", "--system", "be brief"]
    assert chat_main(argv) == 0
    streamed = capsys.readouterr().out.strip()
    expected = greedy_reply(model_dir, [{"role": "system", "content": "be brief"},
                                        {"role": "user", "content": "hello there"}], 12)
    assert streamed == expected and expected
    assert chat_main(argv + ["--no-stream"]) == 0
    assert capsys.readouterr().out.strip() == expected


def test_seeded_sampling_repeats(model_dir, capsys):
    argv = [str(model_dir), "--prompt", "how are you", "--max-new-tokens", "10", "--seed", "3",
            "--temperature", "1.5", "--device", "cpu"]
    assert chat_main(argv) == 0
    first = capsys.readouterr().out
    assert chat_main(argv) == 0
    assert capsys.readouterr().out == first


def test_history_reset_and_context_trimming(model_dir):
    tok = load_tokenizer(model_dir)
    model = load_model(model_dir, genesis.device("cpu"), dtype=genesis.float32)
    session = ChatSession(model, tok, stop_token_ids(model_dir, tok), system="sys",
                          context=96, max_new_tokens=8, do_sample=False)
    first = session.ask("hello")
    assert [m["role"] for m in session.messages] == ["system", "user", "assistant"]
    assert session.messages[-1]["content"] == first
    for _ in range(6):  # the context (96 tokens) fills up: the oldest exchanges go
        session.ask("how are you? fine thanks, and you? hello there")
    assert session.messages[0] == {"role": "system", "content": "sys"}
    assert len(session.messages) < 1 + 2 * 7
    session.reset()
    assert session.messages == [{"role": "system", "content": "sys"}]


def test_text_printer_streams_the_decoded_reply(model_dir):
    tok = load_tokenizer(model_dir)
    sink = io.StringIO()
    printer = TextPrinter(tok, file=sink)
    ids = tok("hello there, how are you?", add_special_tokens=False)["input_ids"]
    printer.put(genesis.tensor([[1, 2, 3]]))  # the prompt: not printed
    for t in ids:
        printer.put(genesis.tensor([t]))
    printer.end()
    assert sink.getvalue() == "hello there, how are you?\n"


def test_interactive_loop(model_dir, monkeypatch, capsys):
    lines = iter(["hello", "/reset", "how are you", "/exit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    assert chat_main([str(model_dir), "--greedy", "--max-new-tokens", "4",
                      "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.count("model> ") == 2 and "(conversation reset)" in out


@pytest.mark.parametrize("damage, message", [
    ("missing", "does not exist"),
    ("no_config", "has no config.json"),
    ("bad_config", "config.json is not valid JSON"),
    ("no_weights", "has no weights"),
    ("no_tokenizer", "has no tokenizer"),
    ("no_template", "has no chat template"),
])
def test_bad_model_dir_is_a_clear_error(model_dir, tmp_path, capsys, damage, message):
    import shutil

    broken = tmp_path / "m"
    if damage != "missing":
        shutil.copytree(model_dir, broken)
    if damage == "no_config":
        (broken / "config.json").unlink()
    elif damage == "bad_config":
        (broken / "config.json").write_text("{ nope")
    elif damage == "no_weights":
        (broken / "model.safetensors").unlink()
    elif damage == "no_tokenizer":
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (broken / name).unlink()
    elif damage == "no_template":
        (broken / "chat_template.jinja").unlink(missing_ok=True)
        cfg = json.loads((broken / "tokenizer_config.json").read_text())
        cfg.pop("chat_template", None)
        (broken / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert chat_main([str(broken), "--prompt", "hi", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("genesis-chat: error:") and message in err
