"""``tools/bench/fsdp_host.py`` runs genesis FSDP's CUDA step on a null device with a
stand-in NCCL and counts what the caching allocator does per step. It patches genesis_cuda,
Triton and CuPy for the whole process, so it runs in a subprocess here. Counts only."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_fsdp_step_event_queries_stay_bounded_when_the_gpu_lags(tmp_path):
    pytest.importorskip("triton")
    out = tmp_path / "fsdp_host.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "bench", "fsdp_host.py"), "--model",
         "narrow-0.5b", "--seq", "64", "--steps", "1", "--lags", "0,500", "--json", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    now, behind = json.loads(out.read_text())["rows"]
    for row in (now, behind):
        assert row["requests"] > 1000  # 24 blocks, forward and backward
        # two all-gathers a block each way, its reduce-scatter's input and output
        assert row["frees"] >= 24 * 6
        assert row["peak_gib"] > 0 and row["reserved_gib"] >= row["peak_gib"]
    assert behind["pending"] > 20  # 500 requests behind: dozens of frees in flight
    # one query a search (one communication stream) plus one a completed free; before the
    # per-stream queues every search asked about every pending free (~20x this)
    assert behind["queries"] <= behind["searches"] + behind["frees"]
    assert "x-stream" in proc.stdout
