"""``tools/bench/overhead.py``: the host time per tiny op, genesis beside torch, in wall time
or (``--clock cpu``) in the thread's CPU time."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_every_row_has_both_times_and_their_ratio(tmp_path, capsys, clock):
    spec = importlib.util.spec_from_file_location(
        "bench_overhead", os.path.join(ROOT, "tools", "bench", "overhead.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
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
