"""The ranks agree on a collective before any data moves, or every rank raises.

Collectives pair up by order: if one rank skips a call (an empty tensor did, once) or passes
a tensor of another size or dtype, the ranks pair different calls, and the backend returns
wrong data or kills the process (Gloo aborts on a size mismatch). So before a collective
each rank all-reduces a 16-byte fingerprint of what it is about to do (the collective's
name, its reduce op or root, and its tensors' dtypes and sizes) with MAX: ``[h, -h]`` comes
back as ``[h, -h]`` on every rank exactly when every rank's ``h`` is the same. Every rank
sees the same maxima, so a mismatch is seen by all of them; they then exchange their full
descriptions through the store and each raises ``CollectiveMismatchError`` naming every
rank's call. No data has moved.

How much is checked is set by the environment variable ``GENESIS_DISTRIBUTED_DEBUG``:

* unset or ``INFO`` (the default): collectives of CPU tensors (Gloo) are checked, on the
  dtypes and element counts. The check is a tiny Gloo all-reduce; CUDA collectives (NCCL)
  are not checked, as reading the check's result would synchronise the GPU on every call.
* ``DETAIL``: every collective is checked, CUDA ones too, on the full shapes.
* ``OFF``: nothing is checked.

Point-to-point ``send``/``recv`` are not checked (only two ranks take part; a size mismatch
there is the backend's error).
"""

from __future__ import annotations

import hashlib
import os

import genesis
from genesis.distributed.reduce_op import DistBackendError, ReduceOp

DEBUG_ENV = "GENESIS_DISTRIBUTED_DEBUG"
_LEVELS = ("OFF", "INFO", "DETAIL")


class CollectiveMismatchError(RuntimeError):
    """The ranks called different collectives, or passed tensors of different dtypes or
    sizes; raised on every rank before any data moved. The message names each rank's call."""


def debug_level() -> str:
    """``GENESIS_DISTRIBUTED_DEBUG``: ``"OFF"``, ``"INFO"`` (the default) or ``"DETAIL"``."""
    value = os.environ.get(DEBUG_ENV, "INFO").strip().upper() or "INFO"
    if value not in _LEVELS:
        raise ValueError(f"{DEBUG_ENV}={os.environ[DEBUG_ENV]!r}: use OFF, INFO or DETAIL")
    return value


def agree(group, device_type: str, name: str, tensors: tuple = (), extra: tuple = ()) -> None:
    """Check that every rank of ``group`` is calling collective ``name`` on matching tensors
    (see the module docstring for what is checked at each debug level).

    Args:
        group: the ``ProcessGroup`` that runs the collective.
        device_type: ``"cpu"`` or ``"cuda"``: the backend that will carry it.
        name: the collective's public name (``"all_reduce"``).
        tensors: ``(label, tensor)`` pairs whose dtype and size must match across ranks.
        extra: other arguments that must match, as text (``"op=SUM"``, ``"src=1"``).

    Raises:
        CollectiveMismatchError: on every rank, when the ranks' calls differ.
        DistBackendError: a peer died or timed out during the check.
    """
    level = debug_level()
    if level == "OFF" or (level == "INFO" and device_type != "cpu") or group.size() == 1:
        return
    detail = level == "DETAIL"
    key = (name, extra,
           tuple((label, t.dtype.name, tuple(t.shape) if detail else t.numel())
                 for label, t in tensors))
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    h = int.from_bytes(digest, "little") >> 2  # below 2**62: -h fits in int64
    device = genesis.device(device_type if device_type == "cpu"
                            else f"cuda:{group.device_index or 0}")
    probe = genesis.tensor([h, -h], dtype=genesis.int64, device=device)
    try:
        group.impl(device_type).all_reduce(probe, ReduceOp.MAX).wait()
    except DistBackendError as exc:
        raise DistBackendError(f"{name} (checking that the ranks agree on it): {exc}") from exc
    if probe.tolist() == [h, -h]:
        return
    mine = f"{name}({_describe(tensors, extra)})"
    calls = group.exchange_objects(mine, f"{name}: describing a collective mismatch")
    listing = "; ".join(f"rank {group.ranks[r]}: {c}" for r, c in enumerate(calls))
    raise CollectiveMismatchError(
        f"{name} on {group.describe()}: the ranks' collectives do not match ({listing}). "
        "No data was moved; every rank raises this error. Each rank must call the same "
        "collectives in the same order with tensors of the same dtype and size.")


def _describe(tensors: tuple, extra: tuple) -> str:
    parts = [f"{label}: {t.dtype.name} of shape {tuple(t.shape)}" for label, t in tensors]
    return ", ".join(parts + list(extra))
