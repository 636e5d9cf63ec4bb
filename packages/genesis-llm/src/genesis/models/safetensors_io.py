"""Reading and writing safetensors files as genesis tensors.

Writing goes through the ``safetensors`` library's ``serialize_file`` (the call
``safetensors.numpy.save_file`` makes), with the dtype named explicitly so bfloat16 works.

Reading parses the header directly and memory-maps the file. The format: an 8-byte
little-endian header length, a JSON header
``{name: {"dtype", "shape", "data_offsets": [begin, end]}}``, then the raw bytes. numpy has
no bfloat16, so ``safetensors.numpy`` cannot return the BF16 tensors real Qwen checkpoints
hold; here BF16 bytes travel as int16 and are reinterpreted as bfloat16 on the device. A
tensor is read straight from the mapping, one at a time, so loading never holds a second
copy of a shard in host memory.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import safetensors

import genesis
from genesis import Tensor

__all__ = ["read_header", "load_tensor", "save_tensors"]

# safetensors dtype -> (numpy dtype of the raw bytes, genesis dtype)
_DTYPES = {
    "F64": (np.float64, genesis.float64), "F32": (np.float32, genesis.float32),
    "F16": (np.float16, genesis.float16), "BF16": (np.int16, genesis.bfloat16),
    "I64": (np.int64, genesis.int64), "I32": (np.int32, genesis.int32),
    "I16": (np.int16, genesis.int16), "I8": (np.int8, genesis.int8),
    "U8": (np.uint8, genesis.uint8), "BOOL": (np.bool_, genesis.bool),
}
# genesis dtype -> safetensors' dtype name for TensorSpec
_SPEC_NAMES = {genesis.float64: "float64", genesis.float32: "float32",
               genesis.float16: "float16", genesis.bfloat16: "bfloat16",
               genesis.int64: "int64", genesis.int32: "int32", genesis.int16: "int16",
               genesis.int8: "int8", genesis.uint8: "uint8", genesis.bool: "bool"}


def read_header(path: str | os.PathLike) -> tuple[dict, int]:
    """``({name: {"dtype", "shape", "data_offsets"}}, data_start)`` of a safetensors file.

    Raises:
        ValueError: the file is not a valid safetensors file.
    """
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise ValueError(f"{path}: not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", raw)
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not a safetensors file ({e})") from None
    header.pop("__metadata__", None)
    for name, info in header.items():
        if info.get("dtype") not in _DTYPES:
            raise ValueError(f"{path}: tensor {name!r} has dtype {info.get('dtype')!r}, "
                             f"not one of {sorted(_DTYPES)}")
    return header, 8 + n


def load_tensor(path: str | os.PathLike, info: dict, data_start: int, device=None,
                dtype=None) -> Tensor:
    """One tensor of a safetensors file, on ``device`` (cast to ``dtype`` when given)."""
    np_dtype, gdtype = _DTYPES[info["dtype"]]
    begin, end = info["data_offsets"]
    shape = tuple(info["shape"])
    count = int(np.prod(shape, dtype=np.int64))
    if end - begin != count * np.dtype(np_dtype).itemsize:
        raise ValueError(f"{path}: tensor of shape {list(shape)} and dtype {info['dtype']} "
                         f"has {end - begin} bytes")
    if count == 0:
        return genesis.zeros(shape, dtype=dtype or gdtype, device=device)
    # copy-on-write mapping: pages are read when touched, the file is never written
    raw = np.memmap(path, dtype=np_dtype, mode="c", offset=data_start + begin, shape=shape)
    t = genesis.from_numpy(np.asarray(raw)).to(device)
    if gdtype is genesis.bfloat16:
        t = t.view(genesis.bfloat16)
    return t if dtype is None else t.to(dtype)


def _spec(dtype: str, arr: np.ndarray):
    """One tensor for ``serialize_file``: a ``TensorSpec`` pointing at ``arr`` (safetensors
    >= 0.7), or the dict with a copy of its bytes that older versions take."""
    if hasattr(safetensors, "TensorSpec"):
        return safetensors.TensorSpec(dtype=dtype, shape=arr.shape, data_ptr=arr.ctypes.data,
                                      data_len=arr.nbytes)
    return {"dtype": dtype, "shape": arr.shape, "data": arr.tobytes()}


def save_tensors(tensors: dict[str, Tensor], path: str | os.PathLike,
                 metadata: dict[str, str] | None = None) -> None:
    """Write ``{name: tensor}`` to a safetensors file (tensors may live on any device)."""
    specs, keep_alive = {}, []
    for name, t in tensors.items():
        t = t.detach()
        if t.dtype not in _SPEC_NAMES:
            raise TypeError(f"save_tensors: {name!r} has dtype {t.dtype}, which safetensors "
                            "cannot store")
        raw = t.view(genesis.int16) if t.dtype is genesis.bfloat16 else t
        arr = np.ascontiguousarray(raw.cpu().numpy())
        keep_alive.append(arr)
        specs[name] = _spec(_SPEC_NAMES[t.dtype], arr)
    safetensors.serialize_file(specs, os.fspath(path), metadata=metadata)
