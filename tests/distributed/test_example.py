"""examples/ddp_train.py under torchrun on 2 CPU processes (gloo), as the README shows."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp_train.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_ddp_train_runs_under_torchrun(tmp_path):
    ckpt = tmp_path / "ddp.gns"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={_free_port()}", str(EXAMPLE), "--epochs", "3", "--samples",
           "1024", "--accumulate", "2", "--checkpoint", str(ckpt)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=240,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stdout + run.stderr
    losses = [float(x) for x in re.findall(r"loss ([0-9.]+)", run.stdout)]
    assert len(losses) == 3 and losses[-1] < losses[0]  # it learns
    assert "x 2 ranks" in run.stdout and ckpt.exists()
