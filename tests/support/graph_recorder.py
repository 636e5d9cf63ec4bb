"""Record a genesis function into the compiler's graph form, for the backend compiler tests.

``record(fn, *tensors)`` runs ``fn`` once under a ``DispatchMode`` (grad off) and returns
``(graph, inputs, outputs)``: a ``genesis.compiler.graph.Graph`` of the op calls (every
tensor no recorded op made is a graph input, in first-use order), the input tensors in
``graph.inputs`` order, and ``fn``'s eager results. It is deliberately smaller than
``genesis.compile``'s tracer (no guards, no backward, no graph breaks): the CUDA compiler's
tests feed ``compile_graph`` exactly the graph they mean to test.

Example:
    >>> graph, inputs, expected = record(lambda x, w: (x * w).exp(), x, w)
    >>> got = CompiledGraph(graph, {}, lambda v: True)(inputs)
"""

from __future__ import annotations

import genesis
from genesis.compiler.graph import Graph, OpNode, Value
from genesis.dispatch import DispatchMode


class _Recorder(DispatchMode):
    def __init__(self):
        self.values: dict = {}  # id(tensor) -> Value
        self.keep: list = []  # the tensors behind the Values (so their ids stay unique)
        self.graph = Graph()
        self.inputs: list = []

    def value(self, t, is_input: bool) -> Value:
        v = self.values.get(id(t))
        if v is None:
            v = Value(len(self.keep), tuple(t.shape), t.dtype, t.device, tuple(t.stride()))
            self.values[id(t)] = v
            self.keep.append(t)
            if is_input:
                self.graph.inputs.append(v)
                self.inputs.append(t)
        return v

    def convert(self, a):
        if isinstance(a, genesis.Tensor):
            return self.value(a, True)
        if isinstance(a, (list, tuple)) and not isinstance(a, genesis.Size):
            return type(a)(self.convert(x) for x in a)
        if isinstance(a, genesis.Size):
            return tuple(a)
        return a

    def __genesis_dispatch__(self, op, args, kwargs):
        out = op(*args, **kwargs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if outs and all(isinstance(o, genesis.Tensor) for o in outs):
            values = tuple(self.value(o, False) for o in outs)
            node = OpNode(op.name, op, self.convert(args),
                          {k: self.convert(v) for k, v in kwargs.items()}, values,
                          result=values if isinstance(out, (tuple, list)) else values[0])
            self.graph.nodes.append(node)
        return out


def record(fn, *tensors):
    """``(graph, inputs, outputs)`` of one run of ``fn(*tensors)`` (see the module doc)."""
    rec = _Recorder()
    with genesis.no_grad(), rec:
        for t in tensors:
            rec.value(t, True)
        out = fn(*tensors)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    rec.graph.outputs = [rec.values[id(o)] for o in outs]
    return rec.graph, rec.inputs, outs
