"""Whole-node backward ops: a gradient formula the tracer cannot see into, as one graph op.

Most gradient formulas are made of dispatched ops, and the backward trace records those.
Some compute on backend arrays directly (the fused ops' backward kernels: cross-entropy,
attention, the norms; ``once_differentiable`` formulas), and some read tensors their
forward made internally and saved (cross-entropy's logsumexp, a norm's rstd). For those the
backward graph gets one node for the whole formula: ``<op>_backward``, a registered op
whose arguments are the node's saved tensors and output gradients and whose ``ctx``
keyword holds the rest of the autograd ctx (its Python attributes, as at trace time). The
forward graph then lists the internally saved tensors as outputs: the forward node that
made them has them in ``OpNode.saved``, and ``run_saving`` runs it returning them too.
"""

from __future__ import annotations

from genesis.autograd.function import _TENSOR_TYPES, _bump_versions
from genesis.dispatch import OpHandle, register

__all__ = ["CtxState", "UntraceableError", "backward_handle", "run_saving"]


class UntraceableError(RuntimeError):
    """A backward trace met a tensor no recorded op made and no whole-node op can stand
    for: that backward cannot be replayed, and the compiled call falls back to eager
    autograd (the forward replayed through the dispatcher)."""


# Node attributes that are graph wiring or saved tensors, not the formula's constants.
_HANDLES: dict = {}  # Function -> its whole-node backward op
_WIRING = frozenset({"_saved", "_saved_versions", "next_functions", "_hooks", "_post_hooks"})


class CtxState:
    """The Python attributes of an autograd ctx (``needs_input_grad``, what ``forward``
    stored on it), frozen at trace time: the constants of a whole-node backward op."""

    def __init__(self, node):
        self.attrs = {k: v for k, v in vars(node).items() if k not in _WIRING}
        for k, v in self.attrs.items():  # (a tensor or array here would be a stale constant)
            if type(v) in _TENSOR_TYPES or (hasattr(v, "shape") and hasattr(v, "dtype")):
                raise UntraceableError(f"{node.name()} keeps a {type(v).__name__} as ctx.{k}")

    def __repr__(self) -> str:
        shown = {k: v for k, v in self.attrs.items() if not k.startswith("_")}
        return f"ctx({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


def backward_handle(fn) -> OpHandle:
    """The registered op ``<fn's op name>_backward``: ``handle(saved, grads, ctx=state)``
    runs ``fn.backward`` on a ctx rebuilt from ``saved`` (a tuple of tensors) and ``state``
    (a ``CtxState``) and returns the gradients as a tuple."""
    handle = _HANDLES.get(fn)
    if handle is None:
        def run(saved: tuple, grads: tuple, *, ctx: CtxState):
            node = fn._backward_cls()
            node.__dict__.update(ctx.attrs)
            node._saved = saved
            node._saved_versions = tuple(None if t is None else t._version_box[0]
                                         for t in saved)
            result = fn.backward(node, *grads)
            return result if isinstance(result, tuple) else (result,)

        name = f"{fn.op.name if fn.op is not None else fn.__name__}_backward"
        handle = _HANDLES[fn] = OpHandle(name, run, is_backward=True)
        register(handle)  # (by name in REGISTRY too, unless an op already has the name)
    return handle


def run_saving(fn, needs_input_grad: tuple, *args, **kwargs):
    """Run Function ``fn``'s forward with a real ctx; returns ``(result, saved tensors)``.

    How a forward node whose ``saved`` Values a backward graph reads is replayed (the
    tensors its ctx saved are outputs too).

    Args:
        fn: the autograd Function (``OpNode.handle.function``).
        needs_input_grad: the ctx's flags as at trace time (``OpNode.needs_input_grad``).
        *args, **kwargs: the op's arguments.

    Returns:
        ``(what the op returns, the tuple its ctx saved)``.
    """
    ctx = fn._backward_cls()
    ctx.needs_input_grad = needs_input_grad
    out = fn.forward(ctx, *args, **kwargs)
    if ctx._dirty:
        _bump_versions(ctx._dirty)
    return out, ctx._saved or ()
