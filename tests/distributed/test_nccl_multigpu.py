"""NCCL across 2 processes and 2 GPUs: collectives on CUDA tensors vs numpy, and DDP's
gradients vs one process's full-batch gradients (the multi-GPU issue's first check)."""

from __future__ import annotations

import numpy as np
import pytest
from dist_harness import run_ranks
from dist_workers import OPS, nccl_suite, rank_values

pytestmark = pytest.mark.multigpu
N = 2


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
