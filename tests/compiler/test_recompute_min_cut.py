"""``genesis.compiler.recompute``'s choice against brute force, on small random graphs.

Each graph is a random DAG of forward nodes, some recomputable (``mul``) and some not
(``matmul``), with random sizes and a random set of Values the backward reads. The kept set
the min cut picks must let the backward make everything it reads from kept Values and
forward inputs through recomputable nodes only, and its bytes must be the least any such
set has (so never more than keeping what the backward reads).
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

import genesis
from genesis.compiler.graph import OpNode, Value
from genesis.compiler.recompute import _min_cut, value_bytes
from genesis.dispatch import REGISTRY


@st.composite
def graphs(draw):
    n_inputs = draw(st.integers(1, 2))
    n_nodes = draw(st.integers(1, 10))
    values = [Value(i, (draw(st.integers(1, 4)),), genesis.float32, None, (1,))
              for i in range(n_inputs + n_nodes)]
    nodes, ok = [], set()
    for k in range(n_nodes):
        made = n_inputs + k
        ins = draw(st.lists(st.integers(0, made - 1), min_size=1, max_size=3, unique=True))
        cheap = draw(st.booleans())
        op = "mul" if cheap else "matmul"
        node = OpNode(op, REGISTRY[op], tuple(values[i] for i in ins), {}, (values[made],))
        nodes.append(node)
        if cheap:
            ok.add(id(node))
    read = draw(st.lists(st.sampled_from(values[n_inputs:]), min_size=1, unique_by=id))
    return values[:n_inputs], nodes, ok, read


def can_make(read, kept, free, made, ok) -> bool:
    have = set(kept) | set(free)

    def avail(v) -> bool:
        if v.id in have:
            return True
        node = made[v.id]
        return id(node) in ok and all(avail(u) for u in node.inputs())

    return all(avail(v) for v in read)


@settings(max_examples=400, deadline=None)
@given(graphs())
def test_min_cut_keeps_the_fewest_bytes_that_suffice(case):
    inputs, nodes, ok, read = case
    made = {node.outputs[0].id: node for node in nodes}
    free = {v.id for v in inputs}
    kept = _min_cut(nodes, made, ok, set(), read, free) - free
    assert can_make(read, kept, free, made, ok)
    by_id = {node.outputs[0].id: node.outputs[0] for node in nodes}
    got = sum(value_bytes(by_id[i]) for i in kept)
    best = min(sum(value_bytes(by_id[i]) for i in subset)
               for r in range(len(by_id) + 1)
               for subset in itertools.combinations(by_id, r)
               if can_make(read, subset, free, made, ok))
    assert got == best
    assert got <= sum(value_bytes(v) for v in read)
