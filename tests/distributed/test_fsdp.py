"""fully_shard on 2 and 3 local Gloo processes: training equals one process on the whole
batch (AdamW, clip_grad_norm_), each rank holds 1/world of every parameter, gradient and
optimizer state, uneven dim-0 sizes, mixed precision."""

from __future__ import annotations

import numpy as np
import pytest
from dist_harness import run_ranks
from fsdp_workers import bad_inputs, holdings, killed_mid_step, skipped_block, training


@pytest.mark.parametrize("world", [2, 3])
def test_training_equals_one_process_on_the_whole_batch(world):
    results = run_ranks(training, world)
    for r in results:
        # fp32: sharding only reorders sums (the bound is 1e-5)
        np.testing.assert_allclose(r["losses"], r["ref_losses"], rtol=0, atol=1e-5)
        # clip_grad_norm_ returns the norm over all shards (< max_norm would not clip)
        np.testing.assert_allclose(r["norms"], r["ref_norms"], rtol=1e-5)
        assert max(r["ref_norms"]) > 0.5
        for name, want in r["ref_params"].items():
            np.testing.assert_allclose(r["params"][name], want, rtol=0, atol=1e-5,
                                       err_msg=name)


def test_training_without_reshard_after_forward():
    r = run_ranks(training, 2, False, False)[0]
    np.testing.assert_allclose(r["losses"], r["ref_losses"], rtol=0, atol=1e-5)


def test_mixed_precision_bf16_params_fp32_reduce():
    for r in run_ranks(training, 2, True):
        # bf16 forward/backward: about 3 significant digits per op, over 4 AdamW steps
        np.testing.assert_allclose(r["losses"], r["ref_losses"], rtol=1e-2)
        for name, got in r["params"].items():
            assert got.dtype == np.float32, name  # sharded params stay in their dtype


def test_each_rank_holds_one_world_th_of_every_tensor():
    world = 3
    results = run_ranks(holdings, world)
    for rank, r in enumerate(results):
        assert r["is_fsdp"]
        for name, h in r["params"].items():
            rows = h["global"][0] if h["global"] else 1
            chunk = -(-rows // world)
            assert h["sharded"], name
            assert h["local"] == (chunk, *h["global"][1:]), name
            assert h["grad"] == h["local"] and h["exp_avg"] == h["local"], name
            first = min(rank * chunk, rows)
            assert h["owned"][0] == min(first + chunk, rows) - first, name
            assert h["padding_zero"], name
        # 13 rows over 3 ranks: 5, 5 and 3 owned (uneven sizes)
        assert r["params"]["1.up.weight"]["owned"][0] == (3 if rank == 2 else 5)
        # just in time: block 1 is freed by the time block 2 runs, block 2 is gathered
        assert r["gathered_in_block2"][0] == (0, 13 * 8)
        assert r["after_forward"] == [0] * 5
        assert r["after_backward"] == [0] * len(r["after_backward"])
        # unshard(): whole tensors in state_dict(), kept across forwards; reshard() undoes it
        assert r["held_shapes"]["1.up.weight"] == (13, 8) and r["held_diff"] == 0
        assert r["held_after_forward"] == [1, 13 * 8, 13, 8 * 13, 8]  # scale, up, down
        assert r["resharded"] == "ShardedTensor"
        assert r["output_dtype"] == "genesis.float32"  # bf16 compute, cast back on the way out


def test_killed_rank_mid_step_fails_the_others_clearly():
    timeout = 3.0
    results = run_ranks(killed_mid_step, 2, "cpu", timeout_s=timeout, allow_exit=(1,),
                        join_s=timeout + 30)
    error = results[0]["error"]
    assert error is not None and results[0]["seconds"] < timeout + 30
    assert "group 'world'" in error  # names the collective's group (and the rank)


def test_misuse_fails_with_clear_errors(tmp_path):
    results = run_ranks(bad_inputs, 2, str(tmp_path / "ckpt"))
    for r in results:
        assert "fully_shard takes an nn.Module, got Tensor" in r["not_a_module"]
        assert "mp_policy must be a MixedPrecisionPolicy, got dict" in r["policy"]
        assert "already applied to this module (FSDPLinear)" in r["twice"]
        assert "'bias' is genesis.float64" in r["mixed_dtypes"]
        assert "rank 1's parameters differ from rank 0's" in r["mismatch"]
        assert "[3, 4]" not in r["mismatch"] and "(4, 4)" in r["mismatch"]
        assert "already ran forward under another root" in r["separate_root"]
        assert "did not give a gradient" in r["no_grad_for"]
        assert "b.weight, b.bias" in r["no_grad_for"]
        assert "'model/0.weight'" in r["load_mismatch"] and "[8, 6]" in r["load_mismatch"]
        assert "extra and config must be JSON values" in r["extra_not_json"]
        assert "has no optimizer state" in r["no_optimizer"]


def test_nothing_gathered_before_the_shards_change_is_used_after():
    for r in run_ranks(skipped_block, 2):
        assert r["diff"] == 0 and r["diff_after_change"] == 0
