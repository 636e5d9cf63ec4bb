"""``tools/bench/cuda_host.py`` runs genesis's CUDA training step on a null device (no GPU)
and counts the launches of every phase. It patches genesis_cuda and Triton for the whole
process, so it runs in a subprocess here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_cuda_host_reports_every_phase_without_a_gpu(tmp_path):
    pytest.importorskip("triton")
    out = tmp_path / "cuda_host.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "bench", "cuda_host.py"), "--steps", "2",
         "--seq", "64", "--autocast", "--json", str(out)],  # 64 x batch: autotuned matmuls
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(out.read_text())
    phases = res["phases"]
    assert set(phases) == {"forward", "backward", "clip", "step", "zero_grad"}
    assert phases["forward"]["launches"] > 20 and phases["backward"]["launches"] > 20
    assert phases["step"]["launches"] >= 1  # the multi-tensor AdamW
    assert all(phases[ph]["us"] > 0 for ph in phases)
    assert "µs/launch" in proc.stdout
