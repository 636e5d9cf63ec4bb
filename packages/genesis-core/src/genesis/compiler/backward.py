"""The compiled backward: trace the backward autograd would run, and the region node.

After a forward trace that needs grad, ``trace_backward`` runs ``autograd.grad`` of the
traced outputs with placeholder output gradients, under a ``Tracer``: the ops of every
gradient formula are recorded into a backward ``Graph`` whose inputs are the output
gradients and the forward values the formulas read (the saved tensors). It runs with
``create_graph=True`` so the formulas take their differentiable path, made of dispatched
ops (a no-grad formula may compute on backend arrays directly, which no mode sees).
A formula that reads a tensor no recorded op made makes the backward untraceable
(``UntraceableError``): the compiled function then replays its forward through the
dispatcher, so eager autograd does the backward. Of the intermediates the formulas read, the
forward keeps only those ``compiler.recompute`` chooses; the backward graph recomputes the
others (cheap elementwise work) from them.

At replay, ``CompiledRegion`` is the autograd Function of the whole compiled call: its
forward runs the forward graph and saves what the backward graph reads; its backward runs
the backward graph. Its node is the outputs' ``grad_fn``; its gradients flow into the
inputs' graphs and parameters' ``.grad`` through the engine, as eager's would.
"""

from __future__ import annotations

from genesis.autocast import _set_enabled
from genesis.autocast import _state as _autocast_state
from genesis.autograd.engine import grad as autograd_grad
from genesis.autograd.function import Function
from genesis.autograd.grad_mode import no_grad
from genesis.compiler.cse import merge_common, reading, renamed
from genesis.compiler.node_backward import UntraceableError
from genesis.compiler.recompute import SavedBytes, recomputable_nodes, rematerialize
from genesis.compiler.replay import build_graph
from genesis.compiler.tracer import Tracer

__all__ = ["BackwardPlan", "CompiledRegion", "trace_backward"]


class BackwardPlan:
    """What ``CompiledRegion`` needs: the two runners and the positions that link them.

    Attributes:
        forward_graph, backward_graph: the graphs (the contract's).
        run_forward, run_backward: their compiled callables.
        n_outputs: how many of the forward graph's outputs are the function's results (the
            rest are saved intermediates).
        nondiff: positions of results that get no gradient.
        diff: positions of results whose gradient the backward graph takes.
        saved_inputs: positions in the forward inputs of inputs the backward reads.
        grad_inputs: positions in the forward inputs of the backward graph's outputs.
        saved_bytes: a ``recompute.SavedBytes``: what the forward keeps for the backward,
            against what eager autograd would keep.
    """

    run_forward = run_backward = None


def _release_formula_nodes(bt: Tracer, segments: list) -> None:
    """Free what the autograd nodes of the traced gradient formulas saved.

    ``create_graph`` made those nodes (so that the formulas ran as dispatched ops), but
    nothing backwards through them. The backward tracer holds the formulas' tensors, and so
    their nodes, until the plan is built: released here, the forward tensors the formulas
    read are freed now. (Before autograd held a node's saved output weakly, such a node and
    its output were a reference cycle that kept them through training: 1.3 GiB at
    tools/bench/train.py's 0.2B shape, genesis.autograd.back_references.)"""
    for seg in segments:
        for node in seg.nodes:
            for v in node.outputs:
                made = bt.tensors.get(v.id)  # (a tensor a formula made: its node is new)
                if made is not None and made.grad_fn is not None:
                    made.grad_fn.release()


def trace_backward(tracer: Tracer, fwd_nodes: list, inputs: list, out_values: list,
                   out_tensors: list, whole_nodes: bool = False,
                   recompute: bool = True) -> BackwardPlan:
    """Trace the backward of a finished forward trace.

    Args:
        tracer: the forward tracer (its ``known`` map and id counter are reused).
        fwd_nodes: the forward's nodes.
        inputs: ``(tensor, Value)`` of every forward graph input, in graph order.
        out_values: the forward's result Values produced by its nodes (graph order).
        out_tensors: their tensors (from the trace run).
        whole_nodes: record every gradient formula as one ``<op>_backward`` node (rather
            than the ops it is made of, where it is made of ops).
        recompute: let the backward recompute cheap intermediates rather than have the
            forward keep them (``compiler.recompute``), and compute a repeated cheap result
            once (``compiler.cse``); False keeps what eager autograd keeps.

    Returns:
        A ``BackwardPlan`` (runners not yet set).

    Raises:
        UntraceableError: a gradient formula computed outside the dispatcher.
    """
    diff = [i for i, t in enumerate(out_tensors)
            if t.requires_grad and t.dtype.is_floating_point]
    wrt = [i for i, (t, _) in enumerate(inputs) if t.requires_grad]
    if not diff or not wrt:
        raise UntraceableError("no output depends on an input that requires grad")
    with no_grad():
        placeholders = [out_tensors[i].new_ones(out_tensors[i].shape) for i in diff]
    known = dict(tracer.known)
    bt = Tracer(tracer.next_id, known, capture=False, whole_nodes=whole_nodes)
    grad_values = [bt.new_value(p) for p in placeholders]
    autocast = dict(_autocast_state.by_device)
    _autocast_state.by_device = {}  # the backward runs outside autocast, as eager's does
    _set_enabled(False)
    try:
        with bt:  # (create_graph: formulas take their path of dispatched ops where they have one)
            grads = autograd_grad([out_tensors[i] for i in diff], [inputs[i][0] for i in wrt],
                                  grad_outputs=placeholders, retain_graph=True,
                                  create_graph=not whole_nodes, allow_unused=True)
    finally:
        _autocast_state.by_device = autocast
        _set_enabled(bool(autocast))
    segments = bt.finish(list(grads))
    _release_formula_nodes(bt, segments)
    if len(segments) != 1:
        raise UntraceableError("a gradient formula reads a value on the host")
    nodes, results = segments[0].nodes, list(segments[0].result)
    input_pos = {v.id: i for i, (_, v) in enumerate(inputs)}
    bwd = build_graph(nodes, grad_values, results, "backward")
    eager_saved = [v for v in bwd.inputs[len(grad_values):] if v.id not in input_pos]
    if recompute:  # a result the forward computes twice is kept once (compiler.cse)
        fwd_nodes, same = merge_common(fwd_nodes, recomputable_nodes(fwd_nodes, tracer.tensors),
                                       out_values)
        if same:
            nodes, results = [reading(n, same) for n in nodes], renamed(results, same)
            bwd = build_graph(nodes, grad_values, results, "backward")
    made_fwd = {v.id for node in fwd_nodes
                for v in (*node.outputs, *(s for s in node.saved if s is not None))}
    for v in bwd.inputs[len(grad_values):]:
        if v.id not in made_fwd and v.id not in input_pos:
            raise UntraceableError(f"the backward reads {v}, which the forward did not make")
    recomputed = 0
    if recompute:
        read = [v for v in bwd.inputs[len(grad_values):] if v.id not in input_pos]
        nodes, results, recomputed = rematerialize(fwd_nodes, nodes, results, read,
                                                   set(input_pos), tracer.tensors,
                                                   tracer.next_id)
        bwd = build_graph(nodes, grad_values, results, "backward")
    saved = bwd.inputs[len(grad_values):]
    plan = BackwardPlan()
    plan.saved_inputs = [input_pos[v.id] for v in saved if v.id in input_pos]
    intermediates = [v for v in saved if v.id not in input_pos]
    plan.saved_bytes = SavedBytes.measure(eager_saved, intermediates, recomputed)
    # the backward graph's inputs in the order the region hands them over
    bwd.inputs = grad_values + [inputs[i][1] for i in plan.saved_inputs] + intermediates
    plan.forward_graph = build_graph(fwd_nodes, [v for _, v in inputs],
                                     list(out_values) + intermediates, "forward")
    plan.forward_graph.notes.append(str(plan.saved_bytes))
    plan.backward_graph = bwd
    plan.n_outputs = len(out_values)
    plan.diff = diff
    plan.nondiff = [i for i in range(len(out_values)) if i not in set(diff)]
    plan.grad_inputs = wrt
    return plan


class CompiledRegion(Function):
    """The autograd node of a compiled call: forward and backward are replayed graphs."""

    op_name = None  # not an op of the registry: it is made by genesis.compile only

    @staticmethod
    def forward(ctx, plan: BackwardPlan, *inputs):
        outs = plan.run_forward(list(inputs))
        n = plan.n_outputs
        ctx.save_for_backward(*[inputs[i] for i in plan.saved_inputs], *outs[n:])
        ctx.plan, ctx.n_inputs = plan, len(inputs)
        results = tuple(outs[:n])
        if plan.nondiff:
            ctx.mark_non_differentiable(*[results[i] for i in plan.nondiff])
        return results

    @staticmethod
    def backward(ctx, *grads):
        plan = ctx.plan
        saved = ctx.saved_tensors
        outs = plan.run_backward([grads[i] for i in plan.diff] + list(saved))
        result = [None] * (1 + ctx.n_inputs)
        for pos, g in zip(plan.grad_inputs, outs):
            result[1 + pos] = g
        return tuple(result)

