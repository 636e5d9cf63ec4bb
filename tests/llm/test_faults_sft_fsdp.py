"""Faults against ``genesis-sft --fsdp`` checkpoints: what a save killed mid-way leaves.

A sharded checkpoint is a directory every rank fills (``step-N.sharded/``: one file a rank,
then ``index.json``). A run killed while saving one leaves it torn: rank files and no index,
only a killed writer's temporary of the index, or (from something else than genesis's atomic
writes) part of an index. A resume must continue from the newest whole checkpoint, say which
torn one it skipped, and delete the torn ones once the run is restored, never a whole one,
never one that a live writer may still be filling; a finished checkpoint that lost a file is
skipped and left in place, and an index of another version is refused, not judged.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from kill_writer import block_at, kill_while_blocked, needs_fork

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from tiny_sft import make_base
from tiny_sft import sft_config as config

import genesis.distributed as dist
from genesis.atomic_write import atomic_write
from genesis.models.apps import checkpoint as ckpt
from genesis.models.apps.sft import prepare_out, train
from genesis.models.apps.sft_cli import main as sft_main


def _train(base, out, **kw) -> dict:
    """A 4-step ``--fsdp`` run (evaluated at the end only, whatever ``save_every``); outside
    torchrun it makes a world of one: undone after."""
    try:
        return train(config(base, out, max_steps=4, fsdp=True, eval_every=100, **kw))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(base, the 4-step run's history, a run stopped after step 3 with whole sharded
    checkpoints after steps 1, 2 and 3)."""
    root = tmp_path_factory.mktemp("sft_fsdp_faults")
    base = make_base(root)
    full = _train(base, root / "full")
    _train(base, root / "cut", save_every=1, stop_after=3, keep_checkpoints=3)
    return base, full["history"], root / "cut"


@pytest.fixture
def cut(runs, tmp_path):
    """A copy of the stopped run's folder, to tear."""
    out = tmp_path / "cut"
    shutil.copytree(runs[2], out)
    assert [s for s, _ in ckpt.list_checkpoints(out)] == [1, 2, 3]
    return out


def step_dir(out, step):
    return ckpt.checkpoint_path(out, step, sharded=True)


def dead_writers_temporary(directory, name: str = "index.json") -> list:
    """Kill a process writing ``directory/name`` just before its rename: what is left is
    the temporary of a writer that no longer runs (returned, a one-item list)."""
    before = set(directory.iterdir())

    def write():
        with atomic_write(directory / name) as tmp, open(tmp, "w") as f:
            f.write('{"format": "genesis.distri')

    kill_while_blocked(write, block_at(os, "replace", 1))
    left = sorted(set(directory.iterdir()) - before)
    assert len(left) == 1 and left[0].name.startswith(f".{name}."), left
    return left


def tear_no_index(directory) -> None:  # killed after the rank files, before the index
    (directory / "index.json").unlink()


def tear_index_temporary(directory) -> None:  # killed while writing the index
    tear_no_index(directory)
    dead_writers_temporary(directory)


def tear_half_index(directory) -> None:  # an index written in part (not by atomic_write)
    text = (directory / "index.json").read_text()
    (directory / "index.json").write_text(text[: len(text) // 2])


def tear_before_any_file(directory) -> None:  # killed while writing its rank file
    for f in directory.iterdir():
        f.unlink()
    dead_writers_temporary(directory, "rank-00000-of-00001.safetensors")


TEARS = {"rank files, no index": tear_no_index,
         "a killed writer's index temporary": tear_index_temporary,
         "half an index": tear_half_index,
         "only a rank file's temporary": tear_before_any_file}


@needs_fork
@pytest.mark.parametrize("tear", TEARS.values(), ids=TEARS.keys())
def test_resume_skips_a_torn_checkpoint_says_so_and_removes_it(runs, cut, tear, capsys):
    base, full, _ = runs
    torn = step_dir(cut, 3)
    tear(torn)
    whole, unusable = ckpt.scan_checkpoints(cut)
    assert [s for s, _ in whole] == [1, 2]
    assert [(u.step, u.torn) for u in unusable] == [(3, True)]
    assert prepare_out(cut, resume=True, overwrite=False)[0] == step_dir(cut, 2)
    capsys.readouterr()
    resumed = _train(base, cut, resume=True)
    said = capsys.readouterr().out
    assert f"skipping checkpoint {torn}: " in said and "index.json" in said, said
    assert f"resumed from {step_dir(cut, 2)} at step 2" in said, said
    assert f"removed {torn}, which a killed save left unfinished" in said, said
    assert not torn.exists()
    assert [s for s, _ in ckpt.list_checkpoints(cut)] == [1, 2]  # whole ones untouched
    assert resumed["finished"] and resumed["history"] == full  # steps 3-4 redone exactly


def test_a_checkpoint_that_lost_a_file_is_skipped_but_kept(runs, cut, capsys):
    base, full, _ = runs
    damaged = step_dir(cut, 3)
    (damaged / "rank-00000-of-00001.safetensors").unlink()
    resumed = _train(base, cut, resume=True)
    said = capsys.readouterr().out
    assert f"skipping checkpoint {damaged}: " in said and "is missing" in said, said
    assert "removed" not in said and damaged.is_dir()
    assert resumed["history"] == full


def test_pruning_after_a_save_removes_torn_checkpoints_never_whole_ones(cut):
    tear_no_index(step_dir(cut, 1))
    assert ckpt.prune_checkpoints(cut, keep=2) == [step_dir(cut, 1)]
    assert [s for s, _ in ckpt.list_checkpoints(cut)] == [2, 3]
    assert ckpt.prune_checkpoints(cut, keep=2) == []
    assert ckpt.prune_checkpoints(cut, keep=1) == [step_dir(cut, 2)]
    assert [s for s, _ in ckpt.list_checkpoints(cut)] == [3]


@needs_fork
def test_a_torn_checkpoint_a_live_writer_may_be_filling_is_kept(cut):
    torn = step_dir(cut, 3)
    tear_no_index(torn)
    stale, = dead_writers_temporary(torn, "rank-00000-of-00001.safetensors")
    with atomic_write(torn / "index.json"):  # this process is writing there: alive
        _, unusable = ckpt.scan_checkpoints(cut)
        assert ckpt.remove_torn(unusable) == [] and torn.is_dir()
        assert not stale.exists()  # (the killed writer's temporary is cleared all the same)
    _, unusable = ckpt.scan_checkpoints(cut)  # (the empty index written: still torn JSON)
    assert ckpt.remove_torn(unusable) == [torn] and not torn.exists()


def test_resume_with_only_torn_checkpoints_names_them(runs, cut, capsys):
    base, _, _ = runs
    for step in (1, 2, 3):
        tear_no_index(step_dir(cut, step))
    model_dir, data = base
    argv = ["--model", str(model_dir), "--data", str(data), "--out", str(cut), "--fsdp",
            "--resume", "--seq-len", "64", "--batch-size", "4", "--max-steps", "4",
            "--no-progress", "--no-plot", "--device", "cpu"]
    try:
        assert sft_main(argv) == 2
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    err = capsys.readouterr().err
    assert "has no checkpoints to resume from" in err and "--overwrite" in err, err
    assert "step-0000003.sharded cannot be used" in err and "no index.json" in err, err
    assert all(step_dir(cut, s).is_dir() for s in (1, 2, 3))  # nothing deleted


def test_an_index_of_another_version_is_refused_and_kept(runs, cut):
    base, _, _ = runs
    index_path = step_dir(cut, 3) / "index.json"
    index = json.loads(index_path.read_text())
    index["version"] = 99
    index_path.write_text(json.dumps(index))
    with pytest.raises(ValueError, match=r"step-0000003\.sharded.*version 99"):
        _train(base, cut, resume=True)
    assert json.loads(index_path.read_text())["version"] == 99


def test_a_plain_run_and_a_sharded_one_share_the_checkpoint_names(tmp_path):
    assert ckpt.checkpoint_path(tmp_path, 12).name == "step-0000012.safetensors"
    assert step_dir(tmp_path, 12).name == "step-0000012.sharded"


def test_resuming_a_sharded_run_without_fsdp_says_so(runs, cut, capsys):
    base, _, _ = runs
    model_dir, data = base
    argv = ["--model", str(model_dir), "--data", str(data), "--out", str(cut), "--resume",
            "--seq-len", "64", "--batch-size", "4", "--max-steps", "4", "--no-progress",
            "--no-plot", "--device", "cpu"]
    assert sft_main(argv) == 2
    err = capsys.readouterr().err
    assert "step-0000003.sharded was written by a run with --fsdp" in err, err
    assert "resume it with --fsdp" in err, err


def test_a_torn_checkpoint_that_cannot_be_deleted_is_left(cut, monkeypatch):
    torn = step_dir(cut, 3)
    tear_no_index(torn)

    def refuse(path, *a, **kw):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(shutil, "rmtree", refuse)
    _, unusable = ckpt.scan_checkpoints(cut)
    assert ckpt.remove_torn(unusable) == [] and torn.is_dir()
