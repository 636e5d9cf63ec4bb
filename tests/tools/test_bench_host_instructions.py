"""``tools/bench/host_instructions.py``: instructions per tiny op, genesis beside torch, from
callgrind's dump files (valgrind itself is too slow for a test: the child's loops run here
without it, and the counting runs on dump files written by the test)."""

from __future__ import annotations

import json

import pytest
from tool_script import load_tool


@pytest.fixture(scope="module")
def mod():
    return load_tool("tools/bench/host_instructions.py", "bench_host_instructions")


def _dump(folder, pid: int, n: int, total: int) -> None:
    (folder / f"cg.{pid}.{n}").write_text(f"version: 1\nsummary: {total}\ntotals: {total}\n")


def test_counts_are_read_in_dump_order_and_the_empty_loop_is_taken_off(tmp_path, mod):
    names = ["genesis:empty loop", "torch:empty loop", "genesis:add", "torch:add"]
    # startup, then one dump per loop of 10 calls (written out of order: 10 sorts after 2)
    for n, total in ((1, 10**9), (2, 1000), (3, 900), (4, 16000), (5, 10900)):
        _dump(tmp_path, 7, n, total)
    (tmp_path / "cg.7").write_text("summary: 5\n")  # the exit's file: not a loop's
    totals = mod.counts_of(str(tmp_path))
    assert totals == [10**9, 1000, 900, 16000, 10900]
    (row,) = mod.rows_of(names, totals, 10)
    assert row == {"op": "add", "genesis_instructions": 1500, "torch_instructions": 1000,
                   "genesis_over_torch": 1.5}
    with pytest.raises(RuntimeError, match="expected 4 counts"):
        mod.rows_of(names, totals[:3], 10)


def test_the_child_loops_every_overhead_row_for_both_libraries(tmp_path, mod):
    names_path = tmp_path / "names.json"
    mod.main(["--iters", "3", "--child", str(names_path)])
    names = json.loads(names_path.read_text())
    assert names[:4] == ["genesis:empty loop", "torch:empty loop", "genesis:add (a + b)",
                         "torch:add (a + b)"]
    assert "genesis:slice a[2:10]" in names and "torch:add, graph recorded" in names
