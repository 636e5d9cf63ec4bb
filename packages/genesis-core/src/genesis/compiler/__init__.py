"""``genesis.compile``: trace a function or module into graphs of genesis ops and replay them.

The pieces, one job each: ``graph`` (Value, OpNode, Graph: the contract with backends),
``tracer`` (tracing by execution through a dispatch mode; graph breaks), ``guards`` (when a
trace may be replayed), ``replay`` (core's replay without per-op dispatch), ``backward``
(the traced backward and the compiled region's autograd node), ``recompute`` (which
intermediates the forward keeps for the backward and which the backward makes again),
``compiled`` (the cache of traces and the calls). The tutorial ``docs/tutorials/compiler.md``
walks through them.
"""

from __future__ import annotations

import warnings

from genesis.compiler import compiled as _compiled
from genesis.compiler.compiled import CompiledFunction
from genesis.compiler.graph import Graph, OpNode, Value
from genesis.compiler.recompute import SavedBytes
from genesis.compiler.tracer import GraphBreakError

__all__ = ["CompiledFunction", "Graph", "GraphBreakError", "OpNode", "SavedBytes", "Value",
           "compile", "get_cache_size_limit", "set_cache_size_limit"]


def compile(model_or_fn=None, *, fullgraph: bool = False, dynamic: bool | None = None,
            mode: str | None = None, options: dict | None = None):
    """Compile a function or a module: trace it on first call, replay the graph afterwards.

    The first call for each guard key (input shapes, dtypes, devices and requires_grad,
    non-tensor arguments, grad mode, autocast state, train/eval, the parameters used) runs
    eagerly while every op is recorded; later calls replay the recorded graphs — through
    the device backend's ``compile_graph`` hook where it has one, else core's replay. With
    grad on, the backward is traced too, and the outputs' ``grad_fn`` runs it. A host read
    (``.item()``, ``if tensor:``, ``.tolist()``, ``nonzero``) is a graph break.

    Args:
        model_or_fn: a function, a bound method, or an ``nn.Module`` (its call is compiled;
            the result shares its parameters and forwards attributes to it). Omitted: a
            decorator with these settings is returned.
        fullgraph: raise ``GraphBreakError`` (naming the op and the source line) at a graph
            break instead of splitting there.
        dynamic: ``None`` or ``False``: shapes are specialised (a new shape is a new
            trace). ``True`` (torch: one graph for every size) is not supported: it warns
            once and specialises too.
        mode: passed to the backend's hook as ``options["mode"]`` (e.g. ``"reduce-overhead"``).
        options: ``{"recompute": False}`` keeps for backward every intermediate eager
            autograd keeps (default True: cheap elementwise ones are recomputed by the
            backward, ``compiler.recompute``; ``compiled.saved_bytes()`` reports both);
            ``{"backward": "nodes"}`` records each gradient formula as one node; the rest
            goes to the backend (e.g. ``{"debug_dir": ...}`` for the CUDA backend).

    Returns:
        A ``CompiledFunction``: call it as the original.

    Raises:
        TypeError: ``model_or_fn`` is not callable, or ``dynamic`` is not a bool or None.

    Example:
        >>> model = genesis.nn.Linear(8, 4)
        >>> fast = genesis.compile(model)
        >>> y = fast(genesis.randn(2, 8))       # traced
        >>> y = fast(genesis.randn(2, 8))       # replayed
        >>> @genesis.compile(fullgraph=True)
        ... def gelu_ish(x):
        ...     return x * (1.702 * x).sigmoid()
    """
    if model_or_fn is None:
        return lambda fn: compile(fn, fullgraph=fullgraph, dynamic=dynamic, mode=mode,
                                  options=options)
    if not callable(model_or_fn):
        raise TypeError(f"genesis.compile expected a callable (a function or a module), got "
                        f"{type(model_or_fn).__name__}")
    if dynamic not in (None, True, False):
        raise TypeError(f"genesis.compile: dynamic must be True, False or None, got "
                        f"{dynamic!r}")
    if dynamic:
        warnings.warn("genesis.compile(dynamic=True): dynamic shapes are not supported; each "
                      "new input shape is traced and compiled anew (up to "
                      f"{_compiled.cache_size_limit} shapes, then eager)", stacklevel=2)
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"genesis.compile: options must be a dict, got "
                        f"{type(options).__name__}")
    opts = dict(options or {})
    if mode is not None:
        opts["mode"] = mode
    # a module: compile its call (hooks included), keeping the module for attributes
    module = hasattr(model_or_fn, "_compile_guard_state")  # (duck-typed: core has no nn)
    fn = model_or_fn.__call__ if module else model_or_fn
    return CompiledFunction(fn, model_or_fn, fullgraph=fullgraph, options=opts)


def get_cache_size_limit() -> int:
    """How many guard keys a compiled callable traces before running eagerly (8).

    Returns:
        An int.
    """
    return _compiled.cache_size_limit


def set_cache_size_limit(n: int) -> None:
    """Set how many guard keys a compiled callable traces before running eagerly.

    Args:
        n: a positive int.
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"the cache size limit must be a positive int, got {n!r}")
    _compiled.cache_size_limit = n
