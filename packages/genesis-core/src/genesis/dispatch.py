"""The op registry and the interception mode: every op call, seen by whoever asks.

Every op has one ``OpHandle`` in ``REGISTRY``, by name: each autograd ``Function`` gets one
when its class is made (``Exp`` -> ``"exp"``, ``ScaledDotProductAttention`` ->
``"scaled_dot_product_attention"``), and the ops that are not Functions (factories, random
fills, in-place edits) are registered with ``registered_op``. Calls reach the dispatcher
(``Function.apply``, or a registered op's wrapper), which hands them to the active
``DispatchMode``s before anything runs — the counterpart of torch's ``TorchDispatchMode``.
With no mode active that costs one list check per op.

A mode sees the op as its caller made it: ``__genesis_dispatch__(op, args, kwargs)`` runs
it with ``op(*args, **kwargs)`` and may look at or replace the arguments and the result.
While a mode's handler runs, that mode is off (the ops its handler and the op's own
implementation call are not shown to it again), and modes entered earlier still see the
call, innermost first. Ops inside a backward formula are ops like any other: a mode active
during ``backward()`` sees them, and ``__genesis_backward__`` sees each graph node's run.

Example — count the ops a step runs::

    class OpCounter(genesis.dispatch.DispatchMode):
        def __init__(self):
            self.counts = collections.Counter()

        def __genesis_dispatch__(self, op, args, kwargs):
            self.counts[op.name] += 1
            return op(*args, **kwargs)

    with OpCounter() as counter:
        model(x).sum().backward()
    print(counter.counts.most_common(5))
"""

from __future__ import annotations

import functools
import re

__all__ = ["BackwardRun", "DispatchMode", "OpHandle", "REGISTRY", "registered_op"]

# The active modes, innermost last. Hot paths test this list for emptiness (the eager fast
# path runs only while it is empty), so it is a plain module-level list, shared by threads
# as genesis's autocast counter is.
_modes: list = []

REGISTRY: dict[str, OpHandle] = {}  # op name -> its handle


class OpHandle:
    """One registered op: its ``name`` and how to run it (``handle(*args, **kwargs)``).

    Calling the handle runs the op beneath the mode whose handler is running: modes entered
    before that one still see the call. ``function`` is the op's autograd ``Function`` (None
    for ops that are not Functions); ``is_backward`` marks a graph node's backward run.
    """

    __slots__ = ("name", "function", "_run", "is_backward")

    def __init__(self, name: str, run, function=None, is_backward: bool = False):
        self.name = name
        self.function = function
        self._run = run
        self.is_backward = is_backward

    def __call__(self, *args, **kwargs):
        if _modes:
            return intercept(self, args, kwargs)
        return self._run(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<op {self.name}>"


class DispatchMode:
    """A context manager that sees every op call while active (torch's ``TorchDispatchMode``).

    Subclass it and override ``__genesis_dispatch__``; ``with MyMode():`` turns it on for
    the block. Modes nest: the innermost sees a call first and its ``op(...)`` passes the
    call on to the next one out.

    Example:
        >>> class NanDetector(DispatchMode):
        ...     def __genesis_dispatch__(self, op, args, kwargs):
        ...         out = op(*args, **kwargs)
        ...         for t in (out if isinstance(out, tuple) else (out,)):
        ...             if isinstance(t, genesis.Tensor) and t.dtype.is_floating_point \\
        ...                     and t.isnan().any():
        ...                 raise FloatingPointError(f"{op.name} produced a NaN")
        ...         return out
    """

    def __genesis_dispatch__(self, op: OpHandle, args: tuple, kwargs: dict):
        """Called for every op while the mode is active; runs it with ``op(*args, **kwargs)``
        and returns its result (the default: nothing else)."""
        return op(*args, **kwargs)

    def __genesis_backward__(self, node, run):
        """Called for every graph node ``backward()`` runs while the mode is active:
        ``run()`` runs the node's backward formula and returns its gradients (the default:
        nothing else); ``run.grads`` are the gradients of the node's outputs. The formula's
        own ops reach ``__genesis_dispatch__``."""
        return run()

    def __enter__(self):
        _modes.append(self)
        return self

    def __exit__(self, *exc) -> None:
        for i in range(len(_modes) - 1, -1, -1):  # (the innermost copy of this mode)
            if _modes[i] is self:
                del _modes[i]
                return
        raise RuntimeError(f"{type(self).__name__} exited without having been entered")


def intercept(op: OpHandle, args: tuple, kwargs: dict):
    """Hand a call to the innermost active mode, that mode off while its handler runs."""
    mode = _modes.pop()
    try:
        return mode.__genesis_dispatch__(op, args, kwargs)
    finally:
        _modes.append(mode)


def intercept_backward(node, run, grads: tuple = ()):
    """Hand a graph node's backward run to the active modes, innermost first (each gets a
    ``BackwardRun``: call it to run the rest; its ``grads`` are the node's output grads)."""
    return _backward_through(len(_modes) - 1, node, run, grads)


class BackwardRun:
    """One node's backward run as a mode's ``__genesis_backward__`` gets it: calling it runs
    the formula (through the modes further out) and returns the gradients; ``grads`` holds
    the gradients of the node's outputs it runs on."""

    __slots__ = ("_run", "grads")

    def __init__(self, run, grads: tuple):
        self._run, self.grads = run, grads

    def __call__(self):
        return self._run()


def _backward_through(i: int, node, run, grads: tuple):
    if i < 0:
        return run()
    inner = BackwardRun(lambda: _backward_through(i - 1, node, run, grads), grads)
    return _modes[i].__genesis_backward__(node, inner)


def op_name_of(cls_name: str) -> str:
    """The registry name of a Function class: ``ScaledDotProductAttention`` ->
    ``scaled_dot_product_attention``, ``RMSNorm`` -> ``rms_norm``; a leading underscore
    is dropped."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_",
                  cls_name.lstrip("_")).lower()


def register(handle: OpHandle) -> OpHandle:
    """Put ``handle`` in the registry. A name met twice keeps the first handle (a
    subclass of a Function, such as a test's, does not displace the op)."""
    REGISTRY.setdefault(handle.name, handle)
    return handle


def registered_op(name: str):
    """Make ``fn`` a registered op called ``name``: with a mode active the call goes to the
    mode first.

    Args:
        name: the op's registry name.

    Returns:
        A decorator: ``fn`` wrapped (its signature and docstring kept), with the op's handle
        as its ``op`` attribute.

    Example:
        >>> @registered_op("zeros")
        ... def zeros(*size, dtype=None, device=None): ...
    """

    def decorate(fn):
        handle = register(OpHandle(name, fn))

        @functools.wraps(fn)
        def dispatched(*args, **kwargs):
            if _modes:
                return intercept(handle, args, kwargs)
            return fn(*args, **kwargs)

        dispatched.op = handle
        return dispatched

    return decorate
