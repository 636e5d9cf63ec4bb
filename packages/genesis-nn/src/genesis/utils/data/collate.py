"""Turning a list of samples into a batch (``default_collate``), and moving batches between
processes as numpy arrays (``to_transport`` / ``from_transport``)."""

from __future__ import annotations

import collections.abc
import re

import numpy as np

import genesis

__all__ = ["default_collate", "default_convert"]

_STRING_DTYPE = re.compile(r"[SaUO]")


def _is_namedtuple(obj) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_fields")


def _same_mapping(original, items: dict):
    """``items`` as ``original``'s mapping type when that type can be built from a dict."""
    if type(original) is dict:
        return items
    try:
        return type(original)(items)
    except TypeError:
        return items


def default_convert(data):
    """Numpy arrays (non-string) become genesis tensors, recursively; everything else is
    returned as is. Used when automatic batching is off (``batch_size=None``)."""
    if isinstance(data, genesis.Tensor):
        return data
    if isinstance(data, np.ndarray):
        if _STRING_DTYPE.search(data.dtype.str) is not None:
            return data
        return genesis.tensor(data)
    if isinstance(data, np.generic) and not isinstance(data, (np.str_, np.bytes_)):
        return genesis.tensor(data)
    if isinstance(data, collections.abc.Mapping):
        return _same_mapping(data, {k: default_convert(v) for k, v in data.items()})
    if _is_namedtuple(data):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        return [default_convert(d) for d in data]
    return data


def default_collate(batch):
    """Stack a list of samples into a batch, recursing into containers (torch's rules).

    * tensors are stacked along a new first dim (shapes must match);
    * numpy arrays and numpy scalars become stacked tensors;
    * Python floats become a float64 tensor, ints an int64 tensor, bools a bool tensor;
    * strings and bytes stay a list;
    * dicts collate per key, namedtuples per field, other sequences (tuples, lists)
      per position and are returned as lists (all samples must have the same length).

    Example:
        >>> default_collate([(genesis.zeros(2), 0), (genesis.ones(2), 1)])
        [tensor([[0., 0.], [1., 1.]]), tensor([0, 1])]
    """
    elem = batch[0]
    if isinstance(elem, genesis.Tensor):
        first = tuple(elem.shape)
        for i, t in enumerate(batch):
            if not isinstance(t, genesis.Tensor) or tuple(t.shape) != first:
                got = list(t.shape) if isinstance(t, genesis.Tensor) else type(t).__name__
                raise RuntimeError(f"default_collate: stack expects each tensor to be equal "
                                   f"size, but got {list(first)} at entry 0 and {got} at "
                                   f"entry {i}")
        return genesis.stack(list(batch), 0)
    if isinstance(elem, np.ndarray):
        if _STRING_DTYPE.search(elem.dtype.str) is not None:
            raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, "
                            f"numbers, dicts or lists; found numpy array of dtype {elem.dtype}")
        return default_collate([genesis.tensor(np.ascontiguousarray(b)) for b in batch])
    if isinstance(elem, np.generic) and not isinstance(elem, (np.str_, np.bytes_)):
        return genesis.tensor(np.stack(batch))
    if isinstance(elem, bool):
        return genesis.tensor(batch, dtype=genesis.bool)
    if isinstance(elem, int):
        return genesis.tensor(batch, dtype=genesis.int64)
    if isinstance(elem, float):
        return genesis.tensor(batch, dtype=genesis.float64)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, collections.abc.Mapping):
        return {key: default_collate([d[key] for d in batch]) for key in elem}
    if _is_namedtuple(elem):
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        for i, e in enumerate(batch):
            if len(e) != size:
                raise RuntimeError(f"default_collate: each element in list of batch should be "
                                   f"of equal size (entry 0 has {size}, entry {i} has "
                                   f"{len(e)})")
        return [default_collate(list(s)) for s in zip(*batch)]
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, "
                    f"dicts or lists; found {type(elem).__name__}")


# ---------------------------------------------------------------- process transport
class _Array:
    """A genesis tensor in transit: its values as a numpy array plus the genesis dtype name
    (bfloat16 travels as float32 and is cast back)."""

    __slots__ = ("array", "dtype")

    def __init__(self, array: np.ndarray, dtype: str) -> None:
        self.array = array
        self.dtype = dtype

    def __reduce__(self):
        return (_Array, (self.array, self.dtype))


def to_transport(obj):
    """Replace every genesis tensor in ``obj`` (recursively) by a picklable ``_Array``."""
    if isinstance(obj, genesis.Tensor):
        t = obj.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        return _Array(t.numpy(force=True) if t.dtype != genesis.bfloat16 else
                      t.float().numpy(), str(t.dtype).rsplit(".", 1)[-1])
    if isinstance(obj, dict):
        return _same_mapping(obj, {k: to_transport(v) for k, v in obj.items()})
    if _is_namedtuple(obj):
        return type(obj)(*(to_transport(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_transport(v) for v in obj)
    return obj


def from_transport(obj):
    """Inverse of ``to_transport``: rebuild genesis tensors on the CPU."""
    if isinstance(obj, _Array):
        t = genesis.from_numpy(obj.array)
        want = getattr(genesis, obj.dtype)
        return t if t.dtype == want else t.to(want)
    if isinstance(obj, dict):
        return _same_mapping(obj, {k: from_transport(v) for k, v in obj.items()})
    if _is_namedtuple(obj):
        return type(obj)(*(from_transport(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(from_transport(v) for v in obj)
    return obj
