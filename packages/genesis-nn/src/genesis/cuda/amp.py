"""``genesis.cuda.amp``: torch's deprecated CUDA-only spellings of mixed precision.

``genesis.cuda.amp.autocast(...)`` is ``genesis.autocast("cuda", ...)`` and
``genesis.cuda.amp.GradScaler(...)`` is ``genesis.amp.GradScaler("cuda", ...)``; each warns
with a ``FutureWarning`` naming the current spelling, as torch's do. They exist so that
programs written for ``torch.cuda.amp`` run after renaming ``torch`` to ``genesis``.

Shipped by genesis-nn (which owns ``GradScaler``) as a module of the core's ``genesis.cuda``
package, whose path is extended for it; ``genesis.cuda.amp`` is imported on first use.

Example:
    >>> from genesis.cuda.amp import GradScaler, autocast  # same as genesis.amp's
"""

from __future__ import annotations

import warnings

from genesis import dtypes
from genesis.amp import grad_scaler
from genesis.autocast import autocast as _autocast

__all__ = ["GradScaler", "autocast"]


class autocast(_autocast):  # noqa: N801 - torch's name
    """Deprecated: ``genesis.autocast("cuda", ...)``, spelled as ``torch.cuda.amp.autocast``.

    Args:
        enabled: False turns autocast off inside the block.
        dtype: ``genesis.float16`` (the default) or ``genesis.bfloat16``.
        cache_enabled: whether weight casts are cached in the region.

    Example:
        >>> with genesis.cuda.amp.autocast():   # FutureWarning: use genesis.autocast("cuda")
        ...     y = model(x)
    """

    def __init__(self, enabled: bool = True, dtype: dtypes.DType = dtypes.float16,
                 cache_enabled: bool = True) -> None:
        warnings.warn("genesis.cuda.amp.autocast(args...) is deprecated, as "
                      "torch.cuda.amp.autocast is; use genesis.autocast('cuda', args...)",
                      FutureWarning, stacklevel=2)
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(grad_scaler.GradScaler):
    """Deprecated: ``genesis.amp.GradScaler("cuda", ...)``, spelled as torch's
    ``torch.cuda.amp.GradScaler``.

    Args:
        init_scale: initial scale factor.
        growth_factor: factor applied to the scale after ``growth_interval`` clean steps.
        backoff_factor: factor applied to the scale after a step with inf/NaN gradients.
        growth_interval: number of consecutive clean steps before the scale grows.
        enabled: ``False`` makes every method a pass-through.

    Example:
        >>> scaler = genesis.cuda.amp.GradScaler()  # FutureWarning: use genesis.amp.GradScaler
    """

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True) -> None:
        warnings.warn("genesis.cuda.amp.GradScaler(args...) is deprecated, as "
                      "torch.cuda.amp.GradScaler is; use genesis.amp.GradScaler('cuda', "
                      "args...)", FutureWarning, stacklevel=2)
        super().__init__("cuda", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)
