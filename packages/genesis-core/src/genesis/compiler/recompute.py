"""Save or recompute: which forward intermediates a compiled backward keeps.

Eager autograd keeps, for backward, every tensor a gradient formula reads: for
``silu(gate) * up`` that is ``gate``, ``sigmoid(gate)``, ``silu(gate)`` and ``up``; for a
bf16 autocast step, the bf16 copy of every weight beside the fp32 weight. A compiled region
need not: an intermediate that cheap elementwise work makes from other kept tensors can be
made again inside the backward graph. ``rematerialize`` decides, per traced region, which
intermediates the forward hands to the backward and which the backward recomputes, and
rewrites the backward graph to recompute them.

**The decision is a minimum cut** (the "min-cut rematerialization" of the literature, on
bytes). Every forward Value ``v`` is an edge ``in(v) -> out(v)`` of a flow network whose
capacity is what keeping ``v`` costs: its bytes (``numel * itemsize``), or 0 for a forward
input (parameters, the call's tensors: alive anyway, free to read). ``out(u) -> in(v)`` has
infinite capacity for every input ``u`` of the node making ``v``, when that node may be
recomputed; the source feeds ``in(v)`` with infinite capacity when it may not (``v`` can only
be made by the forward). ``out(v)`` feeds the sink when the backward reads ``v``. A cut
separating source from sink is a set of Values from which (with the inputs) everything the
backward reads can be recomputed by recomputable nodes alone; its capacity is their bytes.
Keeping exactly what the backward reads is such a cut, so the minimum cut never keeps more
bytes than eager autograd would. Of the minimum cuts the one nearest the sink is taken (the
least recomputation for the bytes).

**Recomputable** (``RECOMPUTABLE``): the declared elementwise ops, casts, ``where``,
``clamp``, copies and the view/layout ops (``view``, ``permute``, ``slice``, ``cat``...).
Also (``BACKWARD_ALSO``): the norms (``NORMS``: one pass over their input, whose
gradient reads that input anyway), their statistics kept from the forward (a node's
``OpNode.saved`` Values, such as ``rms_norm``'s rstd, are never recomputed: only the forward
makes them), and autograd nodes that hand out an input's memory (``HANDS_OUT_INPUT``:
attention's node returns the kernel's output, so recomputing it costs nothing). Never:
matmuls, attention kernels, other reductions, anything random (a dropout mask is drawn once,
in the forward, and kept), in-place ops, and an op reading memory some forward op writes in
place (its input might have changed before the backward runs).

Example:
    >>> nodes, results, n = rematerialize(fwd_nodes, bwd_nodes, results, read, free_ids,
    ...                                   tracer.tensors, tracer.next_id)
    >>> print(compiled.saved_bytes()[0])
    saved for backward: 5 tensors, 40.0 KiB -> 2 tensors, 16.0 KiB (3 ops recomputed)
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass

from genesis.compiler.cse import reading, renamed
from genesis.compiler.graph import OpNode, Value
from genesis.op_declarations import BINARY, UNARY

__all__ = ["BACKWARD_ALSO", "HANDS_OUT_INPUT", "NORMS", "RECOMPUTABLE", "SavedBytes",
           "recomputable_nodes", "rematerialize", "value_bytes"]

# Ops the backward may run again: cheap, deterministic, memory-bound (see the module doc).
_VIEWS = frozenset(("view", "expand", "permute", "slice", "cat", "geometry_view", "detach"))
RECOMPUTABLE = (frozenset(op.name for op in UNARY) | frozenset(op.name for op in BINARY)
                | frozenset(("cast", "where", "clamp", "clone", "contiguous")) | _VIEWS)
_WRITES_FIRST_ARG = frozenset(("setitem", "copy_slices"))  # in-place ops without a "_"
# Norms the backward may run again from their input (which their own gradient reads, so the
# forward keeps it anyway): a bf16 training step then keeps no normalised copy of the
# residual stream for the projections after each norm.
NORMS = frozenset(("rms_norm", "layer_norm"))
# Autograd nodes whose forward hands out one of its inputs' memory as its output: attention's
# (``nn.functional.attention._FusedAttention``) wraps the kernel's output, kept anyway.
HANDS_OUT_INPUT = frozenset(("fused_attention",))
BACKWARD_ALSO = NORMS | HANDS_OUT_INPUT  # recomputed in the backward, not merged by cse


def value_bytes(v: Value) -> int:
    """Bytes of the tensor ``v`` stands for: ``numel * itemsize``.

    A view counts its own elements (what a copied output holds; a kept view that is not
    copied holds its whole base, which a slice of a larger tensor underestimates).

    Example:
        >>> value_bytes(graph.inputs[0])    # f32[4, 8]
        128
    """
    return math.prod(v.shape) * v.dtype.itemsize


@dataclass(frozen=True)
class SavedBytes:
    """What one compiled region's forward keeps for its backward, without and with recompute.

    Attributes:
        before: bytes of the intermediates eager autograd would keep (what the backward
            formulas read, forward inputs excepted: they are alive anyway).
        after: bytes of the intermediates the compiled forward keeps.
        tensors_before, tensors_after: how many tensors those are.
        recomputed: how many forward ops the backward graph runs again.

    Example:
        >>> report = compiled.saved_bytes()[0]
        >>> report.after <= report.before
        True
    """

    before: int
    after: int
    tensors_before: int
    tensors_after: int
    recomputed: int

    @classmethod
    def measure(cls, before: list, after: list, recomputed: int) -> SavedBytes:
        """The report of intermediates ``before`` (Values eager would keep) and ``after``
        (Values the compiled forward keeps)."""
        return cls(sum(map(value_bytes, before)), sum(map(value_bytes, after)), len(before),
                   len(after), recomputed)

    def __str__(self) -> str:
        return (f"saved for backward: {self.tensors_before} tensors, {_size(self.before)} -> "
                f"{self.tensors_after} tensors, {_size(self.after)} "
                f"({self.recomputed} ops recomputed)")


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            break
    return f"{n:.1f} {unit}"


def rematerialize(fwd_nodes: list, bwd_nodes: list, results: list, read: list, free: set,
                  tensors: dict, next_id: list):
    """Keep the fewest bytes for backward: recompute cheap intermediates in the backward.

    Args:
        fwd_nodes: the forward graph's nodes.
        bwd_nodes: the backward graph's nodes, as traced.
        results: the backward graph's outputs (gradients, ``None`` allowed).
        read: the forward intermediates the traced backward reads (no forward inputs).
        free: ids of the forward's inputs (free to read in the backward).
        tensors: ``Value id -> tensor`` of the forward trace (to see which memory in-place
            ops write).
        next_id: the trace's one-element id counter (recomputed Values get new ids).

    Returns:
        ``(backward nodes, backward results, how many forward ops were copied)``: the nodes
        with the recomputed forward ops inserted before their first use, their Values
        renamed (new ids).
    """
    made, forward_only = {}, set()
    for node in fwd_nodes:
        for v in node.outputs:
            made[v.id] = node
        for v in node.saved:
            if v is not None:  # (a node's own saved tensor: only its forward makes it)
                made[v.id] = node
                forward_only.add(v.id)
    ok = recomputable_nodes(fwd_nodes, tensors, also=BACKWARD_ALSO)
    keep = _min_cut(fwd_nodes, made, ok, forward_only, read, free)
    rewrite = _Rewrite(made, keep | free, next_id)
    nodes = []
    for node in bwd_nodes:
        nodes += rewrite.recompute(node.inputs())
        nodes.append(rewrite.node(node))
    nodes += rewrite.recompute([v for v in results if v is not None])
    return nodes, [None if v is None else rewrite.value(v) for v in results], rewrite.count


def recomputable_nodes(fwd_nodes: list, tensors: dict, also: frozenset = frozenset()) -> set:
    """Ids of the forward nodes the backward may run again: ``RECOMPUTABLE`` ones without
    tensors saved by their own ctx, and those whose op is in ``also`` (the rematerialisation
    passes ``BACKWARD_ALSO``; ``cse`` merges the pure ones only), that read and make no
    memory an in-place forward op writes (the graph contract's in-place ops: names ending
    in ``_``, ``setitem``, ``copy_slices``; a view shares its base's version counter, so the
    counter object stands for the memory)."""
    def box(v: Value) -> int:
        return id(tensors[v.id]._version_box)

    written = {box(v) for node in fwd_nodes
               if node.op.endswith("_") or node.op in _WRITES_FIRST_ARG
               for v in (*node.inputs()[:1], *node.outputs)}
    return {id(node) for node in fwd_nodes
            if ((node.op in RECOMPUTABLE and not node.saved) or node.op in also)
            and all(box(v) not in written for v in (*node.inputs(), *node.outputs))}


def _min_cut(fwd_nodes: list, made: dict, ok: set, forward_only: set, read: list,
             free: set) -> set:
    """Ids of the Values to keep: the minimum cut nearest the sink (see the module doc)."""
    values = {}
    for node in fwd_nodes:
        for v in node.inputs():
            values.setdefault(v.id, v)
        for v in (*node.outputs, *(s for s in node.saved if s is not None)):
            values.setdefault(v.id, v)
    index = {vid: i for i, vid in enumerate(values)}
    inf = 1 + sum(value_bytes(v) for v in values.values())
    net = _Network(2 + 2 * len(values))
    source, sink = 0, 1
    for vid, v in values.items():
        i = 2 + 2 * index[vid]
        net.edge(i, i + 1, 0 if vid in free else value_bytes(v))
        node = made.get(vid)
        if node is None or id(node) not in ok or vid in forward_only:  # (an input, or only
            # the forward can make it)
            net.edge(source, i, inf)
        else:
            for u in node.inputs():
                net.edge(3 + 2 * index[u.id], i, inf)
    for v in read:
        net.edge(3 + 2 * index[v.id], sink, inf)
    net.max_flow(source, sink)
    near_sink = net.reaching(sink)
    return {vid for vid in values
            if 2 + 2 * index[vid] not in near_sink and 3 + 2 * index[vid] in near_sink}


class _Network:
    """A flow network (Dinic's algorithm): edges ``2k`` and their residual twins ``2k+1``."""

    def __init__(self, n: int):
        self.adj: list = [[] for _ in range(n)]
        self.head: list = []
        self.cap: list = []

    def edge(self, a: int, b: int, cap: int) -> None:
        self.adj[a].append(len(self.head))
        self.head.append(b)
        self.cap.append(cap)
        self.adj[b].append(len(self.head))
        self.head.append(a)
        self.cap.append(0)

    def max_flow(self, s: int, t: int) -> None:
        """Push a maximum flow from ``s`` to ``t`` (the residual capacities stay in ``cap``)."""
        while True:
            level = self._levels(s)
            if level[t] < 0:
                return
            nxt = [0] * len(self.adj)
            while self._augment(s, t, level, nxt):
                pass

    def _levels(self, s: int) -> list:
        level = [-1] * len(self.adj)
        level[s] = 0
        queue = deque([s])
        while queue:
            a = queue.popleft()
            for e in self.adj[a]:
                b = self.head[e]
                if self.cap[e] > 0 and level[b] < 0:
                    level[b] = level[a] + 1
                    queue.append(b)
        return level

    def _augment(self, s: int, t: int, level: list, nxt: list) -> int:
        """One augmenting path along ``level`` (iterative depth first); its flow, or 0."""
        path, a = [], s
        while a != t:
            edges = self.adj[a]
            while nxt[a] < len(edges):
                e = edges[nxt[a]]
                if self.cap[e] > 0 and level[self.head[e]] == level[a] + 1:
                    break
                nxt[a] += 1
            else:  # a dead end: retreat
                if a == s:
                    return 0
                level[a] = -1
                e = path.pop()
                a = self.head[e ^ 1]
                nxt[a] += 1
                continue
            path.append(e)
            a = self.head[e]
        flow = min(self.cap[e] for e in path)
        for e in path:
            self.cap[e] -= flow
            self.cap[e ^ 1] += flow
        return flow

    def reaching(self, t: int) -> set:
        """The vertices that still reach ``t`` through residual capacity."""
        found, stack = {t}, [t]
        while stack:
            b = stack.pop()
            for e in self.adj[b]:  # e: b -> a; its twin a -> b has residual cap[e ^ 1]
                a = self.head[e]
                if a not in found and self.cap[e ^ 1] > 0:
                    found.add(a)
                    stack.append(a)
        return found


class _Rewrite:
    """Renames forward Values the backward recomputes, and emits their nodes once each."""

    def __init__(self, made: dict, keep: set, next_id: list):
        self.made, self.keep, self.next_id = made, keep, next_id
        self.new: dict = {}  # forward Value id -> its recomputed Value
        self.count = 0

    def value(self, v: Value) -> Value:
        return self.new.get(v.id, v)

    def node(self, node: OpNode) -> OpNode:
        """``node`` reading the recomputed Values in place of the forward's."""
        return reading(node, self.new)

    def recompute(self, values: list) -> list:
        """Renamed copies of the forward nodes that make ``values`` (those not kept and not
        made yet), each after the nodes making its inputs."""
        out: list = []
        stack = [(v, False) for v in reversed(values)]
        while stack:  # (depth first, without recursion: chains of cheap ops can be long)
            v, inputs_done = stack.pop()
            node = self.made.get(v.id)
            if v.id in self.new or v.id in self.keep or node is None:
                continue  # made already, kept by the forward (or an input), or a backward Value
            if not inputs_done:
                stack.append((v, True))
                stack += [(u, False) for u in reversed(node.inputs())]
                continue
            for o in node.outputs:
                self.new[o.id] = dataclasses.replace(o, id=self.next_id[0])
                self.next_id[0] += 1
            out.append(dataclasses.replace(  # (saved=(): the forward's saved Values are kept)
                self.node(node), outputs=tuple(self.new[o.id] for o in node.outputs),
                result=renamed(node.result, self.new), saved=()))
            self.count += 1
        return out
