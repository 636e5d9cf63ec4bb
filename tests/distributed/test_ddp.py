"""DistributedDataParallel on 2 local Gloo processes: gradients equal one process's
full-batch gradients, no_sync accumulation, unused parameters, shape checks, buffers."""

from __future__ import annotations

import numpy as np
import pytest
from dist_harness import run_ranks
from dist_workers import ddp_suite

N = 2


@pytest.fixture(scope="module")
def results():
    return run_ranks(ddp_suite, N)


@pytest.mark.parametrize("config", ["one_bucket_per_param", "default_buckets", "bucket_view"])
def test_gradients_equal_full_batch_gradients(results, config):
    got = [r[config] for r in results]
    # fp32: averaging the shards' mean gradients only reorders the sums
    assert max(g["grad_diff"] for g in got) < 1e-6
    for a, b in zip(got[0]["params"], got[1]["params"]):  # replicas stay identical
        np.testing.assert_array_equal(a, b)
    assert got[0]["state_keys"] == ["module.0.bias", "module.0.weight"]
    if config == "one_bucket_per_param":
        assert got[0]["buckets"] == 4
    else:
        assert got[0]["buckets"] == 1


def test_no_sync_accumulates_locally_then_averages(results):
    got = [r["no_sync"] for r in results]
    # inside no_sync the ranks' gradients differ (each saw its own shard) ...
    assert any(np.abs(a - b).max() > 1e-3 for a, b in zip(got[0]["local"], got[1]["local"]))
    # ... and the next synced backward averages the accumulated sums
    assert max(g["diff"] for g in got) < 1e-6


def test_find_unused_parameters(results):
    got = [r["unused"] for r in results]
    for g in got:
        assert g["never.weight"] is None and g["never.bias"] is None  # unused on all ranks
        for name in ("trunk.weight", "head_a.bias"):
            want = (got[0]["local"][name] + got[1]["local"][name]) / 2
            np.testing.assert_allclose(g[name], want, rtol=1e-6)
        # head_b: used on rank 0 only; rank 1 contributes zeros to the average
        np.testing.assert_allclose(g["head_b.weight"], got[0]["local"]["head_b.weight"] / 2,
                                   rtol=1e-6)
    for g in got:
        assert "Expected to have finished reduction" in g["strict_error"]
        assert "never.weight" in g["strict_error"]


def test_parameter_shape_mismatch_names_rank_and_parameter(results):
    for r in results:
        message = r["mismatch"]
        assert "'1.weight'" in message and "rank 1" in message
        assert "[3, 4]" in message and "[2, 4]" in message


def test_wrap_broadcasts_rank0_state_and_buffers(results):
    a, b = (r["buffers"] for r in results)
    np.testing.assert_array_equal(a["weight"], b["weight"])
    assert np.abs(a["after_local_step"] - b["after_local_step"]).max() > 1e-3
    np.testing.assert_array_equal(a["after_next_forward"], b["after_next_forward"])
    np.testing.assert_array_equal(a["after_next_forward"], a["after_local_step"])
