"""Core's replay: run a traced ``Graph`` again without the per-op Python dispatch.

``replay_callable(graph)`` turns a graph into the callable the backend contract asks for
(``inputs: list[Tensor] -> outputs: list[Tensor]``). Each node becomes one step: its op's
own implementation (a Function's ``forward`` with the no-grad context, a registered op's
function), its argument template with the slots to fill, the slots its outputs go to.
Nothing is decided again per call: no mode check, no autocast (the trace's casts are
nodes), no grad-mode test, no graph recording; tensors no later step reads are dropped as
soon as their last reader ran (a replay holds no more memory than eager).

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
        ``run(inputs: list) -> list``.

    Example:
        >>> run = replay_callable(graph)
        >>> (y,) = run([x, weight, bias])
    """
    slot: dict[int, int] = {}

    def slot_of(v: Value) -> int:
        return slot.setdefault(v.id, len(slot))

    n_in = len([slot_of(v) for v in graph.inputs])
    wanted = {v.id for v in graph.outputs if v is not None}
    steps = []
    for node in graph.nodes:
        fn = node.handle if record else _implementation(node.handle)
        out = node.result
        if not record and any(v is not None and v.id in wanted for v in node.saved):
            # a backward graph reads what this op's forward saved: run it keeping that too
            fn = functools.partial(run_saving, node.handle.function, node.needs_input_grad)
            out = (out, node.saved)
        if not any(type(a) is not Value and _has_value(a) for a in node.args) \
                and not _has_value(node.kwargs):  # Values at the top level only
            template = list(node.args)
            fill = tuple((i, slot_of(a)) for i, a in enumerate(node.args) if type(a) is Value)
            kwargs = node.kwargs or None
        else:
            template = map_values((node.args, node.kwargs), lambda v: _Slot(slot_of(v)))
            fill = kwargs = None
        if type(out) is Value:
            out_slots = slot_of(out)
        elif not _has_value(out):
            out_slots = ()
        elif all(type(o) is Value or not _has_value(o) for o in out):
            out_slots = tuple((i, slot_of(o)) for i, o in enumerate(out) if type(o) is Value)
        else:  # nested (an op kept with its saved tensors)
            out_slots = list(map_values(out, lambda v: _Slot(slot_of(v))))
        steps.append([fn, template, fill, kwargs, out_slots, ()])
    out_slots = [None if v is None else slot_of(v) for v in graph.outputs]
    _plan_frees(steps, set(s for s in out_slots if s is not None), n_in)
    n_slots = len(slot)
    return functools.partial(_run if not record else _run_recording, steps, n_in, n_slots,
                             out_slots)


class _Slot:
    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


def _has_value(obj) -> bool:
    found = []
    map_values(obj, lambda v: found.append(v) or v)
    return bool(found)


def _resolve(spec, env):
    kind = type(spec)
    if kind is _Slot:
        return env[spec.i]
    if kind is tuple or kind is list:
        return kind(_resolve(a, env) for a in spec)
    if kind is dict:
        return {k: _resolve(a, env) for k, a in spec.items()}
    return spec


def _bind(spec, result, env) -> None:
    kind = type(spec)
    if kind is _Slot:
        env[spec.i] = result
    elif kind is tuple or kind is list:
        for s, r in zip(spec, result):
            _bind(s, r, env)


def _plan_frees(steps: list, keep: set, n_in: int) -> None:
    """Give each step the slots its run is the last reader of (dropped right after)."""
    last: dict[int, int] = {}
    for i, (_, template, fill, _, _, _) in enumerate(steps):
        reads = [s for _, s in fill] if fill is not None else _slots_in(template)
        for s in reads:
            last[s] = i
    for s, i in last.items():
        if s not in keep and s >= n_in:  # (inputs belong to the caller)
            steps[i][5] += (s,)


def _slots_in(spec) -> list:
    kind = type(spec)
    if kind is _Slot:
        return [spec.i]
    if kind is tuple or kind is list:
        return [s for a in spec for s in _slots_in(a)]
    if kind is dict:
        return [s for a in spec.values() for s in _slots_in(a)]
    return []


def _execute(steps, env) -> None:
    for fn, template, fill, kwargs, out, frees in steps:
        if fill is not None:
            args = template.copy()
            for i, s in fill:
                args[i] = env[s]
            result = fn(*args, **kwargs) if kwargs else fn(*args)
        else:
            args, kw = _resolve(template, env)
            result = fn(*args, **kw)
        if type(out) is int:
            env[out] = result
        elif type(out) is tuple:
            for i, s in out:
                env[s] = result[i]
        else:
            _bind(out, result, env)
        for s in frees:
            env[s] = None


def _run(steps, n_in, n_slots, out_slots, inputs):
    env = list(inputs) + [None] * (n_slots - n_in)
    prev = _grad_state.enabled
    _grad_state.enabled = False
    try:
        _execute(steps, env)
    finally:
        _grad_state.enabled = prev
    return [None if s is None else env[s] for s in out_slots]


def _run_recording(steps, n_in, n_slots, out_slots, inputs):
    env = list(inputs) + [None] * (n_slots - n_in)
    _execute(steps, env)
    return [None if s is None else env[s] for s in out_slots]
