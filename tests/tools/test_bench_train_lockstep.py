"""``tools/bench/train_lockstep.py``: trees (and torch) trained one step each in turn, in
processes of their own, and their steps compared round by round (CPU, tiny model)."""

from __future__ import annotations

import json

import pytest
from tool_script import ROOT, load_tool


def _lockstep():
    return load_tool("tools/bench/train_lockstep.py", "bench_train_lockstep")


def test_one_tree_as_two_trees_of_two_copies_and_torch(tmp_path, capsys):
    out = tmp_path / "lockstep.json"
    doc = _lockstep().main(["--trees", f"A={ROOT},B={ROOT}", "--copies", "2", "--torch",
                            "--cpus", "0", "--device", "cpu", "--model", "tiny", "--batch",
                            "2", "--seq", "32", "--steps", "3", "--warmup", "1",
                            "--out", str(out)])
    procs = doc["processes"]
    assert json.loads(out.read_text())["processes"].keys() == procs.keys() == {
        "A.1", "A.2", "B.1", "B.2", "torch"}
    for label, p in procs.items():
        assert len(p["walls_ms"]) == 3 and len(p["losses"]) == 4  # 1 warm-up + 3 timed
        assert all(0 < h <= w for h, w in zip(p["hosts_ms"], p["walls_ms"]))
        assert p["tree"] == label.split(".")[0]
        assert p["cpus"] == [0]  # --cpus pinned it
    assert procs["torch"]["framework"] == "torch" and procs["B.2"]["framework"] == "genesis"
    # one tree four times: the same computation, so the same losses to the bit
    for label in ("A.2", "B.1", "B.2"):
        assert procs[label]["losses"] == procs["A.1"]["losses"]
        assert procs[label]["max_first_loss_diff"] == 0
    # torch from the same weights and data: bf16 autocast rounding apart (~2e-4, train.py's test)
    assert procs["torch"]["max_first_loss_diff"] < 1e-2
    # a tree's figure in a round is the mean of its copies' steps in that round
    ratio = doc["ratios_to_first"]["B_step"]
    walls = {k: p["walls_ms"] for k, p in procs.items()}
    assert ratio["per_round"] == pytest.approx([
        (b1 + b2) / (a1 + a2)
        for a1, a2, b1, b2 in zip(walls["A.1"], walls["A.2"], walls["B.1"], walls["B.2"])])
    assert ratio["q1"] <= ratio["median"] <= ratio["q3"]
    assert "torch_host" in doc["ratios_to_first"]
    assert "B / A, step time in the same round" in capsys.readouterr().out


def test_bad_tree_arguments_are_named(tmp_path):
    lockstep = _lockstep()
    with pytest.raises(SystemExit, match="LABEL=PATH"):
        lockstep.main(["--trees", "A", "--device", "cpu", "--model", "tiny"])
    with pytest.raises(SystemExit, match="label 'A' .* is taken"):
        lockstep.main(["--trees", f"A={ROOT},A={ROOT}", "--device", "cpu", "--model", "tiny"])
    with pytest.raises(SystemExit, match=r"tree A=.*has no packages/\*/src"):
        lockstep.main(["--trees", f"A={tmp_path}", "--device", "cpu", "--model", "tiny"])


def test_cpus_argument():
    lockstep = _lockstep()
    assert lockstep.parse_cpus("2,3") == {2, 3}
    assert lockstep.parse_cpus("2-5,8") == {2, 3, 4, 5, 8}
    with pytest.raises(SystemExit, match="--cpus takes CPU numbers"):
        lockstep.parse_cpus("two")
    with pytest.raises(SystemExit, match="'5-3'"):
        lockstep.parse_cpus("5-3")


def test_quartiles():
    assert _lockstep().quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 3.0, 4.0)
    assert _lockstep().quartiles([7.0]) == (7.0, 7.0, 7.0)
