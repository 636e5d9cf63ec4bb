"""Common subexpressions: a traced forward computes each cheap result once.

Eager code often computes the same thing twice without saying so. Under bf16 autocast every
``Linear`` casts its input itself: ``q_proj(x)``, ``k_proj(x)`` and ``v_proj(x)`` record
three ``cast(x, bfloat16)`` nodes of the same ``x``, and an MLP's ``gate_proj(x)`` and
``up_proj(x)`` two more. Each copy is a kernel launch and, since each projection's backward
reads its own copy, a tensor the forward keeps for the backward: in a Qwen-style decoder
layer, two activation-sized bf16 tensors more than it needs.

``merge_common`` keeps the first of identical nodes — the same op, reading the same Values,
with equal constants — and hands the later ones' readers its outputs instead. Only nodes
that are pure and safe to share are merged: the ones ``recompute`` may run again
(elementwise ops, casts, ``where``, ``clamp``, copies, views; never random ops, reductions,
matmuls) that read and make no memory an in-place op of the graph writes. A node whose
output the function returns is not merged away either: the caller gets the distinct
tensors eager gives.

Example:
    >>> nodes, same = merge_common(fwd_nodes, recomputable_nodes(fwd_nodes, tensors), outs)
    >>> bwd_nodes = [reading(node, same) for node in bwd_nodes]
"""

from __future__ import annotations

import dataclasses

from genesis.compiler.graph import OpNode, Value, map_values

__all__ = ["merge_common", "reading", "renamed"]


def merge_common(nodes: list, pure: set, returned: list) -> tuple[list, dict]:
    """Drop the repeats of pure nodes.

    Args:
        nodes: a forward graph's nodes, in order.
        pure: ids (``id(node)``) of the nodes that may be shared (see the module doc).
        returned: the Values the function returns (their nodes are never dropped).

    Returns:
        ``(nodes, same)``: the nodes left, reading the kept Values, and ``same``, a dict from
        the id of every dropped node's output to the kept node's Value that replaces it.

    Example:
        >>> nodes, same = merge_common(nodes, pure, outs)   # three casts of x -> one
        >>> len(same)
        2
    """
    keep_out = {v.id for v in returned}
    same: dict = {}
    first: dict = {}  # a pure node's key -> the node kept for it
    out: list = []
    for node in nodes:
        node_now = reading(node, same) if same else node
        if id(node) in pure and not any(v.id in keep_out for v in node.outputs):
            key = _key(node_now)
            kept = first.get(key)
            if kept is not None and len(kept.outputs) == len(node.outputs):
                same.update({v.id: k for v, k in zip(node.outputs, kept.outputs)})
                continue
            first.setdefault(key, node_now)
        out.append(node_now)
    return out, same


def reading(node: OpNode, same: dict) -> OpNode:
    """``node`` with the Values of its arguments renamed through ``same`` (id -> Value)."""
    return dataclasses.replace(node, args=renamed(node.args, same),
                               kwargs=renamed(node.kwargs, same))


def renamed(obj, same: dict):
    """``obj`` (Values nested in containers, constants) with each Value whose id ``same``
    maps replaced by the Value it maps to."""
    return map_values(obj, lambda v: same.get(v.id, v))


def _key(node: OpNode) -> tuple:
    """What makes two calls of an op compute the same thing: its name, its input Values by
    id and its constants by type and exact value (``repr``: 0.0 and -0.0 differ)."""
    return node.op, _part(node.args), _part(node.kwargs)


def _part(obj):
    kind = type(obj)
    if kind is Value:
        return "v", obj.id
    if kind is tuple or kind is list:
        return kind.__name__, tuple(_part(a) for a in obj)
    if kind is dict:
        return "dict", tuple((k, _part(a)) for k, a in sorted(obj.items()))
    return kind.__name__, repr(obj)
