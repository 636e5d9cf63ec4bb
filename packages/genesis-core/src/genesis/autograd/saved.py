"""What a recorded graph keeps for its backward: the saved tensors of every node, and their bytes.

The memory a training step holds between its forward and its backward is what the graph's
nodes saved (``ctx.save_for_backward`` and tensors kept as ``ctx`` attributes). Several nodes
often save the same memory (a norm's output is the input of three projections) or views of
it, so the bytes are counted over the union of the memory ranges the saved tensors span.
``tools/bench/saved_activations.py`` compares these figures with torch's per op.
"""

from __future__ import annotations

from genesis.autograd.function import _TENSOR_TYPES, Node

__all__ = ["saved_tensors", "saved_bytes"]


def saved_tensors(output) -> list[tuple[str, object]]:
    """``(node name, tensor)`` for every tensor the graph of ``output`` keeps for backward.

    Walks the graph from ``output.grad_fn`` (depth first, each node once) and lists each
    node's saved tensors and its ``ctx`` attributes that are tensors, in that order; a
    tensor kept by several nodes is listed once per node.

    Args:
        output: a tensor with a ``grad_fn`` (e.g. a loss).

    Returns:
        The list, in graph order from ``output``.

    Example:
        >>> y = (x * w).sigmoid()
        >>> [name for name, _ in saved_tensors(y)]
        ['SigmoidBackward', 'MulBackward']
    """
    found, seen = [], set()
    stack = [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        kept = list(node.saved_values()) if isinstance(node, Node) else []
        kept += [v for k, v in getattr(node, "__dict__", {}).items() if k != "_saved"]
        found += [(node.name(), t) for t in kept if type(t) in _TENSOR_TYPES]
        stack.extend(reversed([e[0] for e in node.next_functions if e is not None]))
    return found


def _extent(t) -> tuple[int, int]:
    """The byte range ``[start, stop)`` of device memory tensor ``t`` spans."""
    start = t.data_ptr()
    if t.numel() == 0:
        return start, start
    item = t.dtype.itemsize
    low = sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if s < 0)
    high = sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if s > 0)
    return start + low * item, start + (high + 1) * item


def saved_bytes(output, per_node: bool = False):
    """Bytes of memory the graph of ``output`` keeps for backward, each byte counted once.

    Args:
        output: a tensor with a ``grad_fn``.
        per_node: also return the bytes by node name: each byte under one node keeping it
            (ranges in address order: the first range reaching it).

    Returns:
        The total bytes; with ``per_node``, ``(total, {node name: bytes})``.

    Example:
        >>> loss = model(x).sum()
        >>> print(saved_bytes(loss) / 2**20, "MiB kept for the backward")
    """
    ranges = sorted((*_extent(t), name) for name, t in saved_tensors(output))
    total, by_node, end = 0, {}, None
    for start, stop, name in ranges:
        new = stop - start if end is None or start >= end else max(0, stop - end)
        end = stop if end is None else max(end, stop)
        total += new
        by_node[name] = by_node.get(name, 0) + new
    return (total, by_node) if per_node else total
