"""``tools/device/ab_summary.py``: medians and ranges of an A/B run of ``tools/device/ab.sh``,
per figure, from the benchmarks' JSON files."""

from __future__ import annotations

import json

from tool_script import load_tool


def _summary():
    return load_tool("tools/device/ab_summary.py", "ab_summary")


def _host_step(genesis_us: float, torch_us: float) -> dict:
    phases = ("forward", "backward", "clip", "step", "zero_grad")
    doc = {fw: {ph: {"us": us, "kernels": 1} for ph in phases}
           for fw, us in (("genesis", genesis_us), ("torch", torch_us))}
    doc["total"] = {fw: {"us": 5 * us, "kernels": 5}
                    for fw, us in (("genesis", genesis_us), ("torch", torch_us))}
    return doc


def test_host_step_and_overhead_rows_are_medians_of_the_rounds(tmp_path, capsys):
    for v, runs in (("A", [(3.0, 2.0), (4.0, 2.0), (5.0, 2.0)]), ("B", [(6.0, 2.0)] * 3)):
        for r, (g, t) in enumerate(runs, 1):
            (tmp_path / f"step_{v}_{r}.json").write_text(json.dumps(_host_step(g, t)))
            (tmp_path / f"overhead_cpu_{v}_{r}.json").write_text(json.dumps(
                {"rows": [{"op": "slice a[2:10]", "genesis_over_torch": g / t}]}))
    _summary().main([str(tmp_path)])
    out = capsys.readouterr().out
    # A: ratios 1.5, 2, 2.5 (median 2); B: 3 each time; B/A 1.5
    assert "| cpu: slice a[2:10] | 2 (1.5-2.5) | 3 (3-3) | 1.500 |" in out
    assert "| host step step (genesis/torch) | 2 (1.5-2.5) | 3 (3-3) | 1.500 |" in out
    assert "| host step total (genesis/torch) | 2 (1.5-2.5) | 3 (3-3) | 1.500 |" in out


def test_train_rows_add_host_time_and_the_in_run_ratio_to_torch(tmp_path, capsys):
    def run(genesis_ms, torch_ms, host_us):
        return {"results": {
            "genesis": {"step_ms": genesis_ms, "tok_per_s": 8192 / genesis_ms,
                        "peak_mem_gib": 8.0, "host_ms": 0.9 * genesis_ms,
                        "host_us_per_launch": host_us},
            "torch": {"step_ms": torch_ms}}}

    # A: the machine slows its second run (both frameworks by 1.5x); B: one run, 10 % slower
    # than torch beside it
    for v, runs in (("A", [run(40.0, 40.0, 20.0), run(60.0, 60.0, 30.0)]),
                    ("B", [run(44.0, 40.0, 22.0)])):
        for r, doc in enumerate(runs, 1):
            (tmp_path / f"train_{v}_{r}.json").write_text(json.dumps(doc))
    _summary().main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "| genesis host µs per launch | 25 (20-30) | 22 (22-22) | 0.880 |" in out
    assert "| genesis step ms | 50 (40-60) | 44 (44-44) | 0.880 |" in out
    assert "| genesis step / torch step, same run | 1 (1-1) | 1.1 (1.1-1.1) | 1.100 |" in out
