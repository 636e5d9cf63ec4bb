"""``genesis.save`` / ``genesis.load``: checkpoints as safetensors files, without pickle.

A checkpoint is ONE safetensors file (https://github.com/huggingface/safetensors):

    8 bytes    little-endian u64 N, the length of the header
    N bytes    JSON header: {"__metadata__": {...}, "<name>": {"dtype": "F32", "shape": [2, 3],
               "data_offsets": [begin, end]}, ...}, padded with spaces to a multiple of 8
    the rest   raw little-endian tensor bytes; offsets count from the end of the header

The nested Python structure around the tensors (dicts, lists, tuples, numbers, strings,
``None``) is stored as JSON in ``__metadata__["genesis"]``; every container and tensor there
is a tagged object (``{"$": "dict", "items": [[key, value], ...]}``, ``{"$": "tensor",
"name": ...}``), so keys of any hashable type and tuples come back as they went in. Loading
only parses JSON and copies bytes: no code from the file ever runs. A plain safetensors file
(e.g. from ``safetensors.torch.save_file``) loads as a flat dict of tensors.

Writes are atomic: the file is written under a temporary name in the same directory,
flushed and fsync'ed, then renamed over the target (and the directory fsync'ed), so a crash
mid-save leaves either the old file or the new one under the name, never a torn one.
"""

from __future__ import annotations

import base64
import collections
import json
import math
import os
import secrets
import sys
from typing import Any, BinaryIO

import numpy as np

from genesis import dtypes as D
from genesis.creation import from_numpy
from genesis.device import device as Device
from genesis.tensor import Tensor

# safetensors dtype code <-> genesis dtype; bf16 travels as raw 16-bit words.
_CODE_OF = {
    D.bool_: "BOOL", D.uint8: "U8", D.int8: "I8", D.int16: "I16", D.int32: "I32",
    D.int64: "I64", D.float16: "F16", D.bfloat16: "BF16", D.float32: "F32", D.float64: "F64",
}
_DTYPE_OF = {code: dt for dt, code in _CODE_OF.items()}
_NUMPY_OF = {
    D.bool_: np.dtype("?"), D.uint8: np.dtype("u1"), D.int8: np.dtype("i1"),
    D.int16: np.dtype("<i2"), D.int32: np.dtype("<i4"), D.int64: np.dtype("<i8"),
    D.float16: np.dtype("<f2"), D.bfloat16: np.dtype("<i2"), D.float32: np.dtype("<f4"),
    D.float64: np.dtype("<f8"),
}
_METADATA_KEY = "genesis"  # __metadata__ entry holding the structure JSON
_FORMAT_VERSION = 1
_MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit on the header size


class CheckpointError(ValueError):
    """A checkpoint file is truncated, malformed or not a safetensors file."""


# ---------------------------------------------------------------------------- save
def save(obj: Any, f: str | os.PathLike | BinaryIO) -> None:
    """Save a nested structure of tensors and Python values to a safetensors file.

    Args:
        obj: a tensor, or dicts/lists/tuples (nested freely) of tensors, ``int``, ``float``,
            ``bool``, ``str``, ``bytes``, ``None``, dtypes and devices — e.g. a model's
            ``state_dict()``, an optimizer's, a scheduler's, RNG states, step counters.
        f: a path (written atomically) or a writable binary file object.

    Tensors are saved by value (a non-contiguous view saves just its elements), from any
    device; one tensor object referenced twice is stored once. The file is safetensors
    whatever its name (``"model.pt"`` too); ``genesis-convert-torch`` converts torch's files.

    Example::

        >>> genesis.save({"model": model.state_dict(), "optim": opt.state_dict(),
        ...               "step": step}, "ckpt.safetensors")
    """
    tensors: dict[int, tuple[str, Any]] = {}
    names: set[str] = set()
    structure = _encode(obj, (), tensors, names)
    payload = [(name, _to_numpy(t), t) for name, t in tensors.values()]
    # Wider types first keeps every tensor aligned to its element size, as safetensors does.
    payload.sort(key=lambda item: -item[1].dtype.itemsize)
    header: dict[str, Any] = {"__metadata__": {
        "format": "pt",  # lets safetensors' own loaders read the tensors too
        _METADATA_KEY: json.dumps({"version": _FORMAT_VERSION, "root": structure},
                                  separators=(",", ":"), allow_nan=False),
    }}
    offset = 0
    for name, arr, t in payload:
        header[name] = {"dtype": _CODE_OF[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode("utf-8")
    head += b" " * (-len(head) % 8)

    def write(fh: BinaryIO) -> None:
        fh.write(len(head).to_bytes(8, "little"))
        fh.write(head)
        for _, arr, _ in payload:
            if arr.nbytes:
                fh.write(arr.reshape(-1).view(np.uint8).data)

    if isinstance(f, (str, os.PathLike)):
        _atomic_write(os.fspath(f), write)
    else:
        write(f)


def _encode(obj: Any, path: tuple, tensors: dict, names: set) -> Any:
    """``obj`` as tagged JSON; tensors are collected into ``tensors`` (id -> (name, t))."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        if math.isfinite(obj):
            return float(obj)
        return {"$": "float", "v": repr(float(obj))}  # 'nan', 'inf', '-inf'
    if isinstance(obj, Tensor):
        entry = tensors.get(id(obj))
        if entry is None:
            entry = (_unique_name(path, names), obj)
            tensors[id(obj)] = entry
        return {"$": "tensor", "name": entry[0], "device": str(obj.device),
                "requires_grad": bool(obj.requires_grad)}
    if isinstance(obj, dict):
        tag = "odict" if isinstance(obj, collections.OrderedDict) else "dict"
        return {"$": tag, "items": [[_encode_key(k, path), _encode(v, (*path, k), tensors, names)]
                                    for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        items = [_encode(v, (*path, i), tensors, names) for i, v in enumerate(obj)]
        return {"$": "tuple" if isinstance(obj, tuple) else "list", "v": items}
    if isinstance(obj, (bytes, bytearray)):
        return {"$": "bytes", "v": base64.b64encode(bytes(obj)).decode("ascii")}
    if isinstance(obj, D.DType):
        return {"$": "dtype", "v": obj.name}
    if isinstance(obj, Device):
        return {"$": "device", "v": str(obj)}
    where = ".".join(map(str, path)) or "<root>"
    raise TypeError(f"genesis.save cannot store a {type(obj).__module__}.{type(obj).__name__} "
                    f"(at {where}); supported: tensors, dict, list, tuple, int, float, bool, "
                    "str, bytes, None, dtype, device")


def _encode_key(key: Any, path: tuple) -> Any:
    parts = key if isinstance(key, tuple) else (key,)
    if any(isinstance(k, Tensor) for k in parts):
        raise TypeError(f"genesis.save cannot store a tensor inside a dict key "
                        f"(at {'.'.join(map(str, path)) or '<root>'})")
    return _encode(key, path, {}, set())


def _unique_name(path: tuple, names: set) -> str:
    base = ".".join(map(str, path)) or "tensor"
    name, n = base, 1
    while name in names or name == "__metadata__":
        name, n = f"{base}#{n}", n + 1
    names.add(name)
    return name


def _to_numpy(t) -> np.ndarray:
    """The tensor's elements as a C-contiguous little-endian numpy array (bf16 as int16)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.to("cpu")
    if t.dtype is D.bfloat16:
        t = t.view(D.int16)  # numpy has no bf16: keep the raw bits
    arr = np.ascontiguousarray(t.numpy())
    want = _NUMPY_OF[t.dtype]
    if arr.dtype != want:
        arr = arr.astype(want)  # byte order only (big-endian hosts)
    return arr


def _atomic_write(path: str, write) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
    # os.open applies the umask, so the file gets the permissions a plain open() would.
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                     0o666)
    except FileNotFoundError:  # name the missing directory, not our hidden temporary file
        raise FileNotFoundError(f"genesis.save: cannot write {path!r}: the directory "
                                f"{directory!r} does not exist") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)


def _fsync_dir(directory: str) -> None:
    """Make the rename durable (POSIX); Windows cannot open directories and needs none."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------- load
def load(f: str | os.PathLike | BinaryIO, map_location=None, *, weights_only: bool = True):
    """Load what ``genesis.save`` wrote (or a plain safetensors file).

    Args:
        f: a path or a readable, seekable binary file object.
        map_location: where tensors go: ``None`` (the device each was saved from), a
            device or device string (all of them), or a dict mapping saved device strings
            to new ones (``{"cuda:1": "cuda:0"}``; devices not in it stay).
        weights_only: accepted for PyTorch compatibility; loading never runs code anyway.

    Returns:
        The saved structure with its tensors; a flat ``{name: tensor}`` dict for a
        safetensors file written by another library.

    Raises:
        CheckpointError: (a ``ValueError``) the file is truncated or malformed.

    Example::

        >>> ckpt = genesis.load("ckpt.safetensors", map_location="cpu")
        >>> model.load_state_dict(ckpt["model"])
    """
    if isinstance(f, (str, os.PathLike)):
        with open(os.fspath(f), "rb") as fh:
            return _load(fh, os.fspath(f), map_location)
    return _load(f, getattr(f, "name", "<file object>"), map_location)


def _load(fh: BinaryIO, where: str, map_location):
    start = fh.tell()
    size = fh.seek(0, os.SEEK_END) - start
    fh.seek(start)
    header, data_start = _read_header(fh, size, where)
    metadata = header.pop("__metadata__", None)
    entries = _check_entries(header, size - data_start, where)
    mapper = _device_mapper(map_location)
    structure = plain = object()  # no genesis structure: a plain safetensors file
    if isinstance(metadata, dict) and _METADATA_KEY in metadata:
        try:
            doc = json.loads(metadata[_METADATA_KEY])
            version, structure = doc["version"], doc["root"]
        # RecursionError: nesting deeper than the stack (json.loads fails before _decode
        # could: each structure level is at least two JSON levels)
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            raise CheckpointError(f"{where}: the genesis structure in the header is not "
                                  f"valid ({type(exc).__name__}: {exc})") from None
        if not _is_int(version) or version > _FORMAT_VERSION:
            raise CheckpointError(f"{where}: checkpoint format version {version!r} is newer "
                                  f"than this genesis reads ({_FORMAT_VERSION}); upgrade genesis")
    arrays = {}
    for name, (dtype, shape, begin, end) in entries.items():
        arrays[name] = _read_array(fh, data_start + start + begin, end - begin, dtype, shape,
                                   name, where)
    if structure is plain:  # a flat dict of tensors
        return {name: _make_tensor(arr, entries[name][0], mapper("cpu"), False)
                for name, arr in arrays.items()}
    return _decode(structure, arrays, entries, mapper, where, {})


def _read_header(fh: BinaryIO, size: int, where: str) -> tuple[dict, int]:
    if size < 8:
        raise CheckpointError(f"{where}: file is {size} bytes, too short to be a safetensors "
                              "checkpoint (truncated?)")
    first = fh.read(8)
    n = int.from_bytes(first, "little")
    if n > size - 8 and (first[:4] == b"PK\x03\x04" or first[:1] == b"\x80"):
        raise CheckpointError(f"{where}: this is a zip/pickle file (torch.save's format?), not "
                              "a safetensors checkpoint; genesis never unpickles files")
    if n > size - 8:
        raise CheckpointError(f"{where}: header length {n} goes past the end of the file "
                              f"({size} bytes): truncated or not a safetensors file")
    if n > _MAX_HEADER:
        raise CheckpointError(f"{where}: header length {n} exceeds the {_MAX_HEADER}-byte limit")
    raw = fh.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # deep nesting: Recursion
        raise CheckpointError(f"{where}: header is not valid JSON ({type(exc).__name__}: "
                              f"{exc})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{where}: header must be a JSON object, got "
                              f"{type(header).__name__}")
    meta = header.get("__metadata__")
    if meta is not None and not (isinstance(meta, dict)
                                 and all(isinstance(v, str) for v in meta.values())):
        raise CheckpointError(f"{where}: __metadata__ must map strings to strings")
    return header, 8 + n


def _check_entries(header: dict, data_size: int, where: str) -> dict:
    """Validate every tensor entry; returns name -> (dtype, shape, begin, end)."""
    entries = {}
    for name, info in header.items():
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
            raise CheckpointError(f"{where}: tensor {name!r} needs 'dtype', 'shape' and "
                                  f"'data_offsets', got {info!r}")
        code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if code not in _DTYPE_OF:
            raise CheckpointError(f"{where}: tensor {name!r} has unknown dtype {code!r}; "
                                  f"genesis reads {sorted(_DTYPE_OF)}")
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise CheckpointError(f"{where}: tensor {name!r} has an invalid shape {shape!r}")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(_is_int(o) for o in offsets) or not 0 <= offsets[0] <= offsets[1]):
            raise CheckpointError(f"{where}: tensor {name!r} has invalid data_offsets "
                                  f"{offsets!r}")
        begin, end = offsets
        if end > data_size:
            raise CheckpointError(f"{where}: tensor {name!r} data_offsets [{begin}, {end}] are "
                                  f"out of range: the data section has {data_size} bytes "
                                  "(truncated file?)")
        dtype = _DTYPE_OF[code]
        need = math.prod(shape) * dtype.itemsize
        if end - begin != need:
            raise CheckpointError(f"{where}: tensor {name!r} has {end - begin} bytes but shape "
                                  f"{shape} of {code} needs {need} (wrong byte count)")
        entries[name] = (dtype, tuple(shape), begin, end)
    covered = 0
    last = None
    for name, (_, _, begin, end) in sorted(entries.items(), key=lambda e: (e[1][2], e[1][3])):
        if begin < covered:
            raise CheckpointError(f"{where}: tensors {last!r} and {name!r} overlap in the file")
        if begin > covered:
            raise CheckpointError(f"{where}: {begin - covered} unaccounted bytes before tensor "
                                  f"{name!r} (malformed offsets)")
        covered, last = end, name
    if covered != data_size:
        raise CheckpointError(f"{where}: {data_size - covered} bytes after the last tensor; "
                              "the header does not describe the file")
    return entries


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _read_array(fh: BinaryIO, pos: int, nbytes: int, dtype, shape, name: str, where: str):
    arr = np.empty(shape, dtype=_NUMPY_OF[dtype].newbyteorder("="))
    if nbytes:
        fh.seek(pos)
        got = fh.readinto(arr.reshape(-1).view(np.uint8))
        if got != nbytes:
            raise CheckpointError(f"{where}: tensor {name!r} is truncated ({got} of {nbytes} "
                                  "bytes)")
        if sys.byteorder == "big" and arr.dtype.itemsize > 1:
            arr.byteswap(inplace=True)
    return arr


def _make_tensor(arr: np.ndarray, dtype, device, requires_grad: bool):
    t = from_numpy(arr)
    if dtype is D.bfloat16:
        t = t.view(D.bfloat16)
    if device is not None and device != Device("cpu"):
        t = t.to(device)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _device_mapper(map_location):
    """A function from a saved device string to the device to load onto."""
    if map_location is None:
        return Device
    if isinstance(map_location, (str, Device)):
        target = Device(map_location)
        return lambda saved: target
    if isinstance(map_location, dict):
        table = {str(Device(k)): Device(v) for k, v in map_location.items()}
        return lambda saved: table.get(str(Device(saved)), Device(saved))
    raise TypeError("map_location must be None, a device, a device string or a dict of "
                    f"device strings, got {type(map_location).__name__}")


def _decode(node, arrays: dict, entries: dict, mapper, where: str, made: dict):
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):
        raise CheckpointError(f"{where}: untagged list in the genesis structure")
    if not isinstance(node, dict) or "$" not in node:
        raise CheckpointError(f"{where}: malformed node {node!r} in the genesis structure")
    tag = node["$"]
    try:
        if tag == "tensor":
            name = node["name"]
            if name not in made:
                if name not in arrays:
                    raise CheckpointError(f"{where}: the structure refers to tensor {name!r}, "
                                          "which the file does not contain")
                made[name] = _make_tensor(arrays[name], entries[name][0],
                                          mapper(node.get("device", "cpu")),
                                          bool(node.get("requires_grad", False)))
            return made[name]
        if tag in ("dict", "odict"):
            out = {} if tag == "dict" else collections.OrderedDict()
            for key, value in node["items"]:
                out[_decode(key, arrays, entries, mapper, where, made)] = _decode(
                    value, arrays, entries, mapper, where, made)
            return out
        if tag in ("list", "tuple"):
            items = [_decode(v, arrays, entries, mapper, where, made) for v in node["v"]]
            return items if tag == "list" else tuple(items)
        if tag == "float":
            if node["v"] not in ("nan", "inf", "-inf"):
                raise CheckpointError(f"{where}: bad special float {node['v']!r}")
            return float(node["v"])
        if tag == "bytes":
            return base64.b64decode(node["v"], validate=True)
        if tag == "dtype":
            return D.dtype_from_name(node["v"])
        if tag == "device":
            return Device(node["v"])
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{where}: malformed {tag!r} node in the genesis structure "
                              f"({type(exc).__name__}: {exc})") from None
    raise CheckpointError(f"{where}: unknown node type {tag!r} in the genesis structure")
