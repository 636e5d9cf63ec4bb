"""The files of a sharded checkpoint: one safetensors file a rank, and ``index.json``.

Every rank writes the rows it owns of each sharded tensor (and rank 0 the replicated
tensors, whole) to ``rank-0000r-of-0000w.safetensors``; rank 0 then writes ``index.json``,
which names, for every tensor, its dtype, whole shape and the *pieces* it was cut into (file
and global rows). A reader of any world size finds there which rows of which files it needs.

Files are written with ``genesis.atomic_write`` (beside their final name, flushed, renamed;
a killed writer's temporary is removed by the next save), and ``index.json`` comes last, so
a directory with an index holds a whole checkpoint; one without (or, written by something
else, with a partial one) is what an interrupted save left (``IncompleteCheckpointError``).
A save into a directory whose index already names the plain file names writes under new
names (``rank-...-<tag>.safetensors``): the previous checkpoint stays whole and loadable
until the new index replaces the old one, and only then are the files it no longer names
removed. Files are read through genesis-core's validated safetensors reader, and the index
may only name files inside its directory. Nothing is unpickled: tensors are safetensors,
the rest JSON.
"""

from __future__ import annotations

import json
import os
import re
import secrets

import numpy as np
import torch

import genesis
from genesis.atomic_write import atomic_write, remove_durably
from genesis.safetensors_file import (
    CheckpointError,
    is_inside,
    map_array,
    read_header,
    write_safetensors,
)

INDEX = "index.json"
FORMAT = "genesis.distributed.fsdp sharded checkpoint"
VERSION = 1
_RANK_FILE = re.compile(r"rank-\d{5}-of-\d{5}(-[0-9a-f]{8})?\.safetensors")


class IncompleteCheckpointError(CheckpointError):
    """A sharded checkpoint directory that cannot be loaded because it is not whole.

    Attributes:
        interrupted: True for what a save stopped before its index leaves (no ``index.json``,
            or one that is not complete JSON): the directory never held a checkpoint. False
            for a finished checkpoint that has lost a file (a rank file missing, truncated
            or not holding what the index says).
    """

    def __init__(self, message: str, interrupted: bool) -> None:
        super().__init__(message)
        self.interrupted = interrupted


def rank_file(rank: int, world: int, tag: str | None = None) -> str:
    """The file name of rank ``rank``'s tensors in a world of ``world`` (``tag``: the
    suffix of a save that must not overwrite the files the current index names)."""
    suffix = f"-{tag}" if tag else ""
    return f"rank-{rank:05d}-of-{world:05d}{suffix}.safetensors"


def new_tag(directory: str, world: int) -> str | None:
    """The file-name tag for a new save of ``world`` ranks into ``directory``: None (plain
    names) unless the directory's current index uses some of the plain names."""
    try:
        with open(os.path.join(directory, INDEX)) as f:
            in_use = set(json.load(f).get("files", []))
    except (OSError, ValueError, AttributeError, TypeError):
        return None  # no index (or a broken one, through which nothing loads)
    plain = {rank_file(r, world) for r in range(world)}
    return secrets.token_hex(4) if plain & in_use else None


def remove_unlisted(directory: str, files: list[str]) -> None:
    """Remove the rank files in ``directory`` that the new index (listing ``files``) does
    not name: the previous save's, and those of saves killed before their index."""
    keep = set(files)
    for name in os.listdir(directory):
        if _RANK_FILE.fullmatch(name) and name not in keep:
            remove_durably(os.path.join(directory, name))


def to_torch(t) -> torch.Tensor:
    """A CPU torch tensor with ``t``'s values (shares memory for a CPU genesis tensor)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return torch.from_dlpack(t.contiguous())


def write_tensors(path: str, tensors: dict[str, torch.Tensor], metadata: dict | None = None
                  ) -> None:
    """Write ``tensors`` (CPU torch tensors) as a safetensors file at ``path``, atomically."""
    values = {key: genesis.from_dlpack(value.contiguous()) for key, value in tensors.items()}
    with atomic_write(path) as tmp, open(tmp, "wb") as fh:
        write_safetensors(fh, values, metadata)


def write_json(path: str, obj) -> None:
    """Write ``obj`` as JSON at ``path``, atomically."""
    with atomic_write(path) as tmp, open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)


def read_index(directory: str) -> dict:
    """The checked ``index.json`` of a sharded checkpoint directory."""
    path = os.path.join(directory, INDEX)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{directory!r} is not a sharded checkpoint: it has no {INDEX} "
                                "(an interrupted save leaves none)")
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as exc:
        raise ValueError(f"sharded checkpoint index {path} is unreadable: {exc}") from exc
    try:
        index = json.loads(text)
    except ValueError as exc:  # (a JSON or UTF-8 decoding error)
        raise IncompleteCheckpointError(
            f"sharded checkpoint index {path} is not complete JSON (written in part?): {exc}",
            interrupted=True) from exc
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise ValueError(f"{path} is not a genesis sharded checkpoint index (format "
                         f"{index.get('format') if isinstance(index, dict) else None!r})")
    if index.get("version") != VERSION:
        raise ValueError(f"{path} has version {index.get('version')!r}; this genesis reads "
                         f"version {VERSION}")
    files = index.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) and is_inside(f)
                                              for f in files):
        raise ValueError(f"{path}: 'files' must list file names inside {directory!r} "
                         f"(relative, without '..'), got {files!r}")
    tensors = index.get("tensors")
    if not isinstance(tensors, dict):
        raise ValueError(f"{path}: 'tensors' must be an object")
    for key, entry in tensors.items():
        _check_entry(path, key, entry, index.get("files", []))
    return index


def _check_entry(path: str, key: str, entry, files: list) -> None:
    bad = None
    if not isinstance(entry, dict) or not isinstance(entry.get("shape"), list):
        bad = "no shape"
    elif not hasattr(genesis, str(entry.get("dtype"))):
        bad = f"unknown dtype {entry.get('dtype')!r}"
    else:
        rows = entry["shape"][0] if entry["shape"] else 1
        for piece in entry.get("pieces", []):
            first, stop = piece.get("rows", (None, None))
            if piece.get("file") not in files or not (
                    isinstance(first, int) and isinstance(stop, int) and
                    0 <= first < stop <= rows):
                bad = f"bad piece {piece!r}"
    if bad is not None:
        raise ValueError(f"{path}: entry {key!r} is malformed ({bad})")


class ShardReader:
    """Reads rows of the tensors of a checked index, each file's header read (and validated)
    once."""

    def __init__(self, directory: str, index: dict) -> None:
        self.directory = directory
        self.index = index
        self._headers: dict[str, object] = {}

    def _header(self, name: str):
        header = self._headers.get(name)
        if header is None:
            path = os.path.join(self.directory, name)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"sharded checkpoint file {path} is missing (listed in "
                                        f"{os.path.join(self.directory, INDEX)})")
            try:
                header = read_header(path)
            except (CheckpointError, OSError) as exc:
                raise ValueError(f"sharded checkpoint file {path} is corrupt (not a readable "
                                 f"safetensors file): {exc}") from exc
            self._headers[name] = header
        return header

    def rows(self, key: str, first: int, stop: int) -> torch.Tensor:
        """Global rows ``[first, stop)`` of tensor ``key`` (a 0-d tensor is one row),
        assembled from its pieces; shaped ``(stop - first, *shape[1:])``."""
        entry = self.index["tensors"].get(key)
        if entry is None:
            raise KeyError(f"the sharded checkpoint in {self.directory!r} has no tensor "
                           f"{key!r}")
        shape = entry["shape"]
        row_shape = tuple(shape[1:])
        dtype = getattr(torch, entry["dtype"])
        out = torch.zeros((stop - first, *row_shape), dtype=dtype)
        covered = 0
        for piece in entry["pieces"]:
            lo, hi = piece["rows"]
            a, b = max(lo, first), min(hi, stop)
            if a >= b:
                continue
            out[a - first:b - first] = self._slice(key, piece, a, b)
            covered += b - a
        if covered != stop - first:
            raise ValueError(f"sharded checkpoint in {self.directory!r}: the pieces of {key!r} "
                             f"do not cover rows [{first}, {stop})")
        return out

    def check_piece(self, key: str, piece: dict):
        """The header of the file holding ``piece`` (an entry of ``key``'s ``pieces``),
        checked to hold the piece's rows of ``key`` with the index's shape and dtype.

        Raises:
            FileNotFoundError: the file is missing (named).
            ValueError: the file is corrupt or holds something else (named).
        """
        entry = self.index["tensors"][key]
        (lo, hi), name = piece["rows"], piece["file"]
        header = self._header(name)
        path = os.path.join(self.directory, name)
        got = header.tensors.get(key)
        if got is None:
            raise ValueError(f"sharded checkpoint file {path} has no tensor {key!r}")
        want = (hi - lo, *entry["shape"][1:])
        if got.shape != want:
            raise ValueError(f"sharded checkpoint file {path}: {key!r} has shape "
                             f"{list(got.shape)}, the index says {list(want)}")
        if got.dtype.name != entry["dtype"]:
            raise ValueError(f"sharded checkpoint file {path}: {key!r} is {got.dtype.name}, "
                             f"the index says {entry['dtype']}")
        return header

    def _slice(self, key, piece, a, b) -> torch.Tensor:
        """Global rows ``[a, b)`` of ``key``, from ``piece`` (which holds them)."""
        header = self.check_piece(key, piece)
        path, lo = os.path.join(self.directory, piece["file"]), piece["rows"][0]
        rows = np.asarray(map_array(path, header, key)[a - lo:b - lo])  # (b - a, *row_shape)
        values = torch.from_numpy(rows.astype(rows.dtype.newbyteorder("="), copy=False))
        bf16 = self.index["tensors"][key]["dtype"] == "bfloat16"
        return values.view(torch.bfloat16) if bf16 else values
