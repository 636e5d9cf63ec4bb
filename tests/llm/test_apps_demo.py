"""examples/qwen_arithmetic.py end to end at a reduced size, then genesis-chat on its model.

The full demo (2-digit operands, 500 steps) reaches its >= 90% exact match in minutes; here
only the pipeline is checked (data, tokenizer, model, SFT, batched generate, scoring, chat),
on a size that trains in seconds and so proves nothing about accuracy.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "qwen_arithmetic.py"


def load_example():
    spec = importlib.util.spec_from_file_location("genesis_example_qwen_arithmetic", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_working_spells_out_the_column_sums():
    demo = load_example()
    assert demo.working(47, 85, 2) == "47+85: 7+5=12, 4+8+1=13, so 132"
    assert demo.working(5, 3, 2) == "05+03: 5+3=8, 0+0+0=0, so 8"
    assert demo.working(999, 1, 3) == "999+001: 9+1=10, 9+0+1=10, 9+0+1=10, so 1000"
    train, test = demo.make_dataset(2, 200, None, seed=0)
    assert len(train) == 9800 and len(test) == 200 and not set(train) & set(test)


def test_demo_runs_end_to_end_and_chat_answers(tmp_path, capsys):
    demo = load_example()
    out = tmp_path / "demo"
    result = demo.main(["--out", str(out), "--digits", "1", "--test-size", "10",
                        "--hidden", "32", "--layers", "2", "--steps", "12", "--batch-size", "4",
                        "--seq-len", "64", "--device", "cpu", "--threads", "1",
                        "--no-progress"])
    printed = capsys.readouterr().out
    assert "held-out exact match:" in printed and "loss curve:" in printed
    assert printed.rstrip().endswith(f"Chat with it: {demo.chat_command(out / 'model')}")
    assert 0.0 <= result["exact_match"] <= result["answer_accuracy"] <= 1.0
    record = result["record"]
    assert record["finished"] and record["steps"] == 12
    losses = record["history"]["train_loss"]
    assert losses[-1] < losses[0]
    assert Path(record["loss_curve"]).stat().st_size > 5_000
    model_dir = Path(record["model_dir"])
    assert json.loads((model_dir / "config.json").read_text())["model_type"] == "qwen3"
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))  # loads with its chat template
    assert tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}],
                                   tokenize=False, add_generation_prompt=True).endswith(
        "<|im_start|>assistant\n")

    from genesis.models.apps.chat import main as chat_main

    assert chat_main([str(model_dir), "--prompt", "What is 2 + 3?", "--greedy",
                      "--max-new-tokens", "16", "--device", "cpu", "--threads", "1"]) == 0
    assert capsys.readouterr().out.strip() != ""
