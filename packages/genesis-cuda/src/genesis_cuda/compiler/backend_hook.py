"""``CUDABackend.compile_graph``: the CUDA backend's compile hook, and its modes.

genesis-core's ``genesis.compile`` traces a graph and asks the backend of its device to
compile it. On CUDA the graph is always fused (``runner.CompiledGraph``: generated Triton
kernels for the elementwise work, the other ops called as they are); ``mode`` (torch's
names) decides whether the result is also replayed as a CUDA graph (``cuda_graph``):

=============================  =================================================
mode                           what runs
=============================  =================================================
None, ``"default"``            fused kernels, replayed as a CUDA graph
``"reduce-overhead"``          the same (torch's name for CUDA-graph replay)
``"max-autotune"``             the same (matmul already tunes its plans itself)
``"max-autotune-no-cudagraphs"``  fused kernels, launched one by one (no CUDA graph)
=============================  =================================================

The forward and the backward graph of one compiled region (``options["region"]``, core's
contract) are captured into one memory pool (``pool_outputs.SharedPool``), so the
backward's temporaries reuse the memory of the forward's.

``options``: ``{"debug_dir": path}`` saves each generated kernel's source there (as
``GENESIS_COMPILE_DEBUG_DIR``; ``GENESIS_COMPILE_DEBUG=1`` prints them);
``{"cudagraphs": False}`` (or torch's ``"triton.cudagraphs": False``) turns the CUDA graph
off in any mode; ``"mode"`` is the mode, when core passes it among the options.

Example:
    >>> run = genesis_cuda.backend.CUDABackend().compile_graph(graph, {"mode": "default"})
    >>> outputs = run(inputs)
"""

from __future__ import annotations

import weakref

from genesis_cuda.compiler.cuda_graph import Graphed
from genesis_cuda.compiler.partition import mutates
from genesis_cuda.compiler.pool_outputs import SharedPool
from genesis_cuda.compiler.runner import CompiledGraph
from genesis_cuda.graphs import graph_pool_handle

_pools: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # region -> its SharedPool

MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def on_cuda(value) -> bool:
    """Whether a graph value lives on a CUDA device (only those are fused)."""
    return getattr(value.device, "type", None) == "cuda"


def uses_cuda_graph(options: dict) -> bool:
    """Whether ``options`` (mode included) ask for CUDA-graph replay."""
    mode = options.get("mode")
    if mode not in MODES:
        raise ValueError(f"genesis.compile: unknown mode {mode!r} for the CUDA backend; "
                         f"choose one of {', '.join(repr(m) for m in MODES)}")
    if options.get("cudagraphs") is False or options.get("triton.cudagraphs") is False:
        return False
    return mode != "max-autotune-no-cudagraphs"


def compile_graph(graph, options: dict | None):
    """Compile a traced ``graph`` for CUDA: ``run(inputs) -> outputs`` over tensors.

    Args:
        graph: a ``genesis.compiler.graph.Graph``.
        options: ``genesis.compile``'s options (see the module docstring).

    Returns:
        The compiled callable (a ``CompiledGraph``, wrapped in ``Graphed`` for CUDA-graph
        replay unless the mode or options say otherwise).
    """
    options = dict(options or {})
    graphed = uses_cuda_graph(options)
    run = CompiledGraph(graph, options, on_cuda)
    if not graphed:
        return run
    region = options.get("region")
    pool = None
    if region is not None:
        pool = _pools.get(region)
        if pool is None:
            pool = _pools[region] = SharedPool(graph_pool_handle())
    return Graphed(run, writes_inputs=any(mutates(node) for node in graph.nodes), pool=pool)
