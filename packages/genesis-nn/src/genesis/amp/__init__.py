"""``genesis.amp``: automatic mixed precision — ``autocast`` (from the core) and ``GradScaler``.

``autocast`` is implemented in genesis-core (``genesis/autocast.py``: thread-local state and
the per-op policy applied by the ops layer); it is re-exported here so that
``genesis.amp.autocast`` works as ``torch.amp.autocast`` does.
"""

from genesis.amp.grad_scaler import GradScaler, OptState
from genesis.autocast import autocast, get_autocast_dtype, is_autocast_enabled

__all__ = ["GradScaler", "OptState", "autocast", "get_autocast_dtype", "is_autocast_enabled"]
