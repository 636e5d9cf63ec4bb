"""Two torchrun agents on this machine as two nodes (one Gloo process each, a localhost
rendezvous endpoint): DDP and fully_shard run unchanged and train as one process would."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

WORKER = Path(__file__).resolve().parents[1] / "support" / "multinode_worker.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_nodes_under_torchrun(tmp_path):
    endpoint = f"127.0.0.1:{_free_port()}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    agents = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
         f"--node_rank={node}", f"--rdzv-endpoint={endpoint}", str(WORKER), str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for node in (0, 1)]
    logs = []
    try:
        for agent in agents:
            logs.append(agent.communicate(timeout=55)[0])
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
    assert [a.returncode for a in agents] == [0, 0], "\n".join(logs)
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert sorted((r["rank"], r["node"], r["world"]) for r in reports) == [(0, 0, 2), (1, 1, 2)]
    for r in reports:
        np.testing.assert_allclose(r["ddp"], r["ddp_ref"], rtol=0, atol=1e-5)
        np.testing.assert_allclose(r["fsdp"], r["fsdp_ref"], rtol=0, atol=1e-5)
