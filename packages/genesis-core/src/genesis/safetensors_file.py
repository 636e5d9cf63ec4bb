"""The safetensors file format: one validated reader and one writer for every genesis loader.

A safetensors file (https://github.com/huggingface/safetensors) is:

    8 bytes    little-endian u64 N, the length of the header
    N bytes    JSON header: {"__metadata__": {str: str}, "<name>": {"dtype": "F32",
               "shape": [2, 3], "data_offsets": [begin, end]}, ...}, padded with spaces
    the rest   raw little-endian tensor bytes; offsets count from the end of the header

``read_header`` checks everything about a file before a byte of tensor data is used: the
header length against the file size, the JSON, each entry's fields, dtype and shape, and
that the entries' byte ranges are in bounds, do not overlap and cover the data area exactly
(so no tensor can read header bytes or another tensor's bytes). Every error is a
``CheckpointError`` naming the file and the tensor. ``genesis.load`` and ``from_pretrained``
both read through it; ``write_safetensors`` writes what it accepts.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass
from typing import Any, BinaryIO, NamedTuple

import numpy as np

from genesis import dtypes as D
from genesis.creation import from_numpy

__all__ = ["CheckpointError", "TensorEntry", "SafetensorsHeader", "read_header", "read_array",
           "map_array", "array_to_tensor", "tensor_to_array", "write_safetensors", "is_inside"]

# safetensors dtype code <-> genesis dtype; bf16 travels as raw 16-bit words.
CODE_OF = {
    D.bool_: "BOOL", D.uint8: "U8", D.int8: "I8", D.int16: "I16", D.int32: "I32",
    D.int64: "I64", D.float16: "F16", D.bfloat16: "BF16", D.float32: "F32", D.float64: "F64",
}
DTYPE_OF = {code: dt for dt, code in CODE_OF.items()}
_NUMPY_OF = {
    D.bool_: np.dtype("?"), D.uint8: np.dtype("u1"), D.int8: np.dtype("i1"),
    D.int16: np.dtype("<i2"), D.int32: np.dtype("<i4"), D.int64: np.dtype("<i8"),
    D.float16: np.dtype("<f2"), D.bfloat16: np.dtype("<i2"), D.float32: np.dtype("<f4"),
    D.float64: np.dtype("<f8"),
}
_MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit on the header size
_ENTRY_FIELDS = ("dtype", "shape", "data_offsets")


class CheckpointError(ValueError):
    """A checkpoint file is truncated, malformed or not a safetensors file."""


class TensorEntry(NamedTuple):
    """One tensor of a safetensors header: offsets count from the start of the data area."""

    dtype: Any  # a genesis dtype
    shape: tuple
    begin: int
    end: int


@dataclass
class SafetensorsHeader:
    """A validated header.

    Attributes:
        where: the file's name, for messages.
        metadata: the ``__metadata__`` strings (None when the file has none).
        tensors: ``{name: TensorEntry}`` in header order.
        data_start: the data area's byte position in the file.
    """

    where: str
    metadata: dict | None
    tensors: dict
    data_start: int


def read_header(f: str | os.PathLike | BinaryIO) -> SafetensorsHeader:
    """Read and validate the header of a safetensors file (a path or a seekable file object).

    Args:
        f: the file; a file object is read from its current position.

    Returns:
        A ``SafetensorsHeader`` whose every entry is known to be in bounds.

    Raises:
        CheckpointError: naming the file (and tensor) and what is wrong with it.

    Example::

        >>> header = read_header("model.safetensors")
        >>> header.tensors["lm_head.weight"].shape
        (151936, 896)
    """
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return _read_header(fh, os.fspath(f))
    return _read_header(f, getattr(f, "name", "<file object>"))


def _read_header(fh: BinaryIO, where: str) -> SafetensorsHeader:
    start = fh.tell()
    size = fh.seek(0, os.SEEK_END) - start
    fh.seek(start)
    if size < 8:
        raise CheckpointError(f"{where}: file is {size} bytes, too short to be a safetensors "
                              "file (truncated?)")
    first = fh.read(9)
    n = int.from_bytes(first[:8], "little")
    if n > size - 8:
        if first[8:9] == b"{":  # the header starts: a safetensors file cut short
            raise CheckpointError(f"{where}: header length {n} goes past the end of the file "
                                  f"({size} bytes): the file is truncated")
        if first[:4] == b"PK\x03\x04" or first[:1] == b"\x80":
            raise CheckpointError(f"{where}: this is a zip/pickle file (torch.save's format?), "
                                  "not a safetensors file; genesis never unpickles files")
        raise CheckpointError(f"{where}: not a safetensors file (its first 8 bytes give a "
                              f"header length of {n}, past the end of the {size}-byte file)")
    if n > _MAX_HEADER:
        raise CheckpointError(f"{where}: header length {n} exceeds the {_MAX_HEADER}-byte limit")
    fh.seek(start + 8)
    raw = fh.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # deep nesting: Recursion
        raise CheckpointError(f"{where}: not a safetensors file: its header is not valid JSON "
                              f"({type(exc).__name__}: {exc})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{where}: header must be a JSON object, got "
                              f"{type(header).__name__}")
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict)
                                 and all(isinstance(v, str) for v in meta.values())):
        raise CheckpointError(f"{where}: __metadata__ must map strings to strings")
    tensors = _check_entries(header, size - 8 - n, where)
    return SafetensorsHeader(where, meta, tensors, start + 8 + n)


def _check_entries(header: dict, data_size: int, where: str) -> dict:
    """Validate every tensor entry; returns ``{name: TensorEntry}``."""
    entries = {}
    for name, info in header.items():
        if not isinstance(info, dict):
            raise CheckpointError(f"{where}: tensor {name!r}: expected an object with "
                                  f"{', '.join(_ENTRY_FIELDS)}, got {info!r}")
        missing = [k for k in _ENTRY_FIELDS if k not in info]
        if missing:
            raise CheckpointError(f"{where}: tensor {name!r} has no {' or '.join(missing)} "
                                  f"field (entry: {info!r})")
        code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(code, str) or code not in DTYPE_OF:
            raise CheckpointError(f"{where}: tensor {name!r} has unknown dtype {code!r}; "
                                  f"genesis reads {sorted(DTYPE_OF)}")
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise CheckpointError(f"{where}: tensor {name!r} has an invalid shape {shape!r} "
                                  "(expected a list of non-negative integers)")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(_is_int(o) for o in offsets) or not 0 <= offsets[0] <= offsets[1]):
            raise CheckpointError(f"{where}: tensor {name!r} has invalid data_offsets "
                                  f"{offsets!r} (expected [begin, end], 0 <= begin <= end)")
        begin, end = offsets
        if end > data_size:
            raise CheckpointError(f"{where}: tensor {name!r} data_offsets [{begin}, {end}] are "
                                  f"out of range: the data area has {data_size} bytes "
                                  "(truncated file?)")
        dtype = DTYPE_OF[code]
        need = math.prod(shape) * dtype.itemsize
        if end - begin != need:
            raise CheckpointError(f"{where}: tensor {name!r} has {end - begin} bytes but shape "
                                  f"{shape} of {code} needs {need} (wrong byte count)")
        entries[name] = TensorEntry(dtype, tuple(shape), begin, end)
    covered, last = 0, None
    for name, entry in sorted(entries.items(), key=lambda e: (e[1].begin, e[1].end)):
        if entry.begin < covered:
            raise CheckpointError(f"{where}: tensors {last!r} and {name!r} overlap in the file")
        if entry.begin > covered:
            raise CheckpointError(f"{where}: {entry.begin - covered} unaccounted bytes before "
                                  f"tensor {name!r} (malformed offsets)")
        covered, last = entry.end, name
    if covered != data_size:
        raise CheckpointError(f"{where}: {data_size - covered} bytes after the last tensor; "
                              "the header does not describe the file")
    return entries


def is_inside(relative: str) -> bool:
    """Whether ``relative`` names a file below its directory: no absolute path, drive or
    ``..`` (an index of shard files may only name such paths). Symbolic links are followed
    when the file is opened: the Hugging Face cache links shards to blobs.

    Args:
        relative: a path from a checkpoint's index, relative to the checkpoint's directory.

    Returns:
        A Python bool.

    Example::

        >>> is_inside("model-00001-of-00002.safetensors"), is_inside("../x.safetensors")
        (True, False)
    """
    parts = relative.replace("\\", "/").split("/")
    return not (os.path.isabs(relative) or relative.startswith(("/", "\\"))
                or os.path.splitdrive(relative)[0] or "\0" in relative
                or any(p in ("", ".", "..") for p in parts))


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def read_array(fh: BinaryIO, header: SafetensorsHeader, name: str) -> np.ndarray:
    """A copy of tensor ``name``'s bytes as a native-order numpy array (bf16 as int16).

    Args:
        fh: the file ``header`` was read from.
        header: from ``read_header``.
        name: the tensor.

    Returns:
        The array, of the entry's shape.
    """
    entry = header.tensors[name]
    arr = np.empty(entry.shape, dtype=_NUMPY_OF[entry.dtype].newbyteorder("="))
    nbytes = entry.end - entry.begin
    if nbytes:
        fh.seek(header.data_start + entry.begin)
        got = fh.readinto(arr.reshape(-1).view(np.uint8))
        if got != nbytes:
            raise CheckpointError(f"{header.where}: tensor {name!r} is truncated ({got} of "
                                  f"{nbytes} bytes)")
        if sys.byteorder == "big" and arr.dtype.itemsize > 1:
            arr.byteswap(inplace=True)
    return arr


def map_array(path: str | os.PathLike, header: SafetensorsHeader, name: str) -> np.ndarray:
    """Tensor ``name`` of the file at ``path`` as a copy-on-write memory map (bf16 as int16).

    Pages are read when touched and the file is never written, so loading a big checkpoint
    tensor by tensor never holds a second copy of it in host memory.

    Args:
        path: the file ``header`` was read from.
        header: from ``read_header``.
        name: the tensor.

    Returns:
        A numpy array (little-endian) of the entry's shape.
    """
    entry = header.tensors[name]
    np_dtype = _NUMPY_OF[entry.dtype]
    if entry.end == entry.begin:
        return np.empty(entry.shape, dtype=np_dtype)
    return np.memmap(path, dtype=np_dtype, mode="c", offset=header.data_start + entry.begin,
                     shape=entry.shape)


def array_to_tensor(arr: np.ndarray, dtype):
    """A CPU genesis tensor of ``dtype`` from an array of ``read_array``/``map_array``.

    Args:
        arr: the array (bf16 as int16 words; any byte order).
        dtype: the entry's genesis dtype.

    Returns:
        A tensor sharing the array's memory where the byte order allows.

    Example::

        >>> t = array_to_tensor(read_array(fh, header, "w"), header.tensors["w"].dtype)
    """
    arr = np.asarray(arr)  # a memmap's plain-array view
    if not arr.dtype.isnative:  # a little-endian file on a big-endian host
        arr = arr.astype(arr.dtype.newbyteorder("="))
    t = from_numpy(arr)
    return t.view(D.bfloat16) if dtype is D.bfloat16 else t


def tensor_to_array(t) -> np.ndarray:
    """A tensor's elements as a C-contiguous little-endian numpy array (bf16 as int16).

    Args:
        t: a genesis tensor on any device (a non-contiguous view gives just its elements).

    Returns:
        The array the file stores.

    Raises:
        TypeError: the dtype has no safetensors code.

    Example::

        >>> tensor_to_array(genesis.ones(2, dtype=genesis.bfloat16)).dtype
        dtype('int16')
    """
    t = t.detach()
    if t.dtype not in CODE_OF:
        raise TypeError(f"a safetensors file cannot store dtype {t.dtype}")
    if t.device.type != "cpu":
        t = t.to("cpu")
    if t.dtype is D.bfloat16:
        t = t.view(D.int16)  # numpy has no bf16: keep the raw bits
    arr = np.ascontiguousarray(t.numpy())
    want = _NUMPY_OF[t.dtype]
    return arr if arr.dtype == want else arr.astype(want)  # byte order only (big-endian hosts)


def write_safetensors(fh: BinaryIO, tensors: dict, metadata: dict | None = None) -> None:
    """Write ``{name: tensor}`` (any device) as a safetensors file to a binary file object.

    Tensors are laid out widest element first, so each is aligned to its element size as
    safetensors' own writer does, and the header is padded to a multiple of 8 bytes.

    Args:
        fh: a writable binary file.
        tensors: names to genesis tensors.
        metadata: strings for ``__metadata__`` (e.g. ``{"format": "pt"}``).

    Example::

        >>> with open("t.safetensors", "wb") as fh:
        ...     write_safetensors(fh, {"w": genesis.ones(2, 3)}, {"format": "pt"})
    """
    payload = []
    for name, t in tensors.items():
        if name == "__metadata__" or not isinstance(name, str):
            raise ValueError(f"{name!r} cannot name a tensor in a safetensors file")
        try:
            payload.append((name, tensor_to_array(t), t))
        except TypeError as exc:
            raise TypeError(f"tensor {name!r}: {exc}") from None
    payload.sort(key=lambda item: -item[1].dtype.itemsize)
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, arr, t in payload:  # (np.ascontiguousarray makes a 0-d array 1-d)
        header[name] = {"dtype": CODE_OF[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode("utf-8")
    head += b" " * (-len(head) % 8)
    fh.write(len(head).to_bytes(8, "little"))
    fh.write(head)
    for _, arr, _ in payload:
        if arr.nbytes:
            fh.write(arr.reshape(-1).view(np.uint8).data)
