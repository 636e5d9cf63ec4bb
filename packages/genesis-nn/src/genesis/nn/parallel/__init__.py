"""``genesis.nn.parallel``: where torch programs import ``DistributedDataParallel`` from.

``from genesis.nn.parallel import DistributedDataParallel`` gives
``genesis.distributed.DistributedDataParallel``. genesis-nn does not depend on
genesis-distributed and never imports it on its own: the name is looked up in
``genesis.distributed`` when it is asked for, and asking without genesis-distributed
installed raises an ``ImportError`` that names the distribution to install.

Example:
    >>> from genesis.nn.parallel import DistributedDataParallel as DDP
    >>> model = DDP(model)   # in a process group started by torchrun
"""

from __future__ import annotations

from importlib import import_module

# Names of genesis.distributed that torch also offers from torch.nn.parallel.
_FROM_DISTRIBUTED = ("DistributedDataParallel",)

__all__ = list(_FROM_DISTRIBUTED)


def __getattr__(name: str):
    if name not in _FROM_DISTRIBUTED:
        raise AttributeError(f"module 'genesis.nn.parallel' has no attribute {name!r}")
    try:
        distributed = import_module("genesis.distributed")
    except ModuleNotFoundError as exc:
        if exc.name not in ("genesis.distributed", "genesis"):
            raise  # genesis.distributed is there but one of its own imports failed
        raise ImportError(
            f"genesis.nn.parallel.{name} is genesis.distributed.{name}, provided by the "
            "genesis-distributed distribution, which is not installed "
            "(pip install genesis-distributed)", name="genesis.distributed") from None
    return getattr(distributed, name)
