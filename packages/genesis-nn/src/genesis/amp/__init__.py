"""``genesis.amp``: automatic mixed precision — ``autocast`` (from the core) and ``GradScaler``.

``autocast`` is implemented in genesis-core (``genesis/autocast.py``, used by the ops
layer); it is re-exported here so ``genesis.amp.autocast`` works as ``torch.amp.autocast``.
"""

import importlib

from genesis.amp.grad_scaler import GradScaler, OptState

_CORE_NAMES = ("autocast", "is_autocast_enabled", "get_autocast_dtype")


def __getattr__(name: str):
    # Resolved lazily so GradScaler stays importable even if the core's autocast is absent.
    if name in _CORE_NAMES:
        return getattr(importlib.import_module("genesis.autocast"), name)
    raise AttributeError(f"module 'genesis.amp' has no attribute {name!r}")


__all__ = ["GradScaler", "OptState", "autocast"]
