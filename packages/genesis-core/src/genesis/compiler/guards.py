"""Guards: what a call must share with the traced one for the trace to be replayed.

``guard_key(args, kwargs, owner)`` walks a call's arguments once and returns a hashable key
and the call's tensors. The key holds, per tensor, its shape, dtype, device and
requires_grad (and which earlier argument it is, when the same tensor is passed twice);
the non-tensor arguments themselves (Python constants: a different constant is a different
trace); the grad mode; the autocast state (device type -> dtype); and the guard state of
objects that have one — an ``nn.Module`` (the compiled module, or one passed as an
argument) reports its own and its submodules' train/eval flags and its parameters' and
buffers' identity, shape and dtype through ``_compile_guard_state()``.

The tensors a trace met outside the arguments (captured: parameters, closures) are
checked separately by the cache entry (``captured_ok``): same shape, dtype, device and
requires_grad as at trace time.
"""

from __future__ import annotations

import sys

from genesis.autocast import _state as _autocast_state
from genesis.autograd.function import _TENSOR_TYPES
from genesis.autograd.grad_mode import _state as _grad_state

__all__ = ["captured_ok", "guard_key"]

_CONSTANT_TYPES = (int, float, bool, str, bytes, type(None), complex, slice, range)


def guard_key(args: tuple, kwargs: dict, owner=None) -> tuple[tuple, list]:
    """The guard key of a call and its tensors (depth first, each once).

    Args:
        args: the positional arguments.
        kwargs: the keyword arguments.
        owner: the object a compiled bound method belongs to (or None).

    Returns:
        ``(key, tensors)``.

    Example:
        >>> key, tensors = guard_key((x, 2), {})
    """
    tensors: list = []
    index: dict[int, int] = {}
    parts: list = []
    _walk(args, parts, tensors, index)
    _walk(kwargs, parts, tensors, index)
    by_device = _autocast_state.by_device
    autocast = tuple(sorted(by_device.items())) if _autocast_state.enabled else ()
    state = owner._compile_guard_state() if hasattr(owner, "_compile_guard_state") else None
    return (tuple(parts), _grad_state.enabled, autocast, state), tensors


def _walk(obj, parts: list, tensors: list, index: dict) -> None:
    kind = type(obj)
    if kind in _TENSOR_TYPES:
        seen = index.get(id(obj))
        if seen is not None:
            parts.append(("same", seen))
            return
        index[id(obj)] = len(tensors)
        tensors.append(obj)
        parts.append((obj.shape, obj.dtype, obj.device, obj.requires_grad))
    elif kind is tuple or kind is list:
        parts.append((kind, len(obj)))
        for a in obj:
            _walk(a, parts, tensors, index)
    elif kind is dict:
        parts.append((dict, tuple(obj)))
        for a in obj.values():
            _walk(a, parts, tensors, index)
    elif isinstance(obj, _CONSTANT_TYPES):
        parts.append((kind, obj))
    elif hasattr(obj, "_compile_guard_state"):
        parts.append((kind, id(obj), obj._compile_guard_state()))
    else:  # dtypes, devices, other objects: hashable ones by value, others by identity
        try:
            hash(obj)
            parts.append((kind, obj))
        except TypeError:
            parts.append((kind, id(obj)))


def captured_ok(captured: list) -> bool:
    """Whether every captured tensor still has its trace-time shape, dtype, device and
    requires_grad, and is still held by someone besides the trace (``captured``:
    ``(tensor, Value, requires_grad)`` triples).

    A captured tensor only the trace holds cannot be the one the function would read now —
    a global rebound to a new tensor, a ``.grad`` set to None and made anew, a wrapper such
    as ``x.data`` made on each call — so the call is traced again rather than replayed with
    the stale tensor."""
    for entry in captured:
        t, v, rg = entry
        if t.shape != v.shape or t.dtype is not v.dtype or t.device is not v.device \
                or t.requires_grad != rg or sys.getrefcount(t) <= _ONLY_TRACE_REFS:
            return False
    return True


def _count_refs_in_loop(captured: list) -> int:
    for entry in captured:  # (the same references as captured_ok's loop holds)
        t, v, rg = entry
        return sys.getrefcount(t)
    return 0


class _Probe:
    pass


# References to a captured tensor that only the trace's list holds, as captured_ok's loop
# sees them (measured once, so the check follows the running interpreter's counting).
_ONLY_TRACE_REFS = _count_refs_in_loop([(_Probe(), None, None)])
