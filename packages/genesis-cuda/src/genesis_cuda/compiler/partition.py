"""Split a traced graph into fused groups and nodes that run as they are.

One pass over the nodes in program order. A *fusible* node (``ops_table.kind_of``: an
elementwise op, a cast, ``where``/``clamp``, a view or ``cat`` feeding them, a last-dim
reduction) joins an open group of one of its producers, or opens its own; every other node
(matmul, linear, attention, the fused kernels, indexing, random numbers, in-place edits) is
a step of its own, which the runner hands to core's replay.

A group runs where its last node was. So that nothing reads a group's value before the
group has run, a group is *sealed* (takes no more nodes) as soon as a node outside it reads
one of its values; an in-place op seals every open group (a group must not read an input
before an edit that the program made after it). A group holding a reduction is a *row
group*: its reduced input has shape ``(*R, C)`` and its nodes have shape ``(*R, C)``,
``(*R, 1)`` or ``R``; the row kernel computes one row per program.

A view joins a group only if everything reading it can be fused and it is no graph output:
otherwise it runs eagerly and stays a true view (aliasing matters to in-place ops and to
the caller). A group with fewer than two computing nodes is not worth a kernel of its own:
its nodes run eagerly.

Example:
    >>> steps = partition(graph, on_device)   # [OpNode | Group, ...] in run order
"""

from __future__ import annotations

from genesis import dtypes as D
from genesis_cuda.compiler import ops_table as T
from genesis_cuda.compiler.codegen import MAX_ROW

_SCALARS = (bool, int, float)


class Group:
    """Fusible nodes run as generated kernels: ``nodes`` in program order, ``row`` the
    ``(*R, C)`` shape of a row group (None: pointwise), ``outputs`` the value ids read
    outside the group (set by ``partition``)."""

    __slots__ = ("nodes", "row", "open", "outputs")

    def __init__(self, node, row):
        self.nodes, self.row, self.open, self.outputs = [node], row, True, []

    @property
    def computing(self) -> int:
        """How many of its nodes compute (not views, copies or casts between floats)."""
        return sum(1 for n in self.nodes
                   if T.kind_of(n.op) != "view" and n.op not in ("clone", "contiguous"))


def values_in(args):
    """The graph values among ``args`` (nested lists and tuples included)."""
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from values_in(a)
        elif hasattr(a, "id") and hasattr(a, "shape"):
            yield a


def mutates(node) -> bool:
    """Whether ``node`` edits one of its arguments in place (``add_``, ``copy_``,
    ``setitem`` ...)."""
    return node.op.endswith("_") or node.op in ("setitem", "copy_slices")


def _reduced_row(node):
    """``(*R, C)`` when ``node`` is a reduction over the last dim a row kernel can hold."""
    x, args = node.args[0], node.args
    if not hasattr(x, "shape") or not x.shape or len(args) < 3:
        return None
    dims = args[1]
    nd = len(x.shape)
    if not isinstance(dims, (list, tuple)) or len(dims) != 1 or dims[0] % nd != nd - 1:
        return None
    if node.op != "sum" and not x.dtype.is_floating_point:
        return None
    if not 0 < x.shape[-1] <= MAX_ROW or node.op == "sum" and len(args) > 3 \
            and args[3] is not None and args[3] is not node.outputs[0].dtype:
        return None
    return tuple(x.shape)


def _args_ok(node) -> bool:
    op, args = node.op, node.args
    if op == "cast":
        return len(args) == 2 and isinstance(args[1], D.DType)
    if op == "clamp":
        return all(a is None or isinstance(a, _SCALARS) for a in args[1:])
    if op in ("view", "expand", "permute"):
        return len(args) == 2
    if op == "slice":
        return len(args) == 2 and all(k is None or isinstance(k, (int, slice))
                                      for k in args[1])
    if op == "cat":
        return isinstance(args[0], int) and all(hasattr(a, "shape") for a in args[1:])
    if op == "slice_backward":
        return len(args) == 3 and all(k is None or isinstance(k, (int, slice))
                                      for k in args[2])
    if op in T.REDUCTIONS:
        return _reduced_row(node) is not None
    return all(isinstance(a, _SCALARS) or hasattr(a, "shape") for a in args)


def fusible(node, on_device, consumers: dict, graph_outputs: set) -> bool:
    """Whether ``node`` may be part of a generated kernel (see the module docstring)."""
    kind = T.kind_of(node.op)
    if kind is None or node.kwargs or len(node.outputs) != 1 or not _args_ok(node):
        return False
    if any(v is not None for v in getattr(node, "saved", ())):
        return False  # its forward keeps tensors for backward: core's replay runs it
    out = node.outputs[0]
    if not on_device(out) or not all(on_device(v) for v in values_in(node.args)):
        return False
    if out.dtype.name.startswith("complex"):
        return False
    if kind == "view":
        readers = consumers.get(out.id, ())
        if out.id in graph_outputs or not readers:
            return False
        return all(T.kind_of(r.op) is not None and not mutates(r) for r in readers)
    return True


def _row_fits(shape: tuple, row: tuple) -> bool:
    return shape in (row, row[:-1] + (1,), row[:-1])


def _compatible(group: Group, node) -> bool:
    row = _reduced_row(node) if node.op in T.REDUCTIONS else None
    if row is not None:
        if group.row is not None:
            return group.row == row
        return all(_row_fits(tuple(n.outputs[0].shape), row) for n in group.nodes)
    if group.row is not None:
        return _row_fits(tuple(node.outputs[0].shape), group.row)
    return True


def partition(graph, on_device) -> list:
    """The run order of ``graph``: a list of steps, each a node (run as it is) or a
    ``Group`` (its ``outputs``: the value ids that leave it).

    Args:
        graph: a ``genesis.compiler.graph.Graph``.
        on_device: ``on_device(value) -> bool``, whether a value lives on this backend's
            devices (only such values are fused).

    Returns:
        The steps, in an order that respects every data dependency and in-place edit.
    """
    consumers: dict = {}
    for node in graph.nodes:
        for v in values_in(node.args):
            consumers.setdefault(v.id, []).append(node)
        for v in values_in(node.kwargs.values()):
            consumers.setdefault(v.id, []).append(node)
    graph_outputs = {v.id for v in values_in(graph.outputs)}
    owner: dict = {}  # value id -> the group computing it
    groups: list[Group] = []
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    for node in graph.nodes:
        if mutates(node):
            for g in groups:
                g.open = False
        producers = []
        for v in values_in(list(node.args) + list(node.kwargs.values())):
            g = owner.get(v.id)
            if g is not None and g not in producers:
                producers.append(g)
        group = None
        if fusible(node, on_device, consumers, graph_outputs):
            for g in producers:
                if g.open and _compatible(g, node):
                    group = g
                    break
            if group is None:
                group = Group(node, _reduced_row(node) if node.op in T.REDUCTIONS else None)
                groups.append(group)
            else:
                group.nodes.append(node)
                if node.op in T.REDUCTIONS:
                    group.row = _reduced_row(node)
            for g in producers:  # other open producers: one kernel with this node's group
                if g is not group and g.open and _mergeable(group, g):
                    _merge(group, g, order, owner)
                    groups.remove(g)
            owner[node.outputs[0].id] = group
        for g in producers:
            if g is not group:
                g.open = False
    return _schedule(graph, groups, consumers, graph_outputs)


def _mergeable(a: Group, b: Group) -> bool:
    """Whether two open groups can become one kernel (their rows agree)."""
    if a.row is not None and b.row is not None:
        return a.row == b.row
    row = a.row if a.row is not None else b.row
    return row is None or all(_row_fits(tuple(n.outputs[0].shape), row)
                              for n in a.nodes + b.nodes)


def _merge(into: Group, other: Group, order: dict, owner: dict) -> None:
    """Move ``other``'s nodes into ``into`` (both open: nothing outside read them yet)."""
    into.nodes = sorted(into.nodes + other.nodes, key=lambda n: order[id(n)])
    into.row = into.row if into.row is not None else other.row
    for n in other.nodes:
        owner[n.outputs[0].id] = into


def _schedule(graph, groups, consumers, graph_outputs) -> list:
    """Steps in run order: groups worth a kernel at their last node, all else in place."""
    fused, place = {}, set()
    for g in groups:
        if g.computing >= 2:
            members = {id(n) for n in g.nodes}
            g.outputs = [n.outputs[0].id for n in g.nodes
                         if n.outputs[0].id in graph_outputs
                         or any(id(r) not in members for r in consumers.get(n.outputs[0].id, ()))]
            fused[id(g.nodes[-1])] = g
            place.update(id(n) for n in g.nodes)
    steps = []
    for node in graph.nodes:
        g = fused.get(id(node))
        if g is not None:
            steps.append(g)
        elif id(node) not in place:
            steps.append(node)
    return steps
