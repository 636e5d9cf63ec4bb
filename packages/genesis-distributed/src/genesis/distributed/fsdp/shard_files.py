"""The files of a sharded checkpoint: one safetensors file a rank, and ``index.json``.

Every rank writes the rows it owns of each sharded tensor (and rank 0 the replicated
tensors, whole) to ``rank-0000r-of-0000w.safetensors``; rank 0 then writes ``index.json``,
which names, for every tensor, its dtype, whole shape and the *pieces* it was cut into (file
and global rows). A reader of any world size finds there which rows of which files it needs.
Files are written beside their final name, flushed to disk and renamed, so a crash never
leaves a half-written file under a real name; ``index.json`` comes last, so a directory
with an index holds a whole checkpoint. Nothing is unpickled: tensors are safetensors,
the rest JSON, and both are checked against each other before use.
"""

from __future__ import annotations

import json
import os

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

import genesis

INDEX = "index.json"
FORMAT = "genesis.distributed.fsdp sharded checkpoint"
VERSION = 1


def rank_file(rank: int, world: int) -> str:
    """The file name of rank ``rank``'s tensors in a world of ``world``."""
    return f"rank-{rank:05d}-of-{world:05d}.safetensors"


def to_torch(t) -> torch.Tensor:
    """A CPU torch tensor with ``t``'s values (shares memory for a CPU genesis tensor)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return torch.from_dlpack(t.contiguous())


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # (a platform without directory descriptors)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_atomically(tmp: str, path: str) -> None:
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path) or ".")


def write_tensors(path: str, tensors: dict[str, torch.Tensor], metadata: dict | None = None
                  ) -> None:
    """Write ``tensors`` as a safetensors file at ``path``, atomically."""
    tmp = f"{path}.tmp-{os.getpid()}"
    seen, own = set(), {}
    for key, value in tensors.items():  # tied parameters: safetensors wants one copy each
        value = value.contiguous()
        own[key] = value.clone() if value.data_ptr() in seen else value
        seen.add(value.data_ptr())
    try:
        save_file(own, tmp, metadata=metadata)
        _replace_atomically(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json(path: str, obj) -> None:
    """Write ``obj`` as JSON at ``path``, atomically."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
        _replace_atomically(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def read_index(directory: str) -> dict:
    """The checked ``index.json`` of a sharded checkpoint directory."""
    path = os.path.join(directory, INDEX)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{directory!r} is not a sharded checkpoint: it has no {INDEX} "
                                "(an interrupted save leaves none)")
    try:
        with open(path) as f:
            index = json.load(f)
    except (OSError, ValueError) as exc:
        raise ValueError(f"sharded checkpoint index {path} is unreadable: {exc}") from exc
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise ValueError(f"{path} is not a genesis sharded checkpoint index (format "
                         f"{index.get('format') if isinstance(index, dict) else None!r})")
    if index.get("version") != VERSION:
        raise ValueError(f"{path} has version {index.get('version')!r}; this genesis reads "
                         f"version {VERSION}")
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
    """Reads rows of the tensors of a checked index, opening each file once."""

    def __init__(self, directory: str, index: dict) -> None:
        self.directory = directory
        self.index = index
        self._open: dict[str, object] = {}

    def _file(self, name: str):
        handle = self._open.get(name)
        if handle is None:
            path = os.path.join(self.directory, name)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"sharded checkpoint file {path} is missing (listed in "
                                        f"{os.path.join(self.directory, INDEX)})")
            try:
                handle = safe_open(path, framework="pt")
            except (SafetensorError, OSError) as exc:
                raise ValueError(f"sharded checkpoint file {path} is corrupt (not a readable "
                                 f"safetensors file): {exc}") from exc
            self._open[name] = handle
        return handle

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
            out[a - first:b - first] = self._slice(piece["file"], key, lo, hi, a, b, dtype,
                                                   row_shape)
            covered += b - a
        if covered != stop - first:
            raise ValueError(f"sharded checkpoint in {self.directory!r}: the pieces of {key!r} "
                             f"do not cover rows [{first}, {stop})")
        return out

    def _slice(self, name, key, lo, hi, a, b, dtype, row_shape) -> torch.Tensor:
        handle = self._file(name)
        path = os.path.join(self.directory, name)
        try:
            piece = handle.get_slice(key)
            got_shape, got_dtype = list(piece.get_shape()), piece.get_dtype()
        except (SafetensorError, KeyError) as exc:
            raise ValueError(f"sharded checkpoint file {path} has no tensor {key!r} ({exc})"
                             ) from exc
        if tuple(got_shape) != (hi - lo, *row_shape):
            raise ValueError(f"sharded checkpoint file {path}: {key!r} has shape {got_shape}, "
                             f"the index says {[hi - lo, *row_shape]}")
        values = piece[a - lo:b - lo]
        if values.dtype is not dtype:
            raise ValueError(f"sharded checkpoint file {path}: {key!r} is {got_dtype}, the "
                             f"index says {dtype}")
        return values.reshape(b - a, *row_shape)
