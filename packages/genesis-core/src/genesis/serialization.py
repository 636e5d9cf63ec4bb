"""``genesis.save`` / ``genesis.load``: checkpoints as safetensors files, without pickle.

A checkpoint is ONE safetensors file (the format is described, read and written by
``genesis.safetensors_file``). The nested Python structure around the tensors (dicts, lists,
tuples, numbers, strings, ``None``) is stored as JSON in ``__metadata__["genesis"]``; every
container and tensor there is a tagged object (``{"$": "dict", "items": [[key, value], ...]}``,
``{"$": "tensor", "name": ...}``), so keys of any hashable type and tuples come back as they
went in. Loading only parses JSON and copies bytes: no code from the file ever runs. A plain
safetensors file (e.g. from ``safetensors.torch.save_file``) loads as a flat dict of tensors.

Writes to a path are atomic (``genesis.atomic_write``): a crash mid-save leaves either the
old file or the new one under the name, never a torn one.
"""

from __future__ import annotations

import base64
import collections
import json
import math
import os
from typing import Any, BinaryIO

from genesis import dtypes as D
from genesis.atomic_write import atomic_write
from genesis.device import device as Device
from genesis.safetensors_file import (
    CheckpointError,
    array_to_tensor,
    read_array,
    read_header,
    write_safetensors,
)
from genesis.tensor import Tensor

__all__ = ["save", "load", "CheckpointError"]

_METADATA_KEY = "genesis"  # __metadata__ entry holding the structure JSON
_FORMAT_VERSION = 1


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
    metadata = {
        "format": "pt",  # lets safetensors' own loaders read the tensors too
        _METADATA_KEY: json.dumps({"version": _FORMAT_VERSION, "root": structure},
                                  separators=(",", ":"), allow_nan=False),
    }
    named = dict(tensors.values())
    if isinstance(f, (str, os.PathLike)):
        try:
            with atomic_write(f) as tmp, open(tmp, "wb") as fh:
                write_safetensors(fh, named, metadata)
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"genesis.save: {exc}") from None
    else:
        write_safetensors(f, named, metadata)


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
            return _load(fh, map_location)
    return _load(f, map_location)


def _load(fh: BinaryIO, map_location):
    header = read_header(fh)
    where, metadata = header.where, header.metadata
    mapper = _device_mapper(map_location)
    structure = plain = object()  # no genesis structure: a plain safetensors file
    if metadata is not None and _METADATA_KEY in metadata:
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
    arrays = {name: read_array(fh, header, name) for name in header.tensors}
    dtypes = {name: entry.dtype for name, entry in header.tensors.items()}
    if structure is plain:  # a flat dict of tensors
        return {name: _make_tensor(arr, dtypes[name], mapper("cpu"), False)
                for name, arr in arrays.items()}
    return _decode(structure, arrays, dtypes, mapper, where, {})


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _make_tensor(arr, dtype, device, requires_grad: bool):
    t = array_to_tensor(arr, dtype)
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


def _decode(node, arrays: dict, dtypes: dict, mapper, where: str, made: dict):
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
                made[name] = _make_tensor(arrays[name], dtypes[name],
                                          mapper(node.get("device", "cpu")),
                                          bool(node.get("requires_grad", False)))
            return made[name]
        if tag in ("dict", "odict"):
            out = {} if tag == "dict" else collections.OrderedDict()
            for key, value in node["items"]:
                out[_decode(key, arrays, dtypes, mapper, where, made)] = _decode(
                    value, arrays, dtypes, mapper, where, made)
            return out
        if tag in ("list", "tuple"):
            items = [_decode(v, arrays, dtypes, mapper, where, made) for v in node["v"]]
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
