"""``tools/bench/train.py`` runs end to end on the CPU at the tiny size (both frameworks)."""

from __future__ import annotations

import json

from tool_script import load_tool


def _load_train():
    return load_tool("tools/bench/train.py", "bench_train")


def test_train_bench_tiny_cpu(tmp_path, capsys):
    train = _load_train()
    out = tmp_path / "train.json"
    doc = train.main(["--device", "cpu", "--model", "tiny", "--batch", "2", "--seq", "32",
                      "--steps", "2", "--warmup", "1", "--out", str(out)])
    assert json.loads(out.read_text())["results"].keys() == {"torch", "genesis"}
    g, t = doc["results"]["genesis"], doc["results"]["torch"]
    for r in (g, t):
        assert len(r["losses"]) == 3 and r["tok_per_s"] > 0 and r["step_ms"] > 0
        assert r["mfu"] is None and r["launches"] is None  # GPU-only figures
        # the host part of a step (until its call returns) is within the synchronised step;
        # per kernel launch it is n/a without a launch count
        assert 0 < r["host_ms"] <= r["step_ms"] and r["host_us_per_launch"] is None
    # Same weights and data: the losses differ only by bf16 autocast rounding (measured
    # ~2e-4 on the tiny model); the first one starts near ln(vocab) = 5.55.
    assert abs(t["losses"][0] - 5.55) < 0.1
    assert doc["ratios"]["max_loss_diff"] < 1e-2
    assert t["losses"][-1] < t["losses"][0]  # it trains
    printed = capsys.readouterr().out
    assert "genesis / torch" in printed and "- µs per kernel launch" in printed


def test_host_time_per_launch():
    train = _load_train()
    assert train.host_us_per_launch(12.0, 1500) == 8.0  # 12 ms of host time, 1500 launches
    assert train.host_us_per_launch(12.0, None) is None  # no launches counted (the CPU)


def test_train_bench_compiled_genesis_cpu(tmp_path):
    train = _load_train()
    doc = train.main(["--device", "cpu", "--model", "tiny", "--batch", "2", "--seq", "16",
                      "--steps", "2", "--warmup", "1", "--frameworks", "genesis", "--compile"])
    g = doc["results"]["genesis"]
    assert doc["compile"] and g["compiled"] and g["first_step_s"] > 0
    eager = train.main(["--device", "cpu", "--model", "tiny", "--batch", "2", "--seq", "16",
                        "--steps", "2", "--warmup", "1", "--frameworks", "genesis"])
    assert g["losses"] == eager["results"]["genesis"]["losses"]  # the compiled step is exact
    keep_all = train.main(["--device", "cpu", "--model", "tiny", "--batch", "2", "--seq", "16",
                           "--steps", "2", "--warmup", "1", "--frameworks", "genesis",
                           "--compile", "--no-recompute"])["results"]["genesis"]
    assert keep_all["losses"] == g["losses"]  # recomputing in the backward changes no number
    assert "(0 ops recomputed)" in keep_all["saved_for_backward"][0]
    assert "(0 ops recomputed)" not in g["saved_for_backward"][0]
