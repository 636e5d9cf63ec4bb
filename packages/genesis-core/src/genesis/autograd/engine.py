"""The backward engine: run the graph's nodes in dependency order, summing gradients.

``backward`` accumulates into leaves' ``.grad``; ``grad`` returns gradients for chosen
inputs instead. Both free saved tensors unless ``retain_graph`` is set.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from genesis.autograd.function import (
    _TENSOR_TYPES,
    AccumulateGrad,
    Node,
    grad_edge,
)
from genesis.autograd.grad_mode import _state as _grad_state
from genesis.dispatch import _modes as _intercepting
from genesis.dispatch import intercept_backward


def _as_tuple(x) -> tuple:
    if x is None:
        return ()
    if isinstance(x, (list, tuple)):
        return tuple(x)
    return (x,)


def _initial_grads(outputs: tuple, grad_outputs: tuple) -> list:
    if grad_outputs and len(grad_outputs) != len(outputs):
        raise RuntimeError(f"got {len(grad_outputs)} gradients for {len(outputs)} outputs")
    grads = []
    for i, out in enumerate(outputs):
        g = grad_outputs[i] if grad_outputs else None
        if not out.requires_grad:
            raise RuntimeError(
                f"element {i} of tensors does not require grad and does not have a grad_fn")
        if g is None:
            if out.numel() != 1:
                raise RuntimeError(
                    f"grad can be implicitly created only for scalar outputs; output {i} has "
                    f"shape {tuple(out.shape)}: pass `gradient=` with that shape")
            g = out._implicit_grad()
        elif type(g) not in _TENSOR_TYPES:
            g = out.new_tensor(g)
        elif g.shape != out.shape:
            raise RuntimeError(
                f"Mismatch in shape: grad_output[{i}] has a shape of {tuple(g.shape)} and "
                f"output[{i}] has a shape of {tuple(out.shape)}.")
        grads.append(g)
    return grads


def _dependencies(roots: Sequence) -> dict:
    """Number of incoming edges of every node reachable from ``roots``."""
    deps: dict = {}
    seen = set()  # (nodes hash by identity)
    stack = [node for node, _ in roots]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for edge in node.next_functions:
            if edge is None:
                continue
            child = edge[0]
            deps[child] = deps.get(child, 0) + 1
            stack.append(child)
    return deps


def _needed(roots: Sequence, targets: set) -> set:
    """Ids of the nodes that lie on a path from ``roots`` to a node in ``targets``."""
    memo: dict[int, bool] = {}
    order = []
    stack = [(node, False) for node, _ in roots]
    while stack:  # iterative post-order DFS (graphs can be deeper than the recursion limit)
        node, done = stack.pop()
        if done:
            memo[id(node)] = id(node) in targets or any(
                e is not None and memo.get(id(e[0]), False) for e in node.next_functions)
            order.append(node)
            continue
        if id(node) in memo:
            continue
        memo[id(node)] = False
        stack.append((node, True))
        for e in node.next_functions:
            if e is not None and id(e[0]) not in memo:
                stack.append((e[0], False))
    return {k for k, v in memo.items() if v}


def run_backward(outputs, grad_outputs=None, retain_graph=None, create_graph=False,
                 inputs=None, allow_unused=False, accumulate=True):
    """Shared engine of ``Tensor.backward``, ``autograd.backward`` and ``autograd.grad``."""
    outputs = _as_tuple(outputs)
    if retain_graph is None:
        retain_graph = create_graph
    grads = _initial_grads(outputs, _as_tuple(grad_outputs))
    roots = [grad_edge(o) for o in outputs]

    capture: dict = {}  # (id(node), index) -> position in `inputs`
    input_list = _as_tuple(inputs)
    for pos, t in enumerate(input_list):
        if not t.requires_grad:
            raise RuntimeError(f"input {pos} of autograd.grad does not require grad")
        node, idx = grad_edge(t)
        capture[(id(node), idx)] = pos
    needed = _needed(roots, {k[0] for k in capture}) if capture and not accumulate else None
    results = [None] * len(input_list)

    deps = _dependencies(roots)
    buffers: dict = {}
    for (node, idx), g in zip(roots, grads):
        _add_to_buffer(buffers, node, idx, g)
    ready = [node for node, _ in roots if deps.get(node, 0) == 0]
    ready = list(dict.fromkeys(ready))  # a node may be the root of several outputs

    prev = _grad_state.enabled
    _grad_state.enabled = create_graph
    try:  # the loop runs once per node of every training step: lookups kept inline
        while ready:
            node = ready.pop()
            grads_in = buffers.pop(node, None) or {}
            if node._hooks:
                _call_hooks(node, grads_in)
            if capture:
                for idx, g in grads_in.items():
                    pos = capture.get((id(node), idx))
                    if pos is not None:
                        results[pos] = g if results[pos] is None else results[pos] + g
            if type(node) is AccumulateGrad:
                leaf = node._variable()  # (None: a leaf nobody holds, whose grad none reads)
                if accumulate and (not capture or (id(node), 0) in capture) and 0 in grads_in \
                        and leaf is not None:
                    g = grads_in.pop(0)  # the engine's last reference (see _accumulate)
                    _accumulate(leaf, g, create_graph)
                    del g
                    for hook in node._post_accumulate_hooks:
                        hook(leaf)
                continue
            edges = node.next_functions
            if not grads_in:  # every consumer returned None for it: nothing flows on
                if not retain_graph:
                    node.release()
            elif needed is None or id(node) in needed:  # autograd.grad skips unneeded nodes
                for edge, g, needs in zip(edges, _call_node(node, grads_in),
                                          node.needs_input_grad):
                    if g is not None and needs:  # (an input that needs grad has an edge)
                        child, idx = edge
                        if type(child) is AccumulateGrad:
                            leaf = child._variable()
                            if leaf is not None and g.shape != leaf.shape:
                                _wrong_shape(node, g, leaf)
                        slot = buffers.get(child)  # _add_to_buffer, inlined
                        if slot is None:
                            buffers[child] = {idx: g}
                        else:
                            slot[idx] = g if idx not in slot else slot[idx] + g
                if not retain_graph and node._saved is not None:
                    node.release()
            for edge in edges:  # count the edges as done; children left with none are ready
                if edge is not None:
                    child = edge[0]
                    left = deps[child] - 1
                    deps[child] = left
                    if not left:
                        ready.append(child)
    finally:
        _grad_state.enabled = prev

    if not accumulate:
        for pos, r in enumerate(results):
            if r is None and not allow_unused:
                raise RuntimeError(
                    f"One of the differentiated Tensors (input {pos}) appears to not have been "
                    "used in the graph. Set allow_unused=True if this is the desired behavior.")
        return tuple(results)
    for t, r in zip(input_list, results):
        # backward(inputs=[non_leaf]) fills that tensor's .grad, as in torch
        if r is not None and t.grad_fn is not None:
            _accumulate(t, r, create_graph)
    return None


def _add_to_buffer(buffers: dict, node, idx: int, g) -> None:
    slot = buffers.get(node)
    if slot is None:
        buffers[node] = {idx: g}
    else:
        slot[idx] = g if idx not in slot else slot[idx] + g


def _call_hooks(node, grads: dict) -> dict:
    for idx, hooks in node._hooks.items():
        if idx in grads:
            for hook in hooks:
                new = hook(grads[idx])
                if new is not None:
                    grads[idx] = new
    return grads


def _call_node(node: Node, grads_in: dict) -> tuple:
    """Run ``node``'s backward on its output grads: one gradient (or None) per forward
    input."""
    if node._n_outputs == 1 and 0 in grads_in:  # the common case: one output, its grad
        grads = (grads_in[0],)
    else:
        grads = []
        for i in range(node._n_outputs):
            g = grads_in.get(i)
            if g is None and node.materialize_grads:
                shape, dtype, device = node._output_meta[i]
                some = next(v for v in grads_in.values() if v is not None)  # one device
                g = some.new_zeros(shape, dtype=dtype, device=device)
            grads.append(g)
        grads = tuple(grads)
    if _intercepting:  # dispatch modes see the node run (its formula's ops they see anyway)
        result = intercept_backward(node, lambda: node.apply_backward(grads), grads)
    else:
        # Node.apply_backward, inlined; the one-gradient call of fixed arity (*grads would
        # re-enter the interpreter, once per node)
        backward = node._fn.backward
        result = backward(node, grads[0]) if len(grads) == 1 else backward(node, *grads)
        if not isinstance(result, tuple):
            result = (result,)
    edges = node.next_functions
    if len(result) != len(edges):
        # more gradients than inputs is fine only when the extra ones are None (as torch)
        if len(result) < len(edges) or any(g is not None for g in result[len(edges):]):
            raise RuntimeError(f"function {node.name()} returned {len(result)} gradients; "
                               f"expected {len(edges)}")
        result = result[:len(edges)]
    for hook in node._post_hooks:
        hook(result, grads)
    return result


def _wrong_shape(node: Node, g, leaf) -> None:
    raise RuntimeError(f"function {node.name()} returned a gradient of shape {tuple(g.shape)} "
                       f"for an input of shape {tuple(leaf.shape)}")


def _accumulate(leaf, g, create_graph: bool) -> None:
    if g.dtype is not leaf.dtype:
        g = g.to(leaf.dtype)
    if leaf.grad is None:
        # The first gradient becomes .grad without a copy when nothing else can see it (as
        # torch's AccumulateGrad steals it); otherwise a fresh copy: the graph's intermediate
        # may be shared or a view (e.g. expand).
        if create_graph:
            leaf.grad = g
        elif _unshared(g, leaf):
            leaf.grad = g
        else:
            leaf.grad = (g.detach() if g.requires_grad else g).clone()
    elif create_graph:
        leaf.grad = leaf.grad + g
    else:
        leaf.grad.add_(g.detach() if g.requires_grad else g)


def _unshared(g, leaf) -> bool:
    """Whether gradient ``g`` can become ``leaf.grad`` as it is: no other reference to the
    tensor (the engine handed over its last one) or to its array, not a view, not
    recording, and laid out as the leaf (torch's gradient layout contract)."""
    if sys.getrefcount(g) > _OWNED_REFS or g._base is not None or g.requires_grad:
        return False
    if sys.getrefcount(g._data) > _OWNED_ARRAY_REFS:
        return False
    return g.stride() == leaf.stride()


def _probe_accumulate(g) -> int:
    return _probe_unshared(g)


def _probe_unshared(g) -> int:
    return sys.getrefcount(g)


class _Probe:
    __slots__ = ("_data",)


def _probe_refs() -> tuple[int, int]:
    """References to a gradient that only the engine held, as ``_unshared`` sees them (the
    engine's local, ``_accumulate``'s and ``_unshared``'s arguments, getrefcount's own), and
    to an array only its tensor holds: measured once on the same chain of calls, so the
    check follows the running interpreter's counting rules."""
    g = _Probe()
    g._data = object()
    return _probe_accumulate(g), sys.getrefcount(g._data)


_OWNED_REFS, _OWNED_ARRAY_REFS = _probe_refs()


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False,
             inputs=None) -> None:
    """Accumulate gradients of ``tensors`` into the leaves' ``.grad`` (see Tensor.backward)."""
    run_backward(tensors, grad_tensors, retain_graph, create_graph, inputs=inputs,
                 accumulate=True)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False) -> tuple:
    """Gradients of ``outputs`` with respect to ``inputs``, returned rather than accumulated.

    Args:
        outputs: tensors to differentiate.
        inputs: tensors to differentiate with respect to.
        grad_outputs: d(loss)/d(output) per output (needed for non-scalar outputs).
        retain_graph: keep the graph for another backward (default: create_graph).
        create_graph: record the computation, for higher-order derivatives.
        allow_unused: return None (rather than raise) for inputs the outputs don't use.

    Example:
        >>> (g,) = genesis.autograd.grad((x ** 3).sum(), x, create_graph=True)
    """
    single = not isinstance(inputs, (list, tuple))
    result = run_backward(outputs, grad_outputs, retain_graph, create_graph,
                          inputs=(inputs,) if single else tuple(inputs),
                          allow_unused=allow_unused, accumulate=False)
    return result
