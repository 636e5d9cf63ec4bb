"""Tracing by execution: run the function once, recording every op call into segments.

``Tracer`` is a ``DispatchMode``. While the traced function runs (eagerly, for real: the
first call's results are the eager results), every op it calls reaches the tracer, which
runs it and appends an ``OpNode`` — the op's name, its arguments with ``Value``s in place of
tensors, its outputs — to the current segment. A tensor the trace has not seen before (no
traced op made it and it is not an argument: a parameter, a buffer, a captured global)
becomes a *captured* input.

A host read (``item``, ``tolist``, ``numpy``, ``nonzero``'s data-dependent shape) ends the
current segment with a ``HostStep``: the value the host saw is recorded (it becomes a
guard of the path), and tracing goes on in a new segment. A trace is so a path through a
tree: each host step has one child segment per value it has been seen to take.

To trace a new branch (a replay met a host value it had not seen), the function is run
again from the start under a tracer given the *prefix* already replayed: ops of the prefix
are not run again (their results are handed back from the replay's values, so in-place
edits and random draws are not repeated) until the diverging host step, after which
recording resumes.
"""

from __future__ import annotations

import os
import sys

from genesis.autograd.function import _TENSOR_TYPES
from genesis.compiler.graph import OpNode, Value, map_structure, map_values
from genesis.compiler.node_backward import CtxState, UntraceableError, backward_handle
from genesis.dispatch import DispatchMode

__all__ = ["GraphBreakError", "HOST_OPS", "HostStep", "Segment", "Tracer", "user_source"]

# Ops whose result the Python host needs (a graph break each).
HOST_OPS = frozenset({"item", "tolist", "numpy", "nonzero"})


class GraphBreakError(RuntimeError):
    """``genesis.compile(..., fullgraph=True)`` met an op that needs the host."""


class HostStep:
    """A graph break: an op whose result the host reads, and the result seen at trace time.

    Attributes:
        op, handle, args, kwargs, source: as ``OpNode``'s.
        key: the hashable outcome recorded (a number, a nested tuple, an output shape).
        outputs: Values the step makes (``nonzero``'s indices), usually ``()``.
    """

    def __init__(self, handle, args, kwargs, source: str):
        self.op, self.handle, self.args, self.kwargs = handle.name, handle, args, kwargs
        self.source = source
        self.outputs: tuple = ()
        self.result = None

    def run(self, env: dict):
        """Run the host op on the values of ``env``; returns ``(result, key)``."""
        args = map_values(self.args, lambda v: env[v.id])
        kwargs = map_values(self.kwargs, lambda v: env[v.id])
        result = self.handle(*args, **kwargs)
        return result, outcome_key(result)

    def __str__(self) -> str:
        return f"graph break: {self.op}({', '.join(map(repr, self.args))})  # {self.source}"


def outcome_key(result):
    """The hashable guard value of a host op's result (a tensor result: its shape)."""
    if type(result) in _TENSOR_TYPES:
        return ("shape", tuple(result.shape))
    if isinstance(result, (list, tuple)):
        return tuple(outcome_key(r) for r in result)
    if hasattr(result, "tobytes"):  # a numpy array
        return ("array", result.shape, str(result.dtype), result.tobytes())
    return result


class Segment:
    """Op nodes up to a graph break (``host``) or to the return (``host is None``).

    ``children`` maps each host outcome seen to the segment traced after it; ``graph`` and
    ``run`` are filled in when the segment is compiled.
    """

    def __init__(self, nodes: list, host: HostStep | None):
        self.nodes, self.host = nodes, host
        self.children: dict = {}
        self.graph = None
        self.run = None
        self.result = None  # the last segment: the function's return value, Values inside


class Tracer(DispatchMode):
    """Records the ops of one run of the traced function.

    Args:
        next_id: a one-element list, the next Value id (shared by all of a compiled
            function's traces, so ids are unique across them).
        known: ``id(tensor) -> (tensor, Value)`` of the tensors the trace starts with.
        capture: whether an unknown tensor becomes a captured input (forward) or an error
            (backward: ``UntraceableError``).
        fullgraph: raise ``GraphBreakError`` at a host read rather than break.
        prefix: items (``OpNode``s and ``(HostStep, result)`` pairs) to fast-forward through.
        env: ``Value id -> tensor`` of the prefix's values.
    """

    def __init__(self, next_id: list, known: dict, *, capture: bool = True,
                 fullgraph: bool = False, prefix=(), env=None, whole_nodes: bool = False):
        self.next_id, self.known, self.capture = next_id, known, capture
        self.fullgraph = fullgraph
        self.prefix, self.pos, self.env = list(prefix), 0, env or {}
        self.nodes: list = []
        self.segments: list[Segment] = []
        self.captured: list = []  # (tensor, Value), in the order met
        self.tensors: dict = {}  # Value id -> the tensor it stood for in this run
        self.suspended = 0  # > 0: ops run unrecorded (inside a whole-node backward)
        self.whole_nodes = whole_nodes  # record every backward formula as one node
        self.opaque = ""  # why the trace cannot be replayed ("": it can)
        self._made_objects: dict = {}  # id -> non-tensor object an op returned

    # ------------------------------------------------------------------ values
    def new_value(self, t) -> Value:
        """A fresh Value describing tensor ``t``, remembered as ``t``'s."""
        v = Value(self.next_id[0], tuple(t.shape), t.dtype, t.device, tuple(t.stride()))
        self.next_id[0] += 1
        self.known[id(t)] = (t, v)  # (holding t keeps its id from being reused)
        self.tensors[v.id] = t
        return v

    def is_known(self, t) -> bool:
        hit = self.known.get(id(t))
        return hit is not None and hit[0] is t

    def value_of(self, t) -> Value:
        hit = self.known.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1]
        if not self.capture:
            raise UntraceableError(
                f"a {t.dtype} tensor of shape {tuple(t.shape)} reached an op without coming "
                "from a traced op")
        v = self.new_value(t)
        self.captured.append((t, v))
        return v

    def spec(self, obj):
        """``obj`` (args, kwargs, a result) with Values in place of its tensors."""
        return map_structure(obj, self.value_of, _is_tensor)

    def outputs_of(self, out):
        """``(result spec, output Values)`` of an op's return value, new Values for its
        tensors."""
        if type(out) in _TENSOR_TYPES:
            v = self.new_value(out)
            return v, (v,)
        if isinstance(out, (tuple, list)):
            spec = map_structure(out, self.new_value, _is_tensor)
            found: list = []
            map_values(spec, lambda v: found.append(v) or v)
            return spec, tuple(found)
        return out, ()

    def bind(self, result_spec, result) -> None:
        """Remember the tensors of ``result`` as the Values of ``result_spec``."""
        if type(result_spec) is Value:
            self.known[id(result)] = (result, result_spec)
        elif isinstance(result_spec, (tuple, list)):
            for s, r in zip(result_spec, result):
                self.bind(s, r)

    # -------------------------------------------------------------- recording
    def __genesis_dispatch__(self, op, args, kwargs):
        if self.pos < len(self.prefix):
            return self._fast_forward(op)
        if self.suspended:
            return op(*args, **kwargs)
        if op.name in HOST_OPS:
            return self._host(op, args, kwargs)
        sargs, skwargs = self.spec(args), self.spec(kwargs)
        if not self.opaque:
            self._check_constants(op, (args, kwargs))
        out = op(*args, **kwargs)
        result, outs = self.outputs_of(out)
        self._note_objects(result)
        node = OpNode(op.name, op, sargs, skwargs, outs, user_source(), result)
        if outs and op.function is not None:
            self._note_saved(node, self.tensors[outs[0].id].grad_fn, op.function)
        self.nodes.append(node)
        return out

    def _check_constants(self, op, args) -> None:
        """Note (``opaque``) an argument a replay could not reproduce: a backend array, or a
        non-tensor object an earlier op returned (it would be baked in as a constant)."""
        for obj in _objects_in(args):
            if id(obj) in self._made_objects or (hasattr(obj, "shape")
                                                  and hasattr(obj, "dtype")):
                self.opaque = (f"`{op.name}` at {user_source()} got a {type(obj).__name__} "
                               "that no traced op made as a tensor")
                return

    def _note_objects(self, result) -> None:
        for obj in _objects_in(result):
            self._made_objects[id(obj)] = obj

    def _note_saved(self, node: OpNode, ctx, fn) -> None:
        """Give the tensors ``fn``'s forward saved internally (no Value yet) Values."""
        if getattr(ctx, "_fn", None) is not fn or not ctx._saved:
            return
        saved = tuple(None if t is None or self.is_known(t) else self.new_value(t)
                      for t in ctx.saved_values())
        if any(v is not None for v in saved):
            node.saved, node.needs_input_grad = saved, ctx.needs_input_grad

    def __genesis_backward__(self, node, run):
        if self.capture or self.suspended:  # (a forward trace records ops only)
            return run()
        mark, result = len(self.nodes), None
        if not self.whole_nodes:
            try:
                result = run()
                if all(type(r) not in _TENSOR_TYPES or self.is_known(r) for r in result):
                    return result  # the formula's ops are recorded: the graph holds them
            except UntraceableError:
                result = None
            del self.nodes[mark:]  # record the formula as one node instead
        if result is None:
            self.suspended += 1
            try:
                result = run()
            finally:
                self.suspended -= 1
        handle = backward_handle(node._fn)
        args = (self.spec(node.saved_values()), self.spec(tuple(run.grads)))
        result = tuple(result)
        spec, outs = self.outputs_of(result)
        self.nodes.append(OpNode(handle.name, handle, args, {"ctx": CtxState(node)}, outs,
                                 user_source(), spec))
        return result

    def _host(self, op, args, kwargs):
        source = user_source()
        if self.fullgraph:
            raise GraphBreakError(
                f"genesis.compile(fullgraph=True): `{op.name}` needs its result on the host "
                f"(a graph break) at {source}")
        step = HostStep(op, self.spec(args), self.spec(kwargs), source)
        out = op(*args, **kwargs)
        step.result, step.outputs = self.outputs_of(out)
        step.key = outcome_key(out)
        self.segments.append(Segment(self.nodes, step))
        self.nodes = []
        return out

    def _fast_forward(self, op):
        item = self.prefix[self.pos]
        self.pos += 1
        if isinstance(item, OpNode):
            expected, spec = item.op, item.result
            result = map_values(spec, lambda v: self.env[v.id])
        else:
            step, result = item
            expected, spec = step.op, step.result
        if op.name != expected:
            raise RuntimeError(
                f"genesis.compile: the function called `{op.name}` where its earlier run "
                f"called `{expected}` (at {getattr(item, 'source', '')}): tracing needs the "
                "same ops for the same inputs and host values")
        self.bind(spec, result)
        return result

    def finish(self, result) -> list[Segment]:
        """Close the trace on the function's return value; returns the path's segments."""
        last = Segment(self.nodes, None)
        last.result = self.spec(result)
        self.segments.append(last)
        self.nodes = []
        return self.segments


def _is_tensor(obj) -> bool:
    return type(obj) in _TENSOR_TYPES


_PLAIN = (int, float, bool, str, bytes, complex, type(None), slice, range, type, Value)


def _objects_in(obj) -> list:
    """The parts of ``obj`` (args or a result) that are no container, tensor, Value or plain
    constant: dtypes, devices, generators, backend arrays, any other object."""
    found: list = []

    def leaf(o) -> bool:
        if type(o) in _TENSOR_TYPES or isinstance(o, _PLAIN):
            return True
        if isinstance(o, (tuple, list, dict)):
            return False
        found.append(o)
        return True

    map_structure(obj, lambda o: o, leaf)
    return found


def user_source() -> str:
    """``"file.py:123"`` of the innermost frame outside the genesis packages."""
    # (genesis's __path__ spans the installed distributions: nn, llm ... are genesis too)
    roots = tuple(os.path.join(p, "") for p in sys.modules["genesis"].__path__)
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(roots):
            return f"{os.path.basename(name)}:{frame.f_lineno}"
        frame = frame.f_back
    return ""
