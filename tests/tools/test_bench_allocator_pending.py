"""``tools/bench/allocator_pending.py``: the caching allocator through a synthetic FSDP step
with cross-stream frees in flight, on a fake driver (no GPU). Counts only, no timing."""

from __future__ import annotations

import json

from tool_script import load_tool


def test_fsdp_step_queries_each_stream_not_each_pending_free(tmp_path, capsys):
    bench = load_tool("tools/bench/allocator_pending.py", "bench_allocator_pending")
    out = tmp_path / "pending.json"
    rows = bench.main(["--steps", "1", "--lags", "0,500", "--query-us", "0", "--json",
                       str(out)])
    assert [r["lag"] for r in rows] == [0, 500]
    assert json.loads(out.read_text())["rows"] == rows
    for r in rows:
        # forward 24 x (3 + 50), backward 24 x (3 + 78 + 2), 60 more
        assert r["requests"] == 24 * 53 + 24 * 83 + 60
        assert r["reserved_gib"] > 0 and r["host_ms"] >= 0
    behind = rows[1]  # a GPU 500 requests behind: dozens of frees waiting at once
    assert behind["peak_pending"] >= 20
    # one communication stream: at most one query per request that misses the held chunks,
    # plus one per free that completes (each free's event is asked about once when done)
    assert behind["queries_per_request"] < 1
    assert "q/req" in capsys.readouterr().out
