"""``tools/bench/train_lockstep.py``: trees (and torch) trained one step each in turn, in
processes of their own, and their steps compared round by round (CPU, tiny model)."""

from __future__ import annotations

import json

import pytest
from tool_script import ROOT, load_tool


def _lockstep():
    return load_tool("tools/bench/train_lockstep.py", "bench_train_lockstep")


def test_two_copies_of_one_tree_and_torch_in_lockstep(tmp_path, capsys):
    out = tmp_path / "lockstep.json"
    doc = _lockstep().main(["--trees", f"A={ROOT},B={ROOT}", "--torch", "--device", "cpu",
                            "--model", "tiny", "--batch", "2", "--seq", "32", "--steps", "3",
                            "--warmup", "1", "--out", str(out)])
    assert json.loads(out.read_text())["processes"].keys() == {"A", "B", "torch"}
    procs = doc["processes"]
    for label in ("A", "B", "torch"):
        p = procs[label]
        assert len(p["walls_ms"]) == 3 and len(p["losses"]) == 4  # 1 warm-up + 3 timed
        assert all(0 < h <= w for h, w in zip(p["hosts_ms"], p["walls_ms"]))
    assert procs["torch"]["framework"] == "torch" and procs["A"]["framework"] == "genesis"
    # one tree twice: the same computation, so the same losses to the bit
    assert procs["B"]["losses"] == procs["A"]["losses"]
    assert procs["B"]["max_loss_diff_to_first"] == 0
    # torch from the same weights and data: bf16 autocast rounding apart (~2e-4, train.py's test)
    assert procs["torch"]["max_loss_diff_to_first"] < 1e-2
    ratio = doc["ratios_to_first"]["B_step"]
    assert ratio["per_round"] == [b / a for b, a in zip(procs["B"]["walls_ms"],
                                                        procs["A"]["walls_ms"])]
    assert ratio["q1"] <= ratio["median"] <= ratio["q3"]
    assert "B / A, step time in the same round" in capsys.readouterr().out


def test_bad_tree_arguments_are_named(tmp_path):
    lockstep = _lockstep()
    with pytest.raises(SystemExit, match="LABEL=PATH"):
        lockstep.main(["--trees", "A", "--device", "cpu", "--model", "tiny"])
    with pytest.raises(SystemExit, match=r"tree A=.*has no packages/\*/src"):
        lockstep.main(["--trees", f"A={tmp_path}", "--device", "cpu", "--model", "tiny"])


def test_quartiles():
    assert _lockstep().quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 3.0, 4.0)
    assert _lockstep().quartiles([7.0]) == (7.0, 7.0, 7.0)
