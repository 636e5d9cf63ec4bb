"""``tools/bench/overhead.py``: the host time per tiny op, genesis beside torch, in wall time
or (``--clock cpu``) in the thread's CPU time."""

from __future__ import annotations

import json

import pytest
from tool_script import load_tool


@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_every_row_has_both_times_and_their_ratio(tmp_path, capsys, clock):
    mod = load_tool("tools/bench/overhead.py", "bench_overhead")
    out = tmp_path / "overhead.json"
    mod.main(["--iters", "5", "--repeats", "3", "--no-stages", "--clock", clock,
              "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert [r["op"] for r in rows][:2] == ["add (a + b)", "mul by scalar (a * 2.0)"]
    assert all(r["genesis_us"] > 0 and r["torch_us"] > 0 for r in rows)
    assert all(r["genesis_over_torch"] == round(r["genesis_us"] / r["torch_us"], 2)
               or abs(r["genesis_over_torch"] - r["genesis_us"] / r["torch_us"]) < 0.02
               for r in rows)
    assert f"{clock} clock" in capsys.readouterr().out
