"""fully_shard on NCCL: a world of one GPU runs the sharded path (all-gather and
reduce-scatter of one rank) and trains as the unsharded model; on two GPUs (``multigpu``)
training equals one process on the whole batch, a checkpoint saved on two ranks loads on
one, and a rank killed mid-step fails the other within the timeout."""

from __future__ import annotations

import time

import numpy as np
import pytest
from dist_harness import run_ranks
from fsdp_workers import checkpoint_resume, checkpoint_save, killed_mid_step, training


def _nccl(fn, world: int, *args, **kwargs):
    pytest.importorskip("cupy.cuda.nccl", reason="the nccl backend needs CuPy")
    return run_ranks(fn, world, *args, backend="nccl", start_method="spawn",
                     timeout_s=kwargs.pop("timeout_s", 120), join_s=300, **kwargs)


@pytest.mark.cuda
@pytest.mark.parametrize("mp", [False, True])
def test_world_of_one_gpu_runs_the_sharded_path(mp):
    r = _nccl(training, 1, mp, True, "cuda")[0]
    # one rank: the same kernels on the same values (bf16: rounding of the compute dtype)
    np.testing.assert_allclose(r["losses"], r["ref_losses"], rtol=1e-2 if mp else 1e-5,
                               atol=0 if mp else 1e-5)


@pytest.mark.cuda
def test_world_of_one_gpu_checkpoint_round_trip(tmp_path):
    directory = str(tmp_path / "ckpt")
    before = _nccl(checkpoint_save, 1, directory, "cuda")[0]
    after = _nccl(checkpoint_resume, 1, directory, "cuda")[0]
    for name, want in before["saved"].items():
        np.testing.assert_array_equal(after["loaded"][name], want)
    np.testing.assert_allclose(after["after"], before["after"], rtol=0, atol=1e-5)


@pytest.mark.multigpu
@pytest.mark.parametrize("mp", [False, True])
def test_two_gpus_train_as_one_process_on_the_whole_batch(mp):
    for r in _nccl(training, 2, mp, True, "cuda"):
        # GPU matmuls of half batches may order sums differently than the whole batch's
        np.testing.assert_allclose(r["losses"], r["ref_losses"], rtol=1e-2 if mp else 1e-5,
                                   atol=0 if mp else 1e-5)


@pytest.mark.multigpu
def test_checkpoint_saved_on_two_gpus_loads_on_one(tmp_path):
    directory = str(tmp_path / "ckpt")
    before = _nccl(checkpoint_save, 2, directory, "cuda")
    after = _nccl(checkpoint_resume, 1, directory, "cuda")[0]
    for name, want in before[0]["saved"].items():
        np.testing.assert_array_equal(after["loaded"][name], want)
    np.testing.assert_allclose(after["after"], before[0]["after"], rtol=0, atol=1e-5)


@pytest.mark.multigpu
def test_killed_rank_mid_step_fails_the_other_within_the_timeout():
    timeout = 10.0
    start = time.monotonic()
    results = _nccl(killed_mid_step, 2, "cuda", timeout_s=timeout, allow_exit=(1,))
    assert time.monotonic() - start < timeout + 60 + 30
    error = results[0]["error"]
    assert error is not None and results[0]["seconds"] < timeout + 15
    assert "rank 0 of group 'world'" in error
