"""Sharded checkpoints: state_dict() is sharded, a directory saved by 2 ranks resumes
exactly on 3 (and 1), consolidation to a Hugging Face directory, clear errors for a missing
or corrupt shard."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from dist_harness import run_ranks
from fsdp_workers import checkpoint_resume, checkpoint_save, resave_killed


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
