"""examples/digits.py: a short run, then a resumed run; checkpoint and plot are written."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits.py"


def load_example():
    spec = importlib.util.spec_from_file_location("genesis_example_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_resume_and_plot(tmp_path, capsys):
    digits = load_example()
    base = ["--out", str(tmp_path), "--no-progress", "--device", "cpu"]
    common = base + ["--epochs", "2"]
    acc1 = digits.main(base + ["--epochs", "1"])
    out = capsys.readouterr().out
    assert "test accuracy:" in out
    ckpt = tmp_path / "checkpoint.safetensors"
    assert ckpt.exists() and (tmp_path / "digits.png").exists()
    assert acc1 > 0.5  # one epoch already learns most digits

    import genesis

    state = genesis.load(str(ckpt))
    assert int(state["epoch"]) == 1 and len(state["history"]["test_acc"]) == 1

    (tmp_path / "digits.png").unlink()
    acc2 = digits.main(common + ["--resume"])
    out = capsys.readouterr().out
    assert "resumed from" in out and "at epoch 1" in out
    state = genesis.load(str(ckpt))
    assert int(state["epoch"]) == 2 and len(state["history"]["test_acc"]) == 2
    assert (tmp_path / "digits.png").stat().st_size > 10_000
    assert acc2 >= acc1 - 0.05

    # resuming a finished run trains nothing and reports the same accuracy
    acc3 = digits.main(common + ["--resume", "--no-plot"])
    assert acc3 == pytest.approx(acc2)
