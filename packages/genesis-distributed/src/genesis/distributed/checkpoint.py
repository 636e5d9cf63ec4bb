"""Checkpoints in data-parallel training: write once (rank 0), read everywhere.

Every rank holds the same replica, so one file is enough: rank 0 writes it with
``genesis.save``; the others wait until it is complete (and hear of a failure), so a load
right after a save never sees a half-written file.
"""

from __future__ import annotations

import os

import genesis
from genesis.distributed.group import resolve


def save_checkpoint(obj, path: str | os.PathLike, group=None) -> None:
    """Save ``obj`` (a state dict, or a dict of them) to ``path`` from the group's first rank;
    every rank returns once the file is written.

    Args:
        obj: a state dict, or a dict of them and plain values.
        path: the file to write.
        group: the group whose first rank writes and whose ranks wait; the world when None.

    Example:
        >>> dist.save_checkpoint({"model": ddp.module.state_dict(),
        ...                       "optim": opt.state_dict(), "epoch": epoch}, "ckpt.gns")
    """
    g = resolve(group)
    if g is None:
        return
    error = None
    if g.rank() == 0:
        try:
            genesis.save(obj, path)
        except Exception as exc:  # the others must hear of it rather than wait forever
            error = f"{type(exc).__name__}: {exc}"
    outcome = g.exchange_objects(error, "save_checkpoint")
    if outcome[0] is not None:
        raise RuntimeError(f"save_checkpoint: rank {g.ranks[0]} could not write {path}: "
                           f"{outcome[0]}")


def load_checkpoint(path: str | os.PathLike, map_location=None, group=None):
    """Load the checkpoint at ``path`` on every rank, onto this rank's own GPU.

    Args:
        path: the file ``save_checkpoint`` wrote.
        map_location: as ``genesis.load``. By default, with NCCL, tensors go to this rank's
            device (``cuda:LOCAL_RANK``) rather than to the device rank 0 saved them from.
        group: the group whose ranks load; the world when None.

    Returns:
        The loaded object, as ``genesis.load`` returns it.
    """
    g = resolve(group)
    if map_location is None and g is not None and g.device_index is not None:
        map_location = f"cuda:{g.device_index}"
    return genesis.load(path, map_location=map_location)
