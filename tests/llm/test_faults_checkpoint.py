"""Faults against from_pretrained / save_pretrained: killed saves, hostile files and configs.

A save SIGKILLed at any point leaves a directory that loads, bit for bit, as the old model
(before the switch) or the new one (after it), never a mix; shard indexes cannot point outside
the model directory; corrupt shards, malformed headers and hostile configs are refused with
an error naming the file and the tensor or field.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
from kill_writer import block_after, block_at, kill_while_blocked, needs_fork

import genesis
import genesis.models.safetensors_io as sio
from genesis.models import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig, QwenForCausalLM
from genesis.models.safetensors_io import load_tensor, read_header, save_tensors
from genesis.safetensors_file import CheckpointError

CONFIG = dict(vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
              num_attention_heads=2, num_key_value_heads=1, head_dim=8,
              max_position_embeddings=64)


def tiny(seed: int) -> QwenForCausalLM:
    genesis.manual_seed(seed)
    return QwenForCausalLM(Qwen3Config(**CONFIG))


def weights(model) -> dict:
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


def loaded(path) -> dict:
    return weights(AutoModelForCausalLM.from_pretrained(path))


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


# ----------------------------------------------------------------- killed saves
# (old layout's shard size, new save's shard size, the hook that blocks the new save, whether
# the directory has switched to the new weights at that point)
KILLS = {
    "single, torn weights": (None, None, block_after(sio, "write_safetensors", 0.5), False),
    "single, before the rename": (None, None, block_at(os, "replace", 1), False),
    "shards over same-named shards, before the last shard": ("3KB", "3KB", "LAST_SHARD", False),
    "shards over same-named shards, before the index": ("3KB", "3KB", "INDEX", False),
    "shards, index switched, old shards not yet removed": ("3KB", "3KB",
                                                           block_at(os, "unlink", 1), True),
    "single over shards, before the index is removed": ("3KB", None,
                                                        block_at(os, "unlink", 1), False),
    "shards over a single file, before the index": (None, "3KB", "INDEX", False),
}


@needs_fork
@pytest.mark.parametrize("old_shards,new_shards,hook,switched", KILLS.values(), ids=KILLS.keys())
def test_a_killed_save_pretrained_leaves_a_loadable_model(tmp_path, old_shards, new_shards,
                                                          hook, switched):
    out = tmp_path / "model"
    tiny(0).save_pretrained(out, **({"max_shard_size": old_shards} if old_shards else {}))
    old, new = weights(tiny(0)), weights(tiny(1))
    size = {"max_shard_size": new_shards} if new_shards else {}
    if hook in ("LAST_SHARD", "INDEX"):  # count the renames of the new save in a scratch dir
        tiny(1).save_pretrained(tmp_path / "scratch", **size)
        n = len(set(json.loads((tmp_path / "scratch" / "model.safetensors.index.json")
                               .read_text())["weight_map"].values()))
        hook = block_at(os, "replace", n if hook == "LAST_SHARD" else n + 1)
    model = tiny(1)
    kill_while_blocked(lambda: model.save_pretrained(out, **size), hook)
    assert same(loaded(out), new if switched else old)
    # the next save clears what the dead writer left and leaves one clean layout
    tiny(2).save_pretrained(out, **size)
    assert same(loaded(out), weights(tiny(2)))
    names = sorted(os.listdir(out))
    assert not any(n.endswith(".tmp") for n in names), names
    expected_files = {"config.json", "model.safetensors"} if not new_shards else \
        {"config.json", "model.safetensors.index.json"} | set(json.loads(
            (out / "model.safetensors.index.json").read_text())["weight_map"].values())
    assert set(names) == expected_files


def test_resaving_sharded_alternates_shard_names_and_keeps_one_layout(tmp_path):
    tiny(0).save_pretrained(tmp_path, max_shard_size="3KB")
    first = set(os.listdir(tmp_path))
    tiny(1).save_pretrained(tmp_path, max_shard_size="3KB")
    second = set(os.listdir(tmp_path))
    assert not (first & second) - {"config.json", "model.safetensors.index.json"}
    tiny(1).save_pretrained(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors"]
    assert same(loaded(tmp_path), weights(tiny(1)))


def test_an_unchanged_config_is_not_rewritten(tmp_path):
    tiny(0).save_pretrained(tmp_path)
    stamp = os.stat(tmp_path / "config.json").st_ino
    tiny(1).save_pretrained(tmp_path)
    assert os.stat(tmp_path / "config.json").st_ino == stamp


# ------------------------------------------------------------------- hostile indexes
@pytest.fixture
def sharded(tmp_path):
    """A sharded model directory and, beside it, a valid safetensors file outside it."""
    model_dir = tmp_path / "model"
    tiny(0).save_pretrained(model_dir, max_shard_size="3KB")
    outside = tmp_path / "outside"
    outside.mkdir()
    save_tensors(tiny(5).state_dict(), outside / "x.safetensors")
    return model_dir


def _rewrite_index(model_dir, edit):
    path = model_dir / "model.safetensors.index.json"
    index = json.loads(path.read_text())
    path.write_text(json.dumps(edit(index)))


HOSTILE_INDEXES = {
    "parent directory": (lambda i: _point_all(i, "../outside/x.safetensors"), "inside"),
    "absolute path": (lambda i: _point_all(i, "/etc/passwd"), "inside"),
    "dot-dot in the middle": (lambda i: _point_all(i, "a/../../outside/x.safetensors"),
                              "inside"),
    "empty name": (lambda i: _point_all(i, ""), "inside"),
    "name not a string": (lambda i: _point_all(i, 3), "inside"),
    "weight_map a list": (lambda i: {**i, "weight_map": list(i["weight_map"])}, "weight_map"),
    "no weight_map": (lambda i: {"metadata": {}}, "weight_map"),
    "index a list": (lambda i: [i], "weight_map"),
    "tensor in the wrong shard": (lambda i: _swap_first_two(i), "the index"),
    "tensor left out of the index": (lambda i: _drop_one(i), "does not list it"),
}


def _point_all(index, target):
    return {**index, "weight_map": {k: target for k in index["weight_map"]}}


def _swap_first_two(index):
    wm = dict(index["weight_map"])
    files = sorted(set(wm.values()))
    first = next(k for k, v in wm.items() if v == files[0])
    wm[first] = files[1]
    return {**index, "weight_map": wm}


def _drop_one(index):
    wm = dict(index["weight_map"])
    wm.pop("model.norm.weight")
    return {**index, "weight_map": wm}


@pytest.mark.parametrize("edit,words", HOSTILE_INDEXES.values(), ids=HOSTILE_INDEXES.keys())
def test_a_hostile_index_is_refused(sharded, edit, words):
    _rewrite_index(sharded, edit)
    with pytest.raises(CheckpointError) as err:
        AutoModelForCausalLM.from_pretrained(sharded)
    msg = str(err.value)
    assert words in msg and "model.safetensors.index.json" in msg, msg


def test_an_index_that_is_not_json_names_itself(sharded):
    (sharded / "model.safetensors.index.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(CheckpointError, match=r"model.safetensors.index.json: not valid JSON"):
        AutoModelForCausalLM.from_pretrained(sharded)


def test_a_tensor_in_two_shards_is_refused(sharded):
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    header = read_header(sharded / files[0])
    name = next(iter(header.tensors))
    extra = {name: genesis.zeros(*header.tensors[name].shape)}
    other = read_header(sharded / files[1])
    both = {n: load_tensor(sharded / files[1], other, n) for n in other.tensors} | extra
    save_tensors(both, sharded / files[1])
    with pytest.raises(CheckpointError, match=rf"tensor '{name}' is in two files"):
        AutoModelForCausalLM.from_pretrained(sharded)


# ---------------------------------------------------------------- corrupt shards
@pytest.fixture
def single(tmp_path):
    tiny(0).save_pretrained(tmp_path)
    return tmp_path


def _patch_header(path, edit):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    edit(header)
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + raw[8 + n:])


def _entries(header):
    return sorted((k for k in header if k != "__metadata__"),
                  key=lambda k: header[k]["data_offsets"])


def _alias_two(header):
    """Point a tensor at the bytes of another of the same size (they would load silently)."""
    by_size = {}
    for name in _entries(header):
        begin, end = header[name]["data_offsets"]
        if end - begin in by_size:
            header[name]["data_offsets"] = header[by_size[end - begin]]["data_offsets"]
            return
        by_size[end - begin] = name


CORRUPT_SHARDS = {
    "not a safetensors file": (lambda p: p.write_text("hello, I am a README\n" * 50),
                               "not a safetensors file"),
    "empty": (lambda p: p.write_bytes(b""), "too short"),
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[:-100]), "out of range"),
    "entry without shape": (lambda p: _patch_header(
        p, lambda h: h["model.norm.weight"].pop("shape")), "has no shape field"),
    "negative offsets": (lambda p: _patch_header(p, lambda h: h[_entries(h)[1]].update(
        data_offsets=[-h[_entries(h)[1]]["data_offsets"][1], 0])), "invalid data_offsets"),
    "overlapping offsets": (lambda p: _patch_header(p, _alias_two), "overlap"),
}


@pytest.mark.parametrize("corrupt,words", CORRUPT_SHARDS.values(), ids=CORRUPT_SHARDS.keys())
def test_a_corrupt_weights_file_is_refused_naming_it(single, corrupt, words):
    corrupt(single / "model.safetensors")
    with pytest.raises(CheckpointError) as err:
        AutoModelForCausalLM.from_pretrained(single)
    msg = str(err.value)
    assert "model.safetensors" in msg and words in msg, msg


# ------------------------------------------------------------------ hostile configs
HOSTILE_CONFIGS = {
    "zero key/value heads": ({"num_key_value_heads": 0}, "num_key_value_heads"),
    "zero attention heads": ({"num_attention_heads": 0}, "num_attention_heads"),
    "negative hidden size": ({"hidden_size": -16}, "hidden_size"),
    "layers as a string": ({"num_hidden_layers": "2"}, "num_hidden_layers"),
    "nan epsilon": ({"rms_norm_eps": float("nan")}, "rms_norm_eps"),
    "zero rope theta": ({"rope_parameters": {"rope_theta": 0, "rope_type": "default"}},
                        "rope_theta"),
    "head_dim zero": ({"head_dim": 0}, "head_dim"),
    "unknown model type": ({"model_type": "llama9"}, "model_type"),
    "dtype not a float dtype": ({"dtype": "save", "torch_dtype": "save"}, "dtype"),
    "dtype an integer dtype": ({"dtype": "int64", "torch_dtype": "int64"}, "dtype"),
    "rope parameters a number": ({"rope_parameters": 5}, "config.json"),
}


@pytest.mark.parametrize("change,field", HOSTILE_CONFIGS.values(), ids=HOSTILE_CONFIGS.keys())
def test_a_hostile_config_names_the_file_and_field(single, change, field):
    config = json.loads((single / "config.json").read_text())
    (single / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ValueError) as err:
        AutoModelForCausalLM.from_pretrained(single)
    msg = str(err.value)
    assert "config.json" in msg and field in msg, msg


def test_moe_configs_are_checked_too():
    with pytest.raises(ValueError, match="decoder_sparse_step"):
        Qwen3MoeConfig(**CONFIG, decoder_sparse_step=0)
    with pytest.raises(ValueError, match=r"num_experts_per_tok \(9\) exceeds num_experts"):
        Qwen3MoeConfig(**CONFIG, num_experts=4, num_experts_per_tok=9)


@pytest.mark.parametrize("content,words", [
    ("[1, 2, 3]", "must be a JSON object, got a list"),
    ('"qwen3"', "must be a JSON object, got a str"),
    (b"\xff\xfe{}", "not valid JSON"),
])
def test_a_config_that_is_not_an_object(single, content, words):
    path = single / "config.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError) as err:
        AutoModelForCausalLM.from_pretrained(single)
    assert str(path) in str(err.value) and words in str(err.value), str(err.value)


def test_a_model_path_that_is_a_file(single):
    with pytest.raises(NotADirectoryError, match=r"config.json' is a file, not a model dir"):
        AutoModelForCausalLM.from_pretrained(single / "config.json")
