"""Sharded checkpoints: state_dict() is sharded, a directory saved by 2 ranks resumes
exactly on 3 (and 1), consolidation to a Hugging Face directory, clear errors for a missing
or corrupt shard, and ``verify_sharded_checkpoint`` telling a whole checkpoint from what a
killed save leaves."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from dist_harness import run_ranks
from fsdp_workers import checkpoint_resume, checkpoint_save, resave_killed
from kill_writer import block_at, kill_while_blocked, needs_fork


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("sharded") / "ckpt")
    return directory, run_ranks(checkpoint_save, 2, directory)


def test_state_dict_is_sharded_and_loads_back(saved):
    _, results = saved
    for r in results:
        assert set(r["kinds"].values()) == {"ShardedTensor"}
        assert r["changed"] > 1e-3  # training went on after the save ...
        for name, want in r["saved"].items():  # ... and load_state_dict put it back
            np.testing.assert_array_equal(r["restored"][name], want)


def test_directory_has_one_file_per_rank_and_an_index(saved):
    directory, _ = saved
    assert sorted(os.listdir(directory)) == [
        "index.json", "rank-00000-of-00002.safetensors", "rank-00001-of-00002.safetensors"]
    with open(os.path.join(directory, "index.json")) as f:
        index = json.load(f)
    assert index["world_size"] == 2 and index["extra"] == {"step": 2}
    assert index["tensors"]["model/1.up.weight"]["shape"] == [13, 8]
    assert [p["rows"] for p in index["tensors"]["model/1.up.weight"]["pieces"]] == [
        [0, 7], [7, 13]]


@pytest.mark.parametrize("world", [3, 1])
def test_resume_on_another_world_size_is_exact(saved, world):
    directory, before = saved
    for r in run_ranks(checkpoint_resume, world, directory):
        assert r["extra"] == {"step": 2}
        for name, want in before[0]["saved"].items():
            np.testing.assert_array_equal(r["loaded"][name], want)
        # optimizer state came back too: the next steps repeat the uninterrupted run
        np.testing.assert_allclose(r["after"], before[0]["after"], rtol=0, atol=1e-5)


def test_consolidation_writes_a_hugging_face_directory(saved, tmp_path):
    from safetensors.numpy import load_file

    from genesis.distributed.fsdp import consolidate_sharded_checkpoint

    directory, results = saved
    consolidate_sharded_checkpoint(directory, tmp_path / "hf")
    assert sorted(os.listdir(tmp_path / "hf")) == ["config.json", "model.safetensors"]
    tensors = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert set(tensors) == set(results[0]["saved"])
    for name, want in results[0]["saved"].items():
        np.testing.assert_array_equal(tensors[name], want)


def test_missing_or_corrupt_shard_names_the_file(saved, tmp_path):
    import shutil

    from genesis.distributed.fsdp import consolidate_sharded_checkpoint

    directory, _ = saved
    broken = tmp_path / "broken"
    shutil.copytree(directory, broken)
    shard = broken / "rank-00001-of-00002.safetensors"
    shard.unlink()
    with pytest.raises(FileNotFoundError, match="rank-00001-of-00002.safetensors is missing"):
        consolidate_sharded_checkpoint(broken, tmp_path / "out")
    shard.write_bytes(b"\x00" * 5)
    with pytest.raises(ValueError, match="rank-00001-of-00002.safetensors is corrupt"):
        consolidate_sharded_checkpoint(broken, tmp_path / "out")
    (broken / "index.json").unlink()
    with pytest.raises(FileNotFoundError, match="no index.json"):
        consolidate_sharded_checkpoint(broken, tmp_path / "out")


def test_an_index_naming_a_file_outside_its_directory_is_refused(saved, tmp_path):
    import shutil

    from genesis.distributed.fsdp import consolidate_sharded_checkpoint

    directory, _ = saved
    copy = tmp_path / "ckpt"
    shutil.copytree(directory, copy)
    outside = "rank-00001-of-00002.safetensors"
    shutil.copy(copy / outside, tmp_path / "outside.safetensors")  # a valid file, elsewhere
    index = json.loads((copy / "index.json").read_text())
    text = json.dumps(index).replace(outside, "../outside.safetensors")
    (copy / "index.json").write_text(text)
    with pytest.raises(ValueError, match=r"index.json: 'files' must list file names inside"):
        consolidate_sharded_checkpoint(copy, tmp_path / "out")


def test_a_rank_killed_while_resaving_leaves_the_previous_checkpoint_whole(tmp_path):
    """A second save into the same directory writes new files beside the old ones; a rank
    dying before the new index is written leaves the old checkpoint loadable, unmixed."""
    from safetensors.numpy import load_file

    from genesis.distributed.fsdp import consolidate_sharded_checkpoint

    directory = tmp_path / "ckpt"
    results = run_ranks(resave_killed, 2, str(directory), timeout_s=3.0, allow_exit=(1,),
                        join_s=60)
    assert "rank(s) [1]" in results[0]["error"]  # rank 0's save says who never arrived
    consolidate_sharded_checkpoint(directory, tmp_path / "hf")
    tensors = load_file(str(tmp_path / "hf" / "model.safetensors"))
    for name, want in results[0]["first"].items():  # the first save's values, every row
        np.testing.assert_array_equal(tensors[name], want, err_msg=name)
    assert json.loads((directory / "index.json").read_text())["extra"] == {"step": 1}
    assert len([n for n in os.listdir(directory) if n.startswith("rank-")]) > 2
    run_ranks(checkpoint_save, 2, str(directory))  # a complete save removes the leftovers
    index = json.loads((directory / "index.json").read_text())
    assert sorted(os.listdir(directory)) == sorted(["index.json", *index["files"]])
    assert index["extra"] == {"step": 2} and len(index["files"]) == 2


@pytest.mark.slow
def test_sharded_qwen_trains_like_one_process_and_consolidates_for_from_pretrained(tmp_path):
    import torch
    import transformers
    from fsdp_workers import qwen_training_and_save

    import genesis
    from genesis.distributed.fsdp import consolidate_sharded_checkpoint
    from genesis.models import AutoModelForCausalLM

    directory = str(tmp_path / "ckpt")
    results = run_ranks(qwen_training_and_save, 2, directory)
    for r in results:
        np.testing.assert_allclose(r["losses"], r["ref_losses"], rtol=0, atol=1e-5)
    consolidate_sharded_checkpoint(directory, tmp_path / "hf")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    for name, p in model.state_dict().items():
        np.testing.assert_array_equal(p.numpy(), results[0]["full"][name], err_msg=name)
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    ids = [[3, 1, 4, 1, 5, 9, 2, 6]]
    want = hf_model(torch.tensor(ids)).logits.detach().numpy()
    got = model(genesis.tensor(ids)).logits.detach().numpy()
    torch.testing.assert_close(torch.from_numpy(got), torch.from_numpy(want))


# ------------------------------------------------ telling a whole checkpoint from a torn one
@needs_fork
@pytest.mark.parametrize("kill_at", ["rank file", "index"])
def test_a_save_killed_before_its_index_is_told_apart_from_a_whole_one(
        tmp_path, world_of_one, kill_at):
    """SIGKILLed while renaming its rank file into place or its index: the directory is
    what an interrupted save leaves (``interrupted``), and the killed writer's temporary
    is cleared by the next write there; a complete save of the same state verifies."""
    from fsdp_workers import make_model, shard

    import genesis
    from genesis.atomic_write import live_temporaries, remove_stale_temporaries
    from genesis.distributed.fsdp import (
        IncompleteCheckpointError,
        save_sharded_checkpoint,
        verify_sharded_checkpoint,
    )

    genesis.set_num_threads(1)
    model = shard(make_model())
    opt = genesis.optim.AdamW(model.parameters(), lr=0.05)
    directory = tmp_path / "step-1.sharded"
    replaces = {"rank file": 1, "index": 2}[kill_at]  # (os.replace: rank file, then index)
    kill_while_blocked(lambda: save_sharded_checkpoint(directory, model, opt, extra={"s": 1}),
                       block_at(os, "replace", replaces))
    names = sorted(os.listdir(directory))
    assert len(names) == replaces and names[0].startswith(".")  # a temporary, no index
    with pytest.raises(IncompleteCheckpointError, match="no index.json") as caught:
        verify_sharded_checkpoint(directory)
    assert caught.value.interrupted
    assert live_temporaries(directory) == []  # its writer is dead ...
    assert len(remove_stale_temporaries(directory)) == 1  # ... so its temporary goes
    whole = tmp_path / "step-2.sharded"
    save_sharded_checkpoint(whole, model, opt, extra={"s": 2})
    assert verify_sharded_checkpoint(whole)["extra"] == {"s": 2}


BROKEN = {  # what is done to a whole checkpoint, (interrupted, words of the message)
    "index cut in half": (lambda d: (d / "index.json").write_text(
        (d / "index.json").read_text()[:200]), True, "not complete JSON"),
    "a rank file missing": (lambda d: (d / "rank-00001-of-00002.safetensors").unlink(),
                            False, "rank-00001-of-00002.safetensors is missing"),
    "a rank file truncated": (lambda d: (d / "rank-00000-of-00002.safetensors").write_bytes(
        (d / "rank-00000-of-00002.safetensors").read_bytes()[:100]), False, "is corrupt"),
}


@pytest.mark.parametrize("name", BROKEN)
def test_verify_names_what_is_missing_or_broken(saved, tmp_path, name):
    import shutil

    from genesis.distributed.fsdp import IncompleteCheckpointError, verify_sharded_checkpoint

    directory, _ = saved
    assert verify_sharded_checkpoint(directory)["extra"] == {"step": 2}
    copy = tmp_path / "ckpt"
    shutil.copytree(directory, copy)
    damage, interrupted, words = BROKEN[name]
    damage(copy)
    with pytest.raises(IncompleteCheckpointError, match=words) as caught:
        verify_sharded_checkpoint(copy)
    assert caught.value.interrupted is interrupted


def test_an_index_of_another_version_is_not_called_incomplete(saved, tmp_path):
    import shutil

    from genesis.distributed.fsdp import IncompleteCheckpointError, verify_sharded_checkpoint

    copy = tmp_path / "ckpt"
    shutil.copytree(saved[0], copy)
    index = json.loads((copy / "index.json").read_text())
    (copy / "index.json").write_text(json.dumps(index | {"version": 2}))
    with pytest.raises(ValueError, match="has version 2") as caught:
        verify_sharded_checkpoint(copy)
    assert not isinstance(caught.value, IncompleteCheckpointError)


def test_consolidation_over_a_sharded_model_directory_is_refused(saved, tmp_path):
    """A Hugging Face directory with a shard index is read through the index: a
    model.safetensors written beside it would be ignored, silently. Nothing is written."""
    from genesis.distributed.fsdp import consolidate_sharded_checkpoint

    out = tmp_path / "hf"
    out.mkdir()
    index = out / "model.safetensors.index.json"
    index.write_text('{"weight_map": {"w": "model-00001-of-00001.safetensors"}}')
    with pytest.raises(FileExistsError, match="holds a sharded model"):
        consolidate_sharded_checkpoint(saved[0], out)
    assert [p.name for p in out.iterdir()] == [index.name]
