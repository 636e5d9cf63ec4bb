"""NCCL across 2 processes and 2 GPUs: collectives on CUDA tensors vs numpy, DDP's
gradients vs one process's full-batch gradients, DDP's no_sync, a parameter shape mismatch
between ranks, and a rank killed mid-step (the Gloo versions: test_ddp.py, test_faults.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from dist_harness import run_ranks
from dist_workers import OPS, killed_peer, nccl_suite, rank_values

pytestmark = pytest.mark.multigpu
N = 2
TIMEOUT_S = 10.0  # the killed-rank world's: short, yet above two spawned ranks' skew


@pytest.fixture(scope="module")
def results():
    pytest.importorskip("cupy.cuda.nccl", reason="the nccl backend needs CuPy")
    return run_ranks(nccl_suite, N, backend="nccl", start_method="spawn", timeout_s=120,
                     join_s=300)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int16"])
@pytest.mark.parametrize("op", OPS)
def test_all_reduce(results, dtype, op):
    stack = np.stack([rank_values(r) for r in range(N)]).astype(np.float64)
    want = {"SUM": stack.sum(0), "PRODUCT": stack.prod(0), "MIN": stack.min(0),
            "MAX": stack.max(0), "AVG": stack.mean(0)}[op]
    if dtype == "int16" and op == "AVG":
        want = np.trunc(want)
    for r in range(N):
        np.testing.assert_allclose(results[r][f"all_reduce/{dtype}/{op}"], want,
                                   rtol=1.6e-2 if dtype == "bfloat16" else 1e-6)


def test_collectives_and_ddp(results):
    inputs = [rank_values(r, (4, 2)) for r in range(N)]
    big = np.stack([rank_values(r, (N * 2, 3)) for r in range(N)]).sum(0)
    a2a = [rank_values(r, (N * 2, 2)) for r in range(N)]
    for r in range(N):
        got = results[r]
        np.testing.assert_array_equal(got["broadcast"], inputs[N - 1])
        np.testing.assert_array_equal(got["all_gather_into_tensor"], np.concatenate(inputs))
        np.testing.assert_array_equal(got["reduce_scatter_tensor"], big[2 * r:2 * r + 2])
        np.testing.assert_array_equal(got["all_to_all_single"],
                                      np.concatenate([x[2 * r:2 * r + 2] for x in a2a]))
        np.testing.assert_array_equal(got["irecv"], np.full(5, (r - 1) % N))
        assert got["ddp"] < 1e-5  # GPU matmuls may order sums differently than the reference


def test_no_sync_accumulates_locally_then_averages(results):
    got = [r["no_sync"] for r in results]
    # inside no_sync the ranks' gradients differ (each saw its own shard) ...
    assert any(np.abs(a - b).max() > 1e-3 for a, b in zip(got[0]["local"], got[1]["local"]))
    # ... and the next synced backward averages the accumulated sums
    assert max(g["diff"] for g in got) < 1e-5


def test_parameter_shape_mismatch_names_rank_and_parameter(results):
    for r in results:
        message = r["mismatch"]
        assert "'1.weight'" in message and "rank 1" in message
        assert "[3, 4]" in message and "[2, 4]" in message


def test_killed_rank_makes_the_other_fail_within_the_timeout():
    pytest.importorskip("cupy.cuda.nccl", reason="the nccl backend needs CuPy")
    start = time.monotonic()
    results = run_ranks(killed_peer, N, "cuda", backend="nccl", start_method="spawn",
                        timeout_s=TIMEOUT_S, allow_exit=(N - 1,), join_s=TIMEOUT_S + 60)
    assert time.monotonic() - start < TIMEOUT_S + 60 + 30  # + spawning the ranks
    error = results[0]["error"]
    assert error is not None and results[0]["seconds"] < TIMEOUT_S + 15
    # the watchdog names the late collective, the rank and the group
    assert "all_reduce" in error and "rank 0 of group 'world'" in error
