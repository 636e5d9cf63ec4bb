"""genesis-sft on a tiny Qwen3: exact resume, accumulation, --overwrite, log, CLI, --pretrain."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")

from tiny_sft import WORDS, make_base, sft_config

import genesis
from genesis.models import AutoModelForCausalLM
from genesis.models.apps.checkpoint import list_checkpoints
from genesis.models.apps.sft import train
from genesis.models.apps.sft_cli import main as sft_main


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """(model dir, data file): a tiny random Qwen3 with a ChatML tokenizer, 48 conversations."""
    return make_base(tmp_path_factory.mktemp("sft"))


def weights(model_dir) -> dict:
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=genesis.float32)
    return {k: v.numpy() for k, v in model.state_dict().items()}


def test_resumed_run_repeats_the_uninterrupted_one(base, tmp_path):
    full = train(sft_config(base, tmp_path / "full", save_every=2))
    assert full["finished"] and len(full["history"]["train_loss"]) == 6
    assert full["history"]["train_loss"][-1] < full["history"]["train_loss"][0]

    first = train(sft_config(base, tmp_path / "cut", save_every=2, stop_after=3))
    assert not first["finished"] and first["steps"] == 3 and first["model_dir"] is None
    assert [s for s, _ in list_checkpoints(tmp_path / "cut")] == [2, 3]
    second = train(sft_config(base, tmp_path / "cut", save_every=2, resume=True))
    assert second["finished"] and second["steps"] == 6
    # the same losses, bit for bit: same weights, moments, schedule, rows and RNG
    assert second["history"] == full["history"]
    a, b = weights(tmp_path / "full"), weights(tmp_path / "cut")
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_resume_refuses_changed_settings(base, tmp_path):
    train(sft_config(base, tmp_path, stop_after=2))
    with pytest.raises(ValueError, match=r"lr: checkpoint 0.003, now 0.001"):
        train(sft_config(base, tmp_path, resume=True, lr=1e-3))


def test_accumulation_matches_one_big_batch(base, tmp_path):
    big = train(sft_config(base, tmp_path / "big", batch_size=8, grad_accum=1, max_steps=3))
    acc = train(sft_config(base, tmp_path / "acc", batch_size=2, grad_accum=4, max_steps=3))
    # the same rows per step, summed in another order: float32 rounding only
    np.testing.assert_allclose(acc["history"]["train_loss"], big["history"]["train_loss"],
                               rtol=1e-5)


def test_out_is_not_overwritten_without_the_flag(base, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="--overwrite"):
        train(sft_config(base, out))
    model_dir, data = base
    argv = ["--model", str(model_dir), "--data", str(data), "--out", str(out), "--max-steps",
            "2", "--batch-size", "4", "--seq-len", "64", "--no-progress", "--device", "cpu"]
    assert sft_main(argv) == 2
    assert "not empty (notes.txt)" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    # --resume with nothing to resume from is refused too
    assert sft_main(argv + ["--resume"]) == 2
    assert "no checkpoints" in capsys.readouterr().err

    assert sft_main(argv + ["--overwrite", "--save-every", "1"]) == 0
    printed = capsys.readouterr().out
    assert "loss curve:" in printed and "genesis-chat" in printed
    log = json.loads((out / "log.json").read_text())
    assert log["steps"] == 2 and len(log["history"]["train_loss"]) == 2
    assert log["data"]["conversations"] == 48 and log["data"]["trained_tokens"] > 0
    assert (out / "loss.png").stat().st_size > 5_000
    assert (out / "notes.txt").read_text() == "mine"  # --overwrite replaces only our files
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    # a fresh --overwrite run drops the old checkpoints instead of mixing runs
    assert sft_main(argv + ["--overwrite", "--max-steps", "1"]) == 0
    assert list_checkpoints(out) == []


def test_bad_data_is_reported_by_the_cli(base, tmp_path, capsys):
    model_dir, _ = base
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": []}\n')
    argv = ["--model", str(model_dir), "--data", str(bad), "--out", str(tmp_path / "o"),
            "--no-progress"]
    assert sft_main(argv) == 2
    assert "line 1" in capsys.readouterr().err


def test_pretrain_on_text_files(base, tmp_path):
    texts = []
    for i in range(3):
        p = tmp_path / f"doc{i}.txt"
        p.write_text(" ".join(WORDS[i:] + WORDS[:i]) * 8)
        texts.append(str(p))
    record = train(sft_config(base, tmp_path / "pt", data=texts, pretrain=True, seq_len=32,
                          batch_size=2, max_steps=3, eval_fraction=0.0))
    assert record["finished"] and record["data"]["trained_tokens"] == record["data"]["tokens"]
    assert all(np.isfinite(record["history"]["train_loss"]))


@pytest.mark.cuda
def test_bf16_autocast_run_on_the_gpu(base, tmp_path):
    record = train(sft_config(base, tmp_path / "gpu", device="cuda", max_steps=8, save_every=4,
                          threads=None))
    assert record["runtime"]["precision"] == "bf16"
    assert record["runtime"]["device"].startswith("cuda")
    losses = record["history"]["train_loss"]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    model = AutoModelForCausalLM.from_pretrained(record["model_dir"], device="cuda")
    assert model.dtype == genesis.float32  # master weights stay float32 under autocast
