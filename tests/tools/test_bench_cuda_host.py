"""``tools/bench/cuda_host.py`` runs genesis's CUDA training step on a null device (no GPU)
and counts the launches of every phase. It patches genesis_cuda and Triton for the whole
process, so it runs in a subprocess here."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

import pytest
from tool_script import load_tool

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


# ------------------------------------------------------------------ --instructions
@pytest.fixture(scope="module")
def counting():
    return load_tool("tools/bench/cuda_host_instructions.py", "bench_cuda_host_instructions")


def test_each_phase_gets_its_least_count_over_the_steps_after_any_startup_dumps(counting):
    names = ["forward", "backward", "step"]
    # two dumps of the startup (something it ran entered os.getppid), then 2 steps
    totals = [10**9, 3 * 10**8, 500, 900, 40, 480, 950, 41]
    assert counting.phase_instructions(totals, names, 2) == {
        "forward": 480, "backward": 900, "step": 40}
    with pytest.raises(RuntimeError, match="expected 6 phase counts after the startup's, got 5"):
        counting.phase_instructions(totals[:6], names, 2)
    with pytest.raises(RuntimeError, match="got 0"):
        counting.phase_instructions([], names, 1)


def test_the_child_brackets_each_phase_and_reports_its_launches(tmp_path):
    pytest.importorskip("triton")
    info = tmp_path / "phases.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "bench", "cuda_host.py"), "--steps", "2",
         "--seq", "64", "--autocast", "--child", str(info)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(info.read_text())
    assert res["phases"] == ["forward", "backward", "clip", "step", "zero_grad"]
    assert res["steps"] == 2
    assert res["launches"]["forward"] > 20 and res["launches"]["step"] >= 1


def test_instructions_runs_the_child_under_callgrind_and_reports_per_launch(
        tmp_path, monkeypatch, capsys, counting):
    seen = {}

    def fake_run(cmd, env, **kwargs):  # what callgrind and the child would leave behind
        seen["cmd"], seen["env"] = cmd, env
        folder = os.path.dirname(cmd[cmd.index("--tool=callgrind") + 2].split("=", 1)[1])
        info = cmd[cmd.index("--child") + 1]
        totals = [10**9] + [2_000_000, 3_000_000, 1_000] * 2
        for n, total in enumerate(totals, 1):
            with open(os.path.join(folder, f"cg.42.{n}"), "w") as f:
                f.write(f"summary: {total}\n")
        with open(info, "w") as f:
            json.dump({"phases": ["forward", "backward", "zero_grad"], "steps": 2,
                       "launches": {"forward": 100, "backward": 200, "zero_grad": 0}}, f)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)  # (host_instructions runs callgrind)
    args = argparse.Namespace(model="tiny", batch=2, seq=16, steps=2, autocast=True)
    out = counting.count_instructions("tools/bench/cuda_host.py", args)
    assert seen["cmd"][:3] == ["valgrind", "--tool=callgrind", "--dump-before=os_getppid*"]
    assert "--autocast" in seen["cmd"] and seen["env"]["PYTHONHASHSEED"] == "0"
    assert out["phases"] == {"forward": {"instructions": 2_000_000, "launches": 100},
                             "backward": {"instructions": 3_000_000, "launches": 200},
                             "zero_grad": {"instructions": 1_000, "launches": 0}}
    table = capsys.readouterr().out
    assert "forward        2.00      100       20,000" in table
    assert "total          5.00      300       16,670" in table


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_instructions_counts_a_real_step_under_callgrind(tmp_path):
    pytest.importorskip("triton")
    out = tmp_path / "instr.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "bench", "cuda_host.py"), "--steps", "1",
         "--instructions", "--json", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    phases = json.loads(out.read_text())["phases"]
    assert phases["forward"]["instructions"] > 10**5 and phases["forward"]["launches"] > 10
    assert "instr/launch" in proc.stdout
