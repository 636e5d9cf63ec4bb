"""The compiler's graph: ``Value``, ``OpNode`` and ``Graph`` — the contract with backends.

``genesis.compile`` traces a function by running it once under a ``DispatchMode`` that
records every op call (tracing by execution). What it records is a ``Graph``: a straight
list of op calls on ``Value``s. A backend's ``compile_graph(graph, options)`` hook
(``genesis.backends.base.Backend``) receives every forward and every backward graph and may
return a callable that runs it; otherwise core's own replay (``genesis.compiler.replay``)
runs it. This docstring is the contract that hook codes against.

**Values.** A ``Value`` is one tensor of the graph with the metadata it had at trace time:
``id`` (unique within the traces of one guard key: its forward, backward and the segments
between graph breaks share the numbering, so the same tensor has the same id in each),
``shape``, ``dtype`` (a genesis dtype), ``device`` (a genesis device) and ``stride``. Every
replay is guarded to see the same shapes, dtypes and devices (genesis.compile re-traces
otherwise); strides of inputs are as at trace time only where the ops made them so.

**Graph inputs**, in order (``Graph.inputs``):

* forward graph: first the tensors among the call's positional and keyword arguments, in
  the order they appear (positional first, then keyword arguments in the caller's order;
  tensors nested in lists, tuples and dicts are found depth first); then every other
  tensor the function read that no traced op made — parameters, buffers, tensors captured
  from a closure or a global — in the order the trace first met them;
* a segment after a graph break: the Values made before the break (by earlier segments, the
  host step, or the inputs above) that this segment reads, in order of first use;
* backward graph: one gradient per differentiable forward output (same order as the
  forward's outputs that require grad), then the forward inputs the backward reads, then
  the forward intermediates it reads (the "saved tensors" the forward keeps), each in order
  of first use.

**Graph outputs** (``Graph.outputs``): forward graph — the function's tensor results (depth
first through its returned structure) and then, when grad is needed, the forward Values the
backward graph reads; segment — every Value it made that is still alive at the break (and
so may be read later); backward graph — one gradient per forward input that requires grad
(a ``None`` entry where the input got no gradient). The callable a backend returns takes
the input tensors as a list in ``Graph.inputs`` order and returns the output tensors as a
list in ``Graph.outputs`` order (``None`` stays ``None``).

**Nodes.** ``OpNode.op`` is the op's registry name (``genesis.dispatch.REGISTRY``) and
``OpNode.handle`` is ``REGISTRY[op]``: calling ``handle(*args, **kwargs)`` on real tensors
runs the op eagerly. ``args``/``kwargs`` hold Values where the op got a tensor and Python
constants otherwise (ints, floats, bools, None, slices, dtypes, devices, strings), nested
in lists and tuples exactly as the op got them (``cat``'s tensors arrive flat after the
dim: ``("cat", (0, v1, v2))``). ``outputs`` is a tuple of the Values the op returned (an
op returning one tensor has one output). ``source`` is ``"file.py:123"``: the line of user
code that made the call (the first frame outside genesis; for a backward node, the line of
the call that traced the backward).

* **Constants** are baked in: a different Python constant in a call gives a different
  trace (the guards compare the call's non-tensor arguments). A scalar ``x * 2`` appears as
  ``mul(v3, 2)``.
* **Views** (``view``, ``reshape`` of a contiguous input, ``slice``, ``select``,
  ``geometry_view``, ``expand``, ``transpose``, ``permute``, ``unsqueeze``, ``squeeze``,
  ``as_strided``, ``detach``...) are ordinary nodes whose output shares its input's memory;
  ``Value.stride`` tells the layout the view had.
* **In-place ops** (names ending in ``_``: ``add_``, ``mul_``, ``copy_``, ``fill_``,
  ``masked_fill_``, ``uniform_``...) write into their first argument. Their output is a
  *new* Value (the tensor after the write: later reads use the new id) that aliases the
  argument's memory, so the graph stays in single-assignment form while the memory effect
  — on an input too: ``x.add_(1)`` inside a compiled function changes the caller's ``x`` —
  happens when the node runs. A backend must keep the order of an in-place node relative
  to every node reading the same memory (its argument, views of it).
* **Autocast** casts appear as explicit ``cast`` nodes (``cast(v, genesis.bfloat16)``)
  before the op they feed; the op node then reads the cast Value. Replays never re-decide
  autocast: the recorded casts are the plan.
* **Random ops** (``rand``, ``randn``, ``bernoulli``, ``uniform_``...) are nodes like any
  other: running the node draws new numbers from the generator of its device, so each
  replay draws fresh ones (and, replayed in the same order, the same ones eager would).
* **Backward graphs** are made of the ops autograd's gradient formulas call, and run with
  grad mode off. Among them, each just before its first reader, are copies of cheap forward
  nodes (elementwise ops, casts, views, ``cat``: ``compiler.recompute``) that make again
  intermediates the forward did not keep; their outputs are new Values (new ids), their
  ``source`` the forward's line. A formula the tracer cannot see into (a fused op's backward
  kernel, a formula computing on backend arrays) is one node ``<op>_backward(saved, grads,
  ctx=...)``: its arguments are the tuple of the forward node's saved tensors and the tuple
  of its output gradients, ``ctx`` the formula's constants; it returns a tuple of gradients
  (None entries allowed). Tensors such a forward node saved that no node returned are in its
  ``OpNode.saved``; where a forward graph outputs them, the node must be run with
  ``genesis.compiler.node_backward.run_saving`` (it returns them too).

**Options.** The hook gets ``genesis.compile``'s ``options`` (with ``mode``). The forward and
the backward graph of one compiled region (one autograd node at replay: the backward always
runs after its forward) get the same ``Region`` object as ``options["region"]``: a backend
may key what the two share on it — genesis-cuda captures both into one memory pool.

``print(graph)`` shows one line per node, like an FX graph printout::

    graph(v0: f32[4, 8], v1: f32[16, 8], v2: f32[16]):
        v3: f32[4, 16] = linear(v0, v1, v2)          # model.py:12
        v4: f32[4, 16] = relu(v3)                    # model.py:13
        return (v4)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from genesis.dispatch import OpHandle

__all__ = ["Graph", "OpNode", "Region", "Value", "map_structure", "map_values"]


class Region:
    """The token that ties the forward and backward graphs of one compiled region together
    (``options["region"]``, see the module docstring); it can be weakly referenced."""

    __slots__ = ("__weakref__",)


@dataclass(frozen=True, eq=False)
class Value:
    """One tensor of a traced graph, with its trace-time metadata.

    Attributes:
        id: unique within the traces of one guard key (its graphs share the numbering).
        shape: the tensor's shape, a tuple of ints.
        dtype: its genesis dtype.
        device: its genesis device.
        stride: its strides in elements.

    Example:
        >>> v = graph.inputs[0]
        >>> v.id, v.shape, v.dtype
        (0, (4, 8), genesis.float32)
    """

    id: int
    shape: tuple
    dtype: object
    device: object
    stride: tuple

    def __repr__(self) -> str:
        return f"v{self.id}"

    def type_str(self) -> str:
        """``f32[4, 8]``: the dtype's short name and the shape."""
        return f"{_short_dtype(self.dtype)}[{', '.join(str(s) for s in self.shape)}]"


@dataclass(eq=False)
class OpNode:
    """One recorded op call: ``outputs = handle(*args, **kwargs)``.

    Attributes:
        op: the op's registry name (``"mul"``, ``"linear"``, ``"cat"``).
        handle: ``genesis.dispatch.REGISTRY[op]``; calling it runs the op eagerly.
        args: Values, Python constants, or lists/tuples nesting them.
        kwargs: the same, by keyword.
        outputs: the Values the op returned.
        source: ``"file.py:123"``, the user line that made the call.
        result: the op's return value with Values for its tensors (``outputs`` in the
            structure the op returned them: one Value, a tuple or list of them).
        saved: for a Function op that saved, for backward, tensors made inside its forward
            (no other node's output): one entry per saved tensor, a new Value for those,
            None for the others; ``()`` otherwise. See ``compiler.node_backward``.
        needs_input_grad: the op's ctx flags at trace time (used with ``saved``).

    Example:
        >>> node = graph.nodes[0]
        >>> node.op, node.args, node.outputs
        ('linear', (v0, v1, v2), (v3,))
    """

    op: str
    handle: OpHandle
    args: tuple
    kwargs: dict
    outputs: tuple
    source: str = ""
    result: object = None  # what the op returned, its tensors as Values (tuple, list ...)
    saved: tuple = ()  # per tensor its autograd ctx saved: a Value if no other Value is it
    needs_input_grad: tuple = ()  # the ctx's flags at trace time (for run_saving)

    def inputs(self) -> list:
        """The Values the node reads (from ``args`` and ``kwargs``, nested ones too)."""
        found: list = []
        map_values((self.args, self.kwargs), lambda v: found.append(v) or v)
        return found

    def __str__(self) -> str:
        outs = ", ".join(f"{v}: {v.type_str()}" for v in self.outputs) or "_"
        parts = [_fmt(a) for a in self.args]
        parts += [f"{k}={_fmt(a)}" for k, a in self.kwargs.items()]
        text = f"{outs} = {self.op}({', '.join(parts)})"
        return f"{text:<56} # {self.source}" if self.source else text


@dataclass(eq=False)
class Graph:
    """A traced straight-line program: inputs, op nodes in order, outputs.

    Attributes:
        inputs: the Values the caller provides, in the order the contract gives.
        nodes: the op calls, in execution order.
        outputs: the Values handed back (``None`` entries allowed in backward graphs).
        kind: ``"forward"``, ``"backward"`` or ``"segment"`` (a piece between graph breaks).
        breaks_at: for a segment that ends at a graph break, the host step that follows it.
        notes: lines printed after the graph as comments (a forward graph's: the bytes it
            keeps for the backward; see ``compiler.recompute``).

    Example:
        >>> print(compiled.graphs()[0])      # one line per node
    """

    inputs: list = field(default_factory=list)
    nodes: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    kind: str = "forward"
    breaks_at: str = ""
    notes: list = field(default_factory=list)

    def __str__(self) -> str:
        head = ", ".join(f"{v}: {v.type_str()}" for v in self.inputs)
        lines = [f"{self.kind} graph({head}):"]
        lines += [f"    {node}" for node in self.nodes]
        lines.append(f"    return ({', '.join(_fmt(v) for v in self.outputs)})")
        if self.breaks_at:
            lines.append(f"    # then {self.breaks_at}")
        lines += [f"    # {note}" for note in self.notes]
        return "\n".join(lines)

    def print(self) -> None:
        """Print the graph, one line per node."""
        print(str(self))


def map_values(obj, fn):
    """``obj`` with every Value ``v`` replaced by ``fn(v)``, containers rebuilt.

    Args:
        obj: a Value, a constant, or lists/tuples/dicts (namedtuples and dataclasses too)
            nesting them.
        fn: called on each Value.

    Returns:
        The same structure with the replacements.

    Example:
        >>> map_values((v0, [v1, 2]), lambda v: env[v.id])
    """
    return map_structure(obj, fn, _is_value)


def _is_value(obj) -> bool:
    return type(obj) is Value


def map_structure(obj, fn, is_leaf):
    """``obj`` with every part ``is_leaf`` accepts replaced by ``fn(part)``: lists, tuples,
    namedtuples, dicts and dataclass instances are rebuilt around the replacements; other
    objects are kept as they are (constants)."""
    if is_leaf(obj):
        return fn(obj)
    kind = type(obj)
    if kind is tuple or kind is list:
        return kind(map_structure(a, fn, is_leaf) for a in obj)
    if kind is dict:
        return {k: map_structure(a, fn, is_leaf) for k, a in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
        return kind(*(map_structure(a, fn, is_leaf) for a in obj))
    if isinstance(obj, dict):  # OrderedDict and other dict subclasses built from pairs
        return kind((k, map_structure(a, fn, is_leaf)) for k, a in obj.items())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: map_structure(getattr(obj, f.name), fn,
                                                                 is_leaf)
                                           for f in dataclasses.fields(obj) if f.init})
    return obj


def _fmt(a) -> str:
    if isinstance(a, (list, tuple)) and not isinstance(a, Value):
        inner = ", ".join(_fmt(x) for x in a)
        return f"[{inner}]" if isinstance(a, list) else f"({inner}{',' if len(a) == 1 else ''})"
    return repr(a)


_SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
          "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8",
          "bool": "b8"}


def _short_dtype(dtype) -> str:
    name = getattr(dtype, "name", str(dtype)).replace("genesis.", "")
    return _SHORT.get(name, name)
