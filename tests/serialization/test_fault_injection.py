"""Faults against genesis.save / genesis.load and the one safetensors reader under them.

A writer SIGKILLed at chosen points of a save, a hostile value in every field of a header,
truncations and files of other formats: the old file always loads, every bad file is refused
with a ``CheckpointError`` naming the file (and tensor) and what is wrong, and no tensor ever
reads bytes outside its own range.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
from kill_writer import block_after, block_at, kill_while_blocked, needs_fork

import genesis
import genesis.serialization as ser
from genesis.atomic_write import atomic_write, remove_stale_temporaries
from genesis.safetensors_file import CheckpointError, read_header

OLD = {"version": 1, "w": genesis.arange(6, dtype=genesis.float32).reshape(2, 3)}


def _temporaries(folder):
    return sorted(n for n in os.listdir(folder) if n.endswith(".tmp"))


# ------------------------------------------------------------ killed writers
KILL_POINTS = {
    # the temporary holds half of the new file when the writer dies
    "mid-write": block_after(ser, "write_safetensors", 0.5),
    # the new file is complete but not yet flushed to the disk
    "before fsync": block_at(os, "fsync", 1),
    # flushed, not yet renamed over the old file
    "before rename": block_at(os, "replace", 1),
}


@needs_fork
@pytest.mark.parametrize("hook", KILL_POINTS.values(), ids=KILL_POINTS.keys())
def test_a_killed_save_leaves_the_old_checkpoint_loadable(tmp_path, hook):
    path = tmp_path / "ckpt.safetensors"
    genesis.save(OLD, path)
    before = path.read_bytes()
    new = {"version": 2, "w": genesis.zeros(1000, 100)}
    kill_while_blocked(lambda: genesis.save(new, path), hook)
    assert path.read_bytes() == before
    back = genesis.load(path)
    assert back["version"] == 1 and back["w"].tolist() == OLD["w"].tolist()
    stale = _temporaries(tmp_path)
    assert len(stale) == 1 and stale[0].startswith(".ckpt.safetensors.")  # the dead writer's
    genesis.save({"version": 3}, path)  # the next save into the folder clears it
    assert os.listdir(tmp_path) == ["ckpt.safetensors"]
    assert genesis.load(path) == {"version": 3}


def test_stale_temporaries_of_live_writers_are_kept(tmp_path):
    with atomic_write(tmp_path / "a.bin") as mine:  # this process is alive: kept
        assert remove_stale_temporaries(tmp_path) == []
        assert os.path.exists(mine)
    assert (tmp_path / "a.bin").exists() and _temporaries(tmp_path) == []
    foreign = tmp_path / ".b.bin.00000000-1-0123abcd.tmp"  # another host's name: kept
    foreign.write_bytes(b"x")
    assert remove_stale_temporaries(tmp_path) == [] and foreign.exists()


def test_an_exception_in_the_writer_removes_the_temporary(tmp_path):
    with pytest.raises(RuntimeError, match="disk on fire"), atomic_write(tmp_path / "f") as tmp:
        open(tmp, "wb").write(b"half")
        raise RuntimeError("disk on fire")
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- hostile headers
def _file(path, header: dict, data: bytes):
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + data)
    return path


def _two_tensors():
    """A valid header for tensors a (F32 [2]) and b (I64 [1]), and its data bytes."""
    header = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
              "b": {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]}}
    return header, np.array([1.5, 2.5], "<f4").tobytes() + np.array([7], "<i8").tobytes()


# (field of tensor "b", hostile value, words the error must contain)
HOSTILE_FIELDS = [
    ("dtype", "F8_E5M2", "unknown dtype"), ("dtype", "f32", "unknown dtype"),
    ("dtype", 5, "unknown dtype"), ("dtype", None, "unknown dtype"),
    ("shape", [-1], "invalid shape"), ("shape", [1.0], "invalid shape"),
    ("shape", "1", "invalid shape"), ("shape", [True], "invalid shape"),
    ("shape", [2**62, 2**62], "wrong byte count"), ("shape", [2], "wrong byte count"),
    ("data_offsets", [-8, 0], "invalid data_offsets"),  # would read header bytes
    ("data_offsets", [0, 8], "overlap"),  # a's bytes, read as b's
    ("data_offsets", [4, 12], "overlap"), ("data_offsets", [8, 24], "out of range"),
    ("data_offsets", [16, 8], "invalid data_offsets"), ("data_offsets", [8], "invalid"),
    ("data_offsets", [8, 16, 24], "invalid"), ("data_offsets", "8,16", "invalid"),
    ("data_offsets", [8.0, 16.0], "invalid"), ("data_offsets", [2**64, 2**64 + 8], "range"),
]


@pytest.mark.parametrize("field,value,words", HOSTILE_FIELDS,
                         ids=[f"{f}={v!r}" for f, v, _ in HOSTILE_FIELDS])
def test_every_header_field_is_checked(tmp_path, field, value, words):
    header, data = _two_tensors()
    header["b"][field] = value
    path = _file(tmp_path / "hostile.safetensors", header, data)
    for load in (genesis.load, read_header):
        with pytest.raises(CheckpointError) as err:
            load(path)
        msg = str(err.value)
        assert "hostile.safetensors" in msg and words in msg and "'b'" in msg, msg


@pytest.mark.parametrize("field", ["dtype", "shape", "data_offsets"])
def test_a_missing_field_is_named(tmp_path, field):
    header, data = _two_tensors()
    del header["b"][field]
    path = _file(tmp_path / "x.safetensors", header, data)
    with pytest.raises(CheckpointError, match=rf"x.safetensors: tensor 'b' has no {field}"):
        genesis.load(path)


def test_the_valid_two_tensor_file_loads(tmp_path):
    header, data = _two_tensors()
    back = genesis.load(_file(tmp_path / "ok.safetensors", header, data))
    assert back["a"].tolist() == [1.5, 2.5] and back["b"].tolist() == [7]


# ------------------------------------------------------- truncated and foreign files
def test_a_truncated_checkpoint_is_called_truncated_not_a_pickle(tmp_path):
    """A header length whose low byte is 0x80 (pickle's first byte) must not confuse it."""
    for width in range(0, 400, 4):
        genesis.save({"k" * width: genesis.ones(64)}, tmp_path / "x.st")
        raw = (tmp_path / "x.st").read_bytes()
        if raw[0] == 0x80:
            break
    else:
        pytest.fail("no header length hit 0x80 in its low byte")
    for cut in (9, 20, len(raw) // 2, len(raw) - 1):
        (tmp_path / "cut.st").write_bytes(raw[:cut])
        with pytest.raises(CheckpointError) as err:
            genesis.load(tmp_path / "cut.st")
        msg = str(err.value)
        assert "cut.st" in msg and "truncated" in msg and "pickle" not in msg, msg


@pytest.mark.parametrize("content", [
    b"just some text, not a checkpoint at all\n" * 10,
    bytes(range(256)) * 4,
    b"\xff" * 64,
], ids=["text", "binary", "all 0xff"])
def test_a_file_of_another_format_is_refused_without_a_huge_allocation(tmp_path, content):
    path = tmp_path / "notes.safetensors"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=r"notes.safetensors: not a safetensors file"):
        genesis.load(path)
    with pytest.raises(CheckpointError, match=r"notes.safetensors: not a safetensors file"):
        read_header(path)
