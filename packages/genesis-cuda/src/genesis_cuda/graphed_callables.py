"""``make_graphed_callables``: a function or module whose forward and backward each replay
a CUDA graph, usable inside an eager autograd computation (as ``torch.cuda``'s)."""

from __future__ import annotations

import genesis
from genesis_cuda import streams
from genesis_cuda.graphs import CUDAGraph, graph, graph_pool_handle


def _flat(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _check_args(args, what: str) -> tuple:
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"{what} must be a tuple of tensors (one per argument), got "
                        f"{type(args).__name__}")
    args = tuple(args)
    for i, a in enumerate(args):
        if not isinstance(a, genesis.Tensor) or a.device.type != "cuda":
            raise TypeError(f"{what}[{i}] must be a CUDA genesis.Tensor, got "
                            f"{getattr(a, 'device', type(a).__name__)}")
    return args


def _graph_one(fn, sample_args, num_warmup_iters: int, allow_unused_input: bool):
    module = fn if hasattr(fn, "parameters") and hasattr(fn, "training") else None
    params = tuple(module.parameters()) if module is not None else ()
    static_args = _check_args(sample_args, "sample_args")
    inputs = static_args + params
    diff_inputs = [t for t in inputs if t.requires_grad]

    def grads_of(outs, grad_outs):
        diff_outs = [o for o in outs if o.requires_grad]
        if not diff_outs or not diff_inputs:
            return ()
        return genesis.autograd.grad(diff_outs, diff_inputs, grad_outputs=grad_outs,
                                     allow_unused=allow_unused_input)

    # Warm-up on a side stream: compiles and autotunes every kernel before the capture.
    side = streams.Stream()
    side.wait_stream(streams.current_stream())
    outs = ()
    with streams.stream(side):
        for _ in range(num_warmup_iters):
            outs = _flat(fn(*static_args))
            grads_of(outs, [genesis.ones_like(o) for o in outs if o.requires_grad])
        del outs
    streams.current_stream().wait_stream(side)

    pool = graph_pool_handle()  # forward and backward share it: backward reads activations
    fwd_graph, bwd_graph = CUDAGraph(), CUDAGraph()
    with graph(fwd_graph, pool=pool):
        raw = fn(*static_args)
    single = not isinstance(raw, (tuple, list))
    static_outs = _flat(raw)
    diff_out_pos = [i for i, o in enumerate(static_outs) if o.requires_grad]
    static_grad_outs = [genesis.empty_like(static_outs[i]) for i in diff_out_pos]
    with graph(bwd_graph, pool=pool):
        grads = grads_of(static_outs, static_grad_outs)
    static_grads = iter(grads)
    input_grads = [next(static_grads) if t.requires_grad else None for t in inputs]

    class Graphed(genesis.autograd.Function):
        @staticmethod
        def forward(ctx, *given):
            for static, x in zip(static_args, given):
                if x is not static:
                    static.copy_(x)
            fwd_graph.replay()
            return tuple(o.detach() for o in static_outs)

        @staticmethod
        def backward(ctx, *grad_outs):
            for static, pos in zip(static_grad_outs, diff_out_pos):
                g = grad_outs[pos]
                if g is None:
                    static.zero_()
                else:
                    static.copy_(g)
            bwd_graph.replay()
            # Cloned: the next replay rewrites the static buffers, and autograd may keep
            # the returned tensors (as .grad) across it.
            return tuple(None if g is None else g.clone() for g in input_grads)

    def graphed(*args):
        if len(args) != len(static_args):
            raise TypeError(f"the graphed callable was captured with {len(static_args)} "
                            f"arguments, got {len(args)}")
        for i, (static, x) in enumerate(zip(static_args, args)):
            if (tuple(x.shape) != tuple(static.shape) or x.dtype != static.dtype
                    or x.requires_grad != static.requires_grad):
                raise ValueError(
                    f"argument {i} must match the sample it was captured with: shape "
                    f"{tuple(static.shape)}, dtype {static.dtype}, requires_grad "
                    f"{static.requires_grad}; got shape {tuple(x.shape)}, dtype {x.dtype}, "
                    f"requires_grad {x.requires_grad}")
        out = Graphed.apply(*args, *params)
        return out[0] if single else out

    # The graphs, pool and fixed buffers stay alive as long as the callable does.
    graphed.graphs = (fwd_graph, bwd_graph)
    if module is None:
        return graphed
    original, training = module.forward, module.training

    def forward(*args):
        return graphed(*args) if module.training == training else original(*args)

    module.forward = forward
    return module


def make_graphed_callables(callables, sample_args, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False):
    """Graphed versions of functions or modules: forward and backward each replay a graph.

    Each callable is warmed up ``num_warmup_iters`` times on a side stream, then its
    forward and its backward (``autograd.grad`` of the outputs that require grad with
    respect to the arguments and module parameters that do) are captured into two graphs
    sharing one private pool. Calls copy their arguments into the captured (static)
    arguments and replay; they must have the sample's shapes, dtypes and requires_grad.
    Outputs are the static outputs (overwritten by the next call: clone to keep them).
    A module is returned with its ``forward`` replaced while its training mode is the one
    it was captured in. What cannot be captured: ``docs/cuda_graphs.md``.

    Args:
        callables: a function or ``nn.Module``, or a tuple of them.
        sample_args: a tuple of CUDA tensors per callable (a tuple of tuples for several).
        num_warmup_iters: eager runs before capture (compile and autotune kernels).
        allow_unused_input: allow arguments that the outputs do not depend on.

    Returns:
        the graphed callable, or a tuple of them.

    Example:
        >>> mlp = genesis.cuda.make_graphed_callables(mlp, (genesis.randn(8, 16, device="cuda"),))
        >>> loss = mlp(x).sum(); loss.backward()
    """
    single = not isinstance(callables, tuple)
    if single:
        callables, sample_args = (callables,), (sample_args,)
    if len(callables) != len(sample_args):
        raise ValueError(f"got {len(callables)} callables but {len(sample_args)} "
                         "sample_args tuples")
    out = tuple(_graph_one(fn, args, num_warmup_iters, allow_unused_input)
                for fn, args in zip(callables, sample_args))
    return out[0] if single else out
