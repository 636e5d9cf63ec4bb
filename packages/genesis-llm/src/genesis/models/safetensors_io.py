"""Checkpoint tensors to and from safetensors files, on any device.

Both directions go through genesis-core's one safetensors implementation
(``genesis.safetensors_file``): a file's header is validated completely (fields, dtypes,
shapes, offsets in bounds, non-overlapping, covering the data) before any tensor is read, and
a file is written atomically (``genesis.atomic_write``). A tensor is read straight from a
copy-on-write memory map, one at a time, so loading never holds a second copy of a shard in
host memory; numpy has no bfloat16, so BF16 bytes travel as int16 and are reinterpreted on
the device.
"""

from __future__ import annotations

import os

from genesis import Tensor
from genesis.atomic_write import atomic_write
from genesis.safetensors_file import (
    SafetensorsHeader,
    array_to_tensor,
    map_array,
    read_header,
    write_safetensors,
)

__all__ = ["read_header", "load_tensor", "save_tensors"]


def load_tensor(path: str | os.PathLike, header: SafetensorsHeader, name: str, device=None,
                dtype=None) -> Tensor:
    """Tensor ``name`` of a safetensors file, on ``device`` (cast to ``dtype`` when given).

    Args:
        path: the file.
        header: its header, from ``read_header(path)``.
        name: the tensor's name in the header.
        device: where the tensor goes (default CPU).
        dtype: the dtype to cast to (default: the file's).

    Returns:
        The tensor (on the CPU it may be the private memory map: writing to it never
        changes the file).

    Example::

        >>> header = read_header("model.safetensors")
        >>> w = load_tensor("model.safetensors", header, "lm_head.weight", device="cuda")
    """
    entry = header.tensors[name]
    t = array_to_tensor(map_array(path, header, name), entry.dtype).to(device)
    return t if dtype is None else t.to(dtype)


def save_tensors(tensors: dict[str, Tensor], path: str | os.PathLike,
                 metadata: dict[str, str] | None = None) -> None:
    """Write ``{name: tensor}`` (tensors on any device) to a safetensors file, atomically.

    Args:
        tensors: the tensors by name.
        path: the file to create or replace (its folder must exist).
        metadata: the header's ``__metadata__`` strings, e.g. ``{"format": "pt"}``.

    Example::

        >>> save_tensors({"w": genesis.ones(2, 3)}, "w.safetensors", {"format": "pt"})
    """
    with atomic_write(path) as tmp, open(tmp, "wb") as fh:
        write_safetensors(fh, tensors, metadata)
