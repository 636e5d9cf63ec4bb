"""``genesis-sft --fsdp``: one process runs the sharded path and trains as without it; two
Gloo ranks train as one process on the same global batch; a run stopped early resumes from
its sharded checkpoint exactly."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from dist_harness import run_ranks
from fsdp_workers import sft_run
from tiny_sft import sft_config as config

from genesis.models.apps.checkpoint import list_checkpoints
from genesis.models.apps.sft import train

# the tiny model, data and settings of test_apps_sft.py (tests are imported by path)
_spec = importlib.util.spec_from_file_location(
    "sft_cases", Path(__file__).with_name("test_apps_sft.py"))
_cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cases)
base, weights = _cases.base, _cases.weights


@pytest.fixture
def world_of_one():
    """``train(fsdp=True)`` outside torchrun makes a world of one; undo it afterwards."""
    import genesis.distributed as dist

    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_one_process_fsdp_equals_the_plain_run(base, tmp_path, world_of_one):
    plain = train(config(base, tmp_path / "plain", max_steps=3))
    sharded = train(config(base, tmp_path / "fsdp", max_steps=3, fsdp=True))
    np.testing.assert_allclose(sharded["history"]["train_loss"],
                               plain["history"]["train_loss"], rtol=0, atol=1e-5)
    a, b = weights(tmp_path / "plain"), weights(tmp_path / "fsdp")  # a whole model dir
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=0, atol=1e-5, err_msg=name)


@pytest.mark.slow
def test_two_ranks_resume_exactly_from_a_sharded_checkpoint(base, tmp_path):
    def settings(out, **kw):
        return dataclasses.asdict(config(base, tmp_path / out, batch_size=2, max_steps=4,
                                         save_every=2, fsdp=True, **kw))

    single = train(config(base, tmp_path / "single", max_steps=4))  # the same 4 rows a step
    full = run_ranks(sft_run, 2, settings("full"))[0]
    np.testing.assert_allclose(full["history"]["train_loss"],
                               single["history"]["train_loss"], rtol=0, atol=1e-5)
    cut = run_ranks(sft_run, 2, settings("cut", stop_after=3))[0]
    assert cut["steps"] == 3 and not cut["finished"]
    found = list_checkpoints(tmp_path / "cut")
    assert [(s, p.name) for s, p in found] == [(2, "step-0000002.sharded"),
                                               (3, "step-0000003.sharded")]
    index = json.loads((found[-1][1] / "index.json").read_text())
    assert index["world_size"] == 2 and index["extra"]["step"] == 3
    resumed = run_ranks(sft_run, 2, settings("cut", resume=True))[0]
    assert resumed["finished"] and resumed["history"] == full["history"]


@pytest.mark.cuda
def test_one_gpu_fsdp_runs_the_sharded_path_and_resumes(base, tmp_path, world_of_one):
    gpu = dict(device="cuda", threads=None, max_steps=4, save_every=2)
    full = train(config(base, tmp_path / "full", fsdp=True, **gpu))
    train(config(base, tmp_path / "cut", fsdp=True, stop_after=2, **gpu))
    resumed = train(config(base, tmp_path / "cut", fsdp=True, resume=True, **gpu))
    assert resumed["finished"] and resumed["history"] == full["history"]
    losses = full["history"]["train_loss"]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]


@pytest.mark.multigpu
def test_two_gpus_fsdp_equal_one_gpu_and_resume(base, tmp_path):
    pytest.importorskip("cupy.cuda.nccl", reason="the nccl backend needs CuPy")

    def settings(out, **kw):
        return dataclasses.asdict(config(base, tmp_path / out, device="cuda", threads=None,
                                         batch_size=2, max_steps=4, save_every=2, fsdp=True,
                                         **kw))

    def nccl(s):
        return run_ranks(sft_run, 2, s, backend="nccl", start_method="spawn", timeout_s=120,
                         join_s=300)[0]

    one = train(config(base, tmp_path / "one", device="cuda", threads=None, max_steps=4))
    two = nccl(settings("two"))
    # bf16 autocast on both: the halves' sums round differently than the whole batch's
    np.testing.assert_allclose(two["history"]["train_loss"], one["history"]["train_loss"],
                               rtol=2e-2)
    nccl(settings("cut", stop_after=3))
    resumed = nccl(settings("cut", resume=True))
    assert resumed["history"] == two["history"]
