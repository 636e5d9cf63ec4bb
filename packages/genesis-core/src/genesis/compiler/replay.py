"""Core's replay: run a traced ``Graph`` again without the per-op Python dispatch.

``replay_callable(graph)`` turns a graph into the callable the backend contract asks for
(``inputs: list[Tensor] -> outputs: list[Tensor]``): a Python function generated from the
graph, one line per node, calling the op's own implementation (a Function's ``forward``
with the no-grad context, a registered op's function) on local variables. Nothing is
decided again per call: no mode check, no autocast (the trace's casts are nodes), no
grad-mode test, no graph recording; a tensor no later line reads is deleted right after
its last reader (a replay holds no more memory than eager). The source is readable —
``replay_callable(graph).source`` — for instance::

    def replay(inputs):
        v0, v1, v2 = inputs
        v3 = linear_0(v0, v1, v2)                        # model.py:12
        v4 = relu_1(v3)                                  # model.py:13
        del v3
        return [v4]

``record=True`` replays through the ops' handles instead (the full dispatcher, recording
autograd's graph as eager does): the fallback for a region whose backward could not be
traced.
"""

from __future__ import annotations

import functools

from genesis.autograd.function import _NO_GRAD_CTX
from genesis.autograd.grad_mode import _state as _grad_state
from genesis.compiler.graph import Graph, Value, map_values
from genesis.compiler.node_backward import run_saving

__all__ = ["build_graph", "replay_callable"]


def build_graph(nodes: list, leading: list, outputs: list, kind: str) -> Graph:
    """A Graph of ``nodes``: inputs are ``leading`` then every other Value the nodes read
    that none of them made (in order of first use).

    Args:
        nodes: the OpNodes, in order.
        leading: Values that come first among the inputs (the call's tensors).
        outputs: the Values to hand back (``None`` entries allowed).
        kind: ``"forward"``, ``"backward"`` or ``"segment"``.

    Returns:
        The Graph.
    """
    inputs = list(dict.fromkeys(leading))
    seen = {v.id for v in inputs}
    for node in nodes:
        for v in node.inputs():
            if v.id not in seen:
                seen.add(v.id)
                inputs.append(v)
        seen.update(v.id for v in node.outputs)
        seen.update(v.id for v in node.saved if v is not None)
    for v in outputs:
        if v is not None and v.id not in seen:  # an output no node made: pass it through
            seen.add(v.id)
            inputs.append(v)
    return Graph(inputs, list(nodes), list(outputs), kind)


def _implementation(handle):
    """The op without its dispatcher: a Function's forward, or a registered op's body."""
    fn = handle.function
    if fn is not None:
        return functools.partial(fn.forward, _NO_GRAD_CTX)
    return handle._run


def replay_callable(graph: Graph, record: bool = False):
    """Core's replay of ``graph``: a callable taking the input tensors (``graph.inputs``
    order) and returning the output tensors (``graph.outputs`` order).

    Args:
        graph: the traced graph.
        record: run the ops through their dispatcher with autograd recording (eager's
            path, op by op) rather than their bare implementations.

    Returns:
        ``run(inputs: list) -> list``, with the generated Python as ``run.source``.

    Example:
        >>> run = replay_callable(graph)
        >>> (y,) = run([x, weight, bias])
        >>> print(run.source)
    """
    gen = _Generator()
    wanted = {v.id for v in graph.outputs if v is not None}
    inputs = [gen.name(v) for v in graph.inputs]
    body = [f"{', '.join(inputs)}{',' if len(inputs) == 1 else ''} = inputs"] if inputs else []
    lines = []  # (code, Values it reads)
    for node in graph.nodes:
        fn = node.handle if record else _implementation(node.handle)
        out = node.result
        if not record and any(v is not None and v.id in wanted for v in node.saved):
            # a backward graph reads what this op's forward saved: run it keeping that too
            fn = functools.partial(run_saving, node.handle.function, node.needs_input_grad)
            out = (out, node.saved)
        call = f"{gen.const(fn, node.op)}({gen.call_args(node.args, node.kwargs)})"
        code = f"{gen.target(out)} = {call}" if _values_in(out) else call
        lines.append((f"{code:<56} # {node.source}" if node.source else code,
                      node.inputs(), _values_in(out)))
    keep = wanted | {v.id for v in graph.inputs}
    body += _with_deletes(lines, keep)
    outs = ", ".join("None" if v is None else gen.name(v) for v in graph.outputs)
    body.append(f"return [{outs}]")
    source = "def replay(inputs):\n" + "".join(f"    {line}\n" for line in body)
    namespace = dict(gen.constants)
    exec(compile(source, f"<genesis.compile replay of {len(graph.nodes)} ops>", "exec"),
         namespace)
    run = namespace["replay"] if record else functools.partial(_without_grad,
                                                                namespace["replay"])
    run.source = source
    return run


def _without_grad(replay, inputs: list) -> list:
    prev = _grad_state.enabled
    _grad_state.enabled = False
    try:
        return replay(inputs)
    finally:
        _grad_state.enabled = prev


class _Generator:
    """Names for Values and constants of the generated source."""

    _LITERALS = (int, bool, str, type(None))

    def __init__(self):
        self.constants: dict = {}

    @staticmethod
    def name(v: Value) -> str:
        return f"v{v.id}"

    def const(self, obj, hint: str = "c") -> str:
        if type(obj) in self._LITERALS or (type(obj) is float and obj == obj
                                           and abs(obj) != float("inf")):
            return repr(obj)
        name = "".join(ch if ch.isalnum() else "_" for ch in hint)
        name = f"{name}_{len(self.constants)}" if name[:1].isalpha() else f"c_{len(self.constants)}"
        self.constants[name] = obj
        return name

    def expr(self, a) -> str:
        kind = type(a)
        if kind is Value:
            return self.name(a)
        if kind is tuple:
            return f"({''.join(self.expr(x) + ', ' for x in a)})"
        if kind is list:
            return f"[{', '.join(self.expr(x) for x in a)}]"
        if kind is dict:
            return f"{{{', '.join(f'{k!r}: {self.expr(x)}' for k, x in a.items())}}}"
        return self.const(a)

    def call_args(self, args: tuple, kwargs: dict) -> str:
        parts = [self.expr(a) for a in args]
        parts += [f"{k}={self.expr(a)}" if k.isidentifier() else f"**{{{k!r}: {self.expr(a)}}}"
                  for k, a in kwargs.items()]
        return ", ".join(parts)

    def target(self, out) -> str:
        """An assignment target for the op's result (``_`` for its non-tensor parts)."""
        if type(out) is Value:
            return self.name(out)
        if isinstance(out, (tuple, list)):
            inner = ", ".join(self.target(o) for o in out)
            return f"({inner}{',' if len(out) == 1 else ''})"
        return "_"


def _values_in(obj) -> list:
    found: list = []
    map_values(obj, lambda v: found.append(v) or v)
    return found


def _with_deletes(lines: list, keep: set) -> list:
    """The lines, each followed by ``del`` of the Values it read (or made) for the last
    time, except the inputs and outputs."""
    last: dict[int, int] = {}
    for i, (_, reads, made) in enumerate(lines):
        for v in (*reads, *made):
            last[v.id] = i
    body = []
    for i, (code, reads, made) in enumerate(lines):
        body.append(code)
        dead = sorted({v.id for v in (*reads, *made) if last[v.id] == i and v.id not in keep})
        if dead:
            body.append(f"del {', '.join(f'v{d}' for d in dead)}")
    return body
