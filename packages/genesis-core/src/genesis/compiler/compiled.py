"""``CompiledFunction``: the cache of traces of one compiled callable, and its calls.

A call computes its guard key (``guards``); a cache entry for the key (whose captured
tensors still match) replays, otherwise the call is traced — run eagerly under a
``Tracer`` — and its graphs are compiled (the backend's hook, or core's replay). After
``cache_size_limit`` keys the callable runs eagerly, with one warning (torch's
``cache_size_limit``).

An entry is one of three kinds:

* *replay* — no grad needed: the forward graph (or the tree of segments between graph
  breaks) replays bare;
* *region* — grad needed and the backward traced: one ``CompiledRegion`` node runs the
  forward graph and, at backward, the backward graph;
* *record* — grad needed but the backward could not be traced (or the trace has graph
  breaks): the graphs replay through the dispatcher, which records autograd's graph as
  eager does.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from contextlib import ExitStack, contextmanager

from genesis.autocast import _state as _autocast_state
from genesis.autograd.function import recorded
from genesis.autograd.grad_mode import _state as _grad_state
from genesis.backends.registry import loaded_backends
from genesis.compiler.backward import CompiledRegion, trace_backward
from genesis.compiler.graph import Region, Value, map_values
from genesis.compiler.guards import captured_ok, guard_key
from genesis.compiler.node_backward import UntraceableError
from genesis.compiler.replay import build_graph, replay_callable
from genesis.compiler.tracer import Tracer
from genesis.dispatch import _modes
from genesis.ops.common import VALUE_CHECKS

__all__ = ["CompiledFunction", "cache_size_limit"]

cache_size_limit = 8  # guard keys traced per compiled callable before it runs eagerly


class CompiledFunction:
    """A compiled callable (what ``genesis.compile`` returns for a function or a module).

    Calling it is calling the original; attributes it does not have are the original's
    (``compiled.parameters()``, ``compiled.train()`` on a compiled module).

    Example:
        >>> f = genesis.compile(lambda x: (x * 2).exp())
        >>> f(genesis.ones(3))            # traced on this first call, replayed after
        >>> print(f.graphs()[0])
    """

    def __init__(self, fn, target, *, fullgraph: bool, options: dict):
        self._fn, self._orig = fn, target
        self._owner = getattr(fn, "__self__", None)
        self.fullgraph, self.options = fullgraph, options
        self._entries: dict = {}
        self._warned = False
        functools.update_wrapper(self, fn, updated=())

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("_orig", "_fn"):
            raise AttributeError(name)
        return getattr(self._orig, name)

    def __deepcopy__(self, memo):  # (traces are not copied: a copied module compiles anew)
        return self

    def __get__(self, obj, objtype=None):  # a decorated method binds its instance
        return self if obj is None else functools.partial(self, obj)

    def __call__(self, *args, **kwargs):
        if _modes:  # an outer trace or a profiler: let it see the ops
            return self._fn(*args, **kwargs)
        key, tensors = guard_key(args, kwargs, self._owner)
        entry = self._entries.get(key)
        if entry is not None and captured_ok(entry.captured):
            return entry.call(tensors, args, kwargs)
        if entry is None and len(self._entries) >= cache_size_limit:
            if not self._warned:
                warnings.warn(f"genesis.compile: {getattr(self._fn, '__name__', self._fn)} "
                              f"was traced for {cache_size_limit} different guard keys "
                              "(shapes, dtypes, constants, modes): it runs eagerly from now on",
                              stacklevel=2)
                self._warned = True
            return self._fn(*args, **kwargs)
        entry = _Entry(self)
        result = entry.trace(tensors, args, kwargs)
        self._entries[key] = entry
        return result

    def graphs(self) -> list:
        """Every graph traced so far (forward, backward, segments), for printing."""
        found = []
        for entry in self._entries.values():
            found += entry.graphs()
        return found

    def saved_bytes(self) -> list:
        """What each traced training region keeps for its backward, without and with
        recomputation (``options={"recompute": False}`` turns recomputation off).

        Returns:
            One ``genesis.compiler.recompute.SavedBytes`` per guard key whose backward was
            traced, in the order traced.

        Example:
            >>> f = genesis.compile(lambda x: (x.sigmoid() * x).sum())
            >>> f(genesis.randn(64, requires_grad=True)).backward()
            >>> print(f.saved_bytes()[0])
            saved for backward: 1 tensors, 256 B -> 0 tensors, 0 B (1 ops recomputed)
        """
        return [e.plan.saved_bytes for e in self._entries.values() if e.plan is not None]

    def __repr__(self) -> str:
        return f"<compiled {self._orig!r}>"


class _Entry:
    """The traces of one guard key: a tree of segments, or a forward/backward pair."""

    def __init__(self, compiled: CompiledFunction):
        self.compiled = compiled
        self.next_id = [0]
        self.inputs: list[Value] = []
        self.captured: list = []  # (tensor, Value, requires_grad)
        self.root = None
        self.plan = None  # a BackwardPlan: the region kind
        self.record = False
        self.eager = False  # the trace cannot be replayed: this key runs eagerly

    # ----------------------------------------------------------------- tracing
    def trace(self, tensors: list, args: tuple, kwargs: dict):
        with _backends_tracing():
            return self._trace(tensors, args, kwargs)

    def _trace(self, tensors: list, args: tuple, kwargs: dict):
        tracer = Tracer(self.next_id, {}, fullgraph=self.compiled.fullgraph)
        self.inputs = [tracer.new_value(t) for t in tensors]
        result = self._run_traced(tracer, args, kwargs)
        segments = tracer.finish(result)
        self._add_captured(tracer.captured)
        if tracer.opaque:
            warnings.warn(f"genesis.compile: {tracer.opaque}; calls with these guards run "
                          "eagerly", stacklevel=3)
            self.eager = True
            return result
        all_inputs = list(zip(tensors, self.inputs)) + [(t, v) for t, v, _ in self.captured]
        need_grad = _grad_state.enabled and any(t.requires_grad for t, _ in all_inputs)
        self.root = segments[0]
        if need_grad and len(segments) == 1:
            try:
                self._trace_backward(tracer, all_inputs)
            except UntraceableError:
                self.record = True
        else:
            self.record = need_grad
        if self.plan is None:
            self._compile_path(segments, [v for _, v in all_inputs])
        return result

    def _run_traced(self, tracer: Tracer, args: tuple, kwargs: dict):
        cache = _autocast_state.cache
        _autocast_state.cache = {}  # weight casts made before the trace would be constants
        VALUE_CHECKS.off += 1  # (range checks of indices would read values: not replayed)
        try:
            with tracer:
                return self.compiled._fn(*args, **kwargs)
        finally:
            _autocast_state.cache = cache
            VALUE_CHECKS.off -= 1

    def _trace_backward(self, tracer: Tracer, all_inputs: list) -> None:
        seg = self.root
        made = {v.id for node in seg.nodes for v in node.outputs}
        outs = [v for v in dict.fromkeys(_values_in(seg.result)) if v.id in made]
        tensors = [tracer.tensors[v.id] for v in outs]
        options = self.compiled.options
        plan = trace_backward(tracer, seg.nodes, all_inputs, outs, tensors,
                              whole_nodes=options.get("backward") == "nodes",
                              recompute=options.get("recompute", True))
        if os.environ.get("GENESIS_COMPILE_DEBUG") == "1":
            print(f"# genesis.compile: {getattr(self.compiled._fn, '__qualname__', '')}: "
                  f"{plan.saved_bytes}", file=sys.stderr)
        region = {**options, "region": Region()}  # (the two graphs may share memory)
        plan.run_forward = compile_graph(plan.forward_graph, region)
        plan.run_backward = compile_graph(plan.backward_graph, region)
        self.plan = plan

    def _compile_path(self, segments: list, leading: list) -> None:
        for seg, nxt in zip(segments, segments[1:]):
            seg.children[seg.host.key] = nxt
        for i, seg in enumerate(segments):
            if seg.host is None:
                outputs = list(dict.fromkeys(_values_in(seg.result)))
                kind = "forward" if i == 0 and seg is self.root else "segment"
            else:  # every Value made before a break may be read after it
                outputs = [v for node in seg.nodes for v in node.outputs]
                kind = "segment"
            seg.graph = build_graph(seg.nodes, leading if seg is self.root else [], outputs,
                                    kind)
            if seg.host is not None:
                seg.graph.breaks_at = str(seg.host)
            seg.run = compile_graph(seg.graph, self.compiled.options, self.record)

    def _add_captured(self, captured: list) -> None:
        self.captured += [(t, v, t.requires_grad) for t, v in captured]

    # ----------------------------------------------------------------- replay
    def call(self, tensors: list, args: tuple, kwargs: dict):
        if self.eager:
            return self.compiled._fn(*args, **kwargs)
        inputs = tensors + [t for t, _, _ in self.captured]
        plan = self.plan
        if plan is not None:
            graph = plan.forward_graph
            outs = recorded(CompiledRegion, (plan, *inputs), {})
            env = dict(zip((v.id for v in graph.inputs), inputs))
            env.update(zip((v.id for v in graph.outputs), outs))
            return map_values(self.root.result, lambda v: env[v.id])
        env = dict(zip((v.id for v in self.inputs), tensors))
        env.update((v.id, t) for t, v, _ in self.captured)
        seg, path = self.root, []
        while True:
            outs = seg.run([env[v.id] for v in seg.graph.inputs])
            env.update(zip((v.id for v in seg.graph.outputs), outs))
            if seg.host is None:
                return map_values(seg.result, lambda v: env[v.id])
            result, key = seg.host.run(env)
            _bind(seg.host.result, result, env)
            path += seg.nodes
            path.append((seg.host, result))
            child = seg.children.get(key)
            if child is None:
                return self._branch(seg, key, path, env, tensors, args, kwargs)
            seg = child

    def _branch(self, seg, key, path: list, env: dict, tensors: list, args, kwargs):
        """Trace the path after a host outcome not seen before: the function runs again,
        fast-forwarding through what this call already replayed."""
        known = {id(t): (t, v) for t, v in zip(tensors, self.inputs)}
        known.update((id(t), (t, v)) for t, v, _ in self.captured)
        tracer = Tracer(self.next_id, known, prefix=path, env=env)
        with _backends_tracing():
            result = self._run_traced(tracer, args, kwargs)
            if tracer.pos < len(tracer.prefix):
                raise RuntimeError("genesis.compile: the function returned before the graph "
                                   f"break it took at trace time ({seg.host})")
            segments = tracer.finish(result)
            self._add_captured(tracer.captured)
            if len(seg.children) < cache_size_limit:
                seg.children[key] = segments[0]
                self._compile_path(segments, [])
        return result

    def graphs(self) -> list:
        if self.eager:
            return []
        if self.plan is not None:
            return [self.plan.forward_graph, self.plan.backward_graph]
        found, stack = [], [self.root]
        while stack:
            seg = stack.pop(0)
            if seg.graph is not None:
                found.append(seg.graph)
            stack += list(seg.children.values())
        return found


@contextmanager
def _backends_tracing():
    """Every loaded backend's ``tracing()`` context, held while a call is traced."""
    with ExitStack() as stack:
        for backend in loaded_backends():
            stack.enter_context(backend.tracing())
        yield


def compile_graph(graph, options: dict, record: bool = False):
    """The callable that runs ``graph``: its device's backend hook's, else core's replay.

    Args:
        graph: a traced Graph.
        options: ``genesis.compile``'s ``options`` (with ``mode``), passed to the hook.
        record: replay through the dispatcher (autograd recording; no backend hook).

    Returns:
        ``run(inputs: list) -> list``.
    """
    if not record:
        device = _device_of(graph)
        if device is not None:
            run = device.backend.compile_graph(graph, options)
            if run is not None:
                return run
    return replay_callable(graph, record)


def _device_of(graph):
    for v in graph.inputs:
        return v.device
    for node in graph.nodes:
        for v in node.outputs:
            return v.device
    return None


def _values_in(spec) -> list:
    found: list = []
    map_values(spec, lambda v: found.append(v) or v)
    return found


def _bind(spec, result, env: dict) -> None:
    if type(spec) is Value:
        env[spec.id] = result
    elif isinstance(spec, (tuple, list)):
        for s, r in zip(spec, result):
            _bind(s, r, env)
