"""``genesis.backends.cudnn``: torch's cuDNN switches, settable and recorded.

genesis does not use cuDNN (its CUDA convolutions are its own Triton kernels), so these
flags change nothing in what genesis computes; they exist so that programs which set them
(``genesis.backends.cudnn.benchmark = True`` is in most training scripts) run unchanged.
What each would mean for genesis:

- ``enabled`` (default True): nothing to turn off; genesis's kernels run either way.
- ``benchmark`` (default False): genesis's matmul already picks its tile configuration by
  timing candidates the first time it sees a problem size (``genesis_cuda``'s tuning), always.
- ``deterministic`` (default False): genesis does not switch kernels for it. On CUDA the
  accumulating scatters (``scatter_add``, ``index_add``, ``index_put`` with ``accumulate``)
  add with atomics, in an order that can vary, and the matmul's tile configuration is chosen
  by timing, which can differ between processes (and with it the rounding).
- ``allow_tf32`` (default True): genesis never uses TF32 for convolutions.

Each must be a bool (a clear ``TypeError`` otherwise, as torch raises). ``flags(...)`` sets
some for a ``with`` block.

Example:
    >>> import genesis.backends.cudnn as cudnn
    >>> cudnn.benchmark = True
"""

from __future__ import annotations

import contextlib
import sys
import types

_DEFAULTS = {"enabled": True, "benchmark": False, "deterministic": False, "allow_tf32": True}
_values = dict(_DEFAULTS)


def is_available() -> bool:
    """Whether cuDNN is available to genesis: never (genesis has no cuDNN kernels).

    Returns:
        False.
    """
    return False


def version() -> None:
    """The cuDNN version genesis uses: none.

    Returns:
        None, as torch returns without cuDNN.
    """
    return None


@contextlib.contextmanager
def flags(enabled: bool = False, benchmark: bool = False, deterministic: bool = False,
          allow_tf32: bool = True):
    """Set the four flags for a ``with`` block, restoring them after (as torch's).

    Args:
        enabled, benchmark, deterministic, allow_tf32: the values inside the block.

    Yields:
        Nothing.

    Example:
        >>> with genesis.backends.cudnn.flags(enabled=True, deterministic=True):
        ...     y = model(x)
    """
    module = sys.modules[__name__]
    saved = dict(_values)
    new = {"enabled": enabled, "benchmark": benchmark, "deterministic": deterministic,
           "allow_tf32": allow_tf32}
    for name, value in new.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        _values.update(saved)


class _CudnnModule(types.ModuleType):
    """This module, with its four flags as checked properties (module ``__class__``
    assignment: the flags are read and set as plain module attributes)."""


def _flag(name: str) -> property:
    def get(self) -> bool:
        return _values[name]

    def set_(self, value) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"genesis.backends.cudnn.{name} must be a bool, got "
                            f"{type(value).__name__} {value!r}")
        _values[name] = value

    return property(get, set_, doc=f"torch's cudnn.{name} (recorded; see the module).")


for _name in _DEFAULTS:
    setattr(_CudnnModule, _name, _flag(_name))
sys.modules[__name__].__class__ = _CudnnModule
