"""Meeting the other ranks: rank and world size from torchrun's environment, and a store.

The store is torch.distributed's ``TCPStore`` (a key-value server on rank 0, or torchrun's
agent store when torchrun provides one); genesis speaks no socket protocol of its own. Every
backend (Gloo, NCCL) exchanges its connection details through it.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from urllib.parse import urlparse

from torch import distributed as tdist


@dataclass
class Rendezvous:
    """Where this process stands: its rank, the world size and the shared store."""

    store: tdist.Store
    rank: int
    world_size: int
    local_rank: int


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def _check_rank(rank: int, world_size: int) -> None:
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside [0, {world_size - 1}] for world_size "
                         f"{world_size}")


def rendezvous(init_method: str | None, rank: int | None, world_size: int | None,
               timeout: datetime.timedelta, store: tdist.Store | None = None) -> Rendezvous:
    """Find rank, world size and a store from the arguments and torchrun's environment.

    Args:
        init_method: ``None`` or ``"env://"`` (read ``MASTER_ADDR``/``MASTER_PORT``),
            ``"tcp://host:port"``.
        rank, world_size: override ``RANK``/``WORLD_SIZE`` from the environment.
        timeout: how long the store waits for the other ranks.
        store: an existing ``torch.distributed.Store`` to use instead of making one.

    Returns:
        A ``Rendezvous``.
    """
    rank = _env_int("RANK") if rank is None or rank < 0 else rank
    world_size = _env_int("WORLD_SIZE") if world_size is None or world_size < 0 else world_size
    local_rank = _env_int("LOCAL_RANK")
    if rank is None or world_size is None:
        missing = [n for n, v in (("RANK", rank), ("WORLD_SIZE", world_size)) if v is None]
        raise ValueError(
            f"init_process_group: {' and '.join(missing)} not set: launch with torchrun "
            "(torchrun --nproc_per_node=N script.py) or pass rank= and world_size=")
    _check_rank(rank, world_size)
    if local_rank is None:
        local_rank = rank
    if store is not None:
        return Rendezvous(store, rank, world_size, local_rank)
    if init_method is None or init_method == "env://":
        addr = os.environ.get("MASTER_ADDR")
        port = _env_int("MASTER_PORT")
        if not addr or port is None:
            raise ValueError("init_process_group: MASTER_ADDR and MASTER_PORT must be set for "
                             "env:// (torchrun sets them), or pass init_method='tcp://host:port'")
    elif init_method.startswith("tcp://"):
        parsed = urlparse(init_method)
        if parsed.hostname is None or parsed.port is None:
            raise ValueError(f"init_method {init_method!r} needs the form tcp://host:port")
        addr, port = parsed.hostname, parsed.port
    else:
        raise ValueError(f"init_method {init_method!r} is not supported: use 'env://' or "
                         "'tcp://host:port'")
    return Rendezvous(_tcp_store(addr, port, rank, world_size, timeout), rank, world_size,
                      local_rank)


def _tcp_store(addr: str, port: int, rank: int, world_size: int,
               timeout: datetime.timedelta) -> tdist.Store:
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # torchrun's agent already serves a store at MASTER_ADDR:MASTER_PORT; each restart
        # of the workers gets its own key space there (as torch.distributed does).
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        client = tdist.TCPStore(addr, port, world_size, False, timeout)
        return tdist.PrefixStore(f"/worker/attempt_{attempt}", client)
    try:
        return tdist.TCPStore(addr, port, world_size, rank == 0, timeout)
    except RuntimeError as exc:
        raise RuntimeError(
            f"rank {rank}: could not meet the other {world_size - 1} rank(s) through the store "
            f"at {addr}:{port} within {timeout.total_seconds():g} s: {exc}") from exc
