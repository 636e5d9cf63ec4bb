"""Mixed precision: ``genesis.autocast`` runs chosen ops in a lower precision.

Each op Function names its category in ``Function.autocast``; while autocast is on for a
device type, ``Function.apply`` casts the op's floating inputs on that device type:

| category  | ops                                                        | inputs cast to      |
|-----------|------------------------------------------------------------|---------------------|
| "lower"   | matmul, mm, bmm (so linear, conv, attention built on them) | the autocast dtype  |
| "fp32"    | softmax, log_softmax, layer_norm, sum (and so mean and the  | float32             |
|           | losses built on it), prod, cumsum, norm, exp, log, log1p,   |                     |
|           | log2, expm1, pow, rsqrt                                     |                     |
| (none)    | everything else, rms_norm included (its output keeps the    | unchanged: mixed    |
|           | input's dtype, as in torch's CUDA autocast)                 | inputs promote      |

float64 inputs are never cast (as in torch). The state is thread-local and nestable.

Weight casts are cached, as torch's autocast does: within a region, the low-precision cast
of a float32 leaf that requires grad (a parameter; not a view) is made once and reused by
every op that casts it, until the outermost region exits (``cache_enabled=False`` turns
this off). An entry is used only under the grad mode it was made in and while the weight is
unmodified (an in-place update makes a new cast), so a cast made under ``no_grad`` never
cuts a later graph.
"""

from __future__ import annotations

import functools
import threading

from genesis import dtypes as D
from genesis.autograd import function as _function
from genesis.autograd.grad_mode import _state as _grad_state


class _AutocastState(threading.local):
    def __init__(self):
        self.enabled = False  # any device type on, in this thread (the hot-path check)
        self.by_device: dict[str, D.DType] = {}  # device type -> low dtype while on
        self.depth = 0  # nesting of autocast regions (the cache empties at the outermost exit)
        self.cache_enabled = True
        # id(weight) -> (weight, version, dtype, grad mode, cast)
        self.cache: dict[int, tuple] = {}

    def cast_args(self, category: str, args: tuple) -> tuple:
        """``args`` as an op of autocast ``category`` takes them: each floating tensor cast
        to the category's dtype, except where autocast is off for its device type, it is
        float64, or it already has that dtype (a weight's cast is cached: ``cached_cast``).
        (This object is thread-local: each attribute read costs a lookup of the thread's
        dict, so ``by_device`` is read once.)"""
        by_device = self.by_device
        out = []
        for a in args:
            if type(a) not in _function._TENSOR_TYPES:
                out.append(a)
                continue
            low = by_device.get(a.device.type)
            dtype = a.dtype
            target = low if category == "lower" else D.float32
            if (low is None or not dtype.is_floating_point or dtype is D.float64
                    or dtype is target):
                out.append(a)
            elif (target is low and dtype is D.float32 and a.requires_grad
                    and a.grad_fn is None and a._base is None and self.cache_enabled):
                out.append(self.cached_cast(a, target))
            else:
                out.append(a.to(target))
        return tuple(out)

    def cached_cast(self, weight, dtype: D.DType):
        """``weight.to(dtype)``, made once per region, grad mode and weight version."""
        version, grad = weight._version_box[0], _grad_state.enabled
        hit = self.cache.get(id(weight))
        if hit is not None and hit[0] is weight and hit[1] == version and hit[2] is dtype \
                and hit[3] == grad:
            return hit[4]
        cast = weight.to(dtype)
        self.cache[id(weight)] = (weight, version, dtype, grad, cast)
        return cast


_count_lock = threading.Lock()


def _set_enabled(enabled: bool) -> None:
    """Set this thread's ``_state.enabled``, keeping ``_anywhere.on``."""
    if enabled == _state.enabled:
        return
    if enabled:
        with _count_lock:
            _anywhere.on += 1
        _state.enabled = True
    else:
        _state.enabled = False
        with _count_lock:
            _anywhere.on -= 1


_state = _AutocastState()
_anywhere = _function._autocast_anywhere  # (the dispatcher's count: see AutocastCount)
_function._autocast_state = _state

_DEFAULT_DTYPES = {"cuda": D.float16, "cpu": D.bfloat16}


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    """Whether autocast is on for ``device_type`` in this thread.

    Args:
        device_type: ``'cpu'``, ``'cuda'`` ...

    Returns:
        A Python bool.
    """
    return device_type in _state.by_device


def get_autocast_dtype(device_type: str) -> D.DType:
    """The low dtype autocast uses for ``device_type``.

    Args:
        device_type: ``'cpu'``, ``'cuda'`` ...

    Returns:
        A dtype.
    """
    return _state.by_device.get(device_type, _DEFAULT_DTYPES.get(device_type, D.bfloat16))


class autocast:  # noqa: N801 - torch's name
    """Run matmul-like ops in ``dtype`` and precision-sensitive ops in float32.

    Args:
        device_type: ``'cuda'`` or ``'cpu'`` (tensors on other device types are untouched).
        dtype: ``genesis.bfloat16`` or ``genesis.float16`` (default: float16 on CUDA,
            bfloat16 on the CPU).
        enabled: False turns autocast off inside the block (also inside an outer one).
        cache_enabled: whether weight casts are cached in the region (default: inherited,
            True at the outermost region).

    Example:
        >>> with genesis.autocast("cuda", dtype=genesis.bfloat16):
        ...     y = model(x)          # matmuls in bf16, softmax/norms in fp32
    """

    def __init__(self, device_type: str, dtype: D.DType | None = None, enabled: bool = True,
                 cache_enabled: bool | None = None):
        if not isinstance(device_type, str):
            raise ValueError(f"autocast expected device_type to be a string, got {device_type!r}")
        dtype = dtype or _DEFAULT_DTYPES.get(device_type, D.bfloat16)
        if enabled and dtype not in (D.float16, D.bfloat16):
            raise RuntimeError(f"autocast supports float16 and bfloat16, got {dtype}")
        self.device_type, self.fast_dtype, self._enabled = device_type, dtype, enabled
        self._cache_enabled = cache_enabled

    def __enter__(self):
        self._prev = dict(_state.by_device)
        self._prev_cache = _state.cache_enabled
        if self._enabled:
            _state.by_device[self.device_type] = self.fast_dtype
        else:
            _state.by_device.pop(self.device_type, None)
        if self._cache_enabled is not None:
            _state.cache_enabled = bool(self._cache_enabled)
        _set_enabled(bool(_state.by_device))
        _state.depth += 1
        return self

    def __exit__(self, *exc) -> None:
        _state.by_device = self._prev
        _set_enabled(bool(self._prev))
        _state.cache_enabled = self._prev_cache
        _state.depth -= 1
        if _state.depth == 0:
            _state.cache.clear()

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(self.device_type, self.fast_dtype, self._enabled,
                          self._cache_enabled):
                return fn(*args, **kwargs)

        return wrapper
