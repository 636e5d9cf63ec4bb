"""examples/digits.py: a short run, then a resumed run; checkpoint and plot are written."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits.py"


def load_example():
    spec = importlib.util.spec_from_file_location("genesis_example_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_resume_and_plot(tmp_path, capsys):
    pytest.importorskip("sklearn")  # (the digits ship with scikit-learn)
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


def test_a_failed_plot_keeps_the_previous_one(tmp_path, monkeypatch):
    """The plot is written beside its name and renamed: a save that fails half-way (here a
    disk that fills) leaves the previous PNG and no temporary."""
    import io

    from matplotlib.figure import Figure

    digits = load_example()
    history = {"train_loss": [1.0, 0.5], "test_loss": [1.1, 0.6], "test_acc": [0.8, 0.9]}
    path = tmp_path / "digits.png"
    digits.plot(history, path)
    before = path.read_bytes()
    real = Figure.savefig

    def disk_fills(self, fname, **kw):
        buf = io.BytesIO()
        real(self, buf, **kw)
        with open(fname, "wb") as f:
            f.write(buf.getvalue()[:1000])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", disk_fills)
    with pytest.raises(OSError, match="No space left"):
        digits.plot({k: v + v[-1:] for k, v in history.items()}, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["digits.png"]
