"""Replay a compiled graph as one CUDA graph: static inputs in, pool memory handed out.

``Graphed(fn)`` wraps a compiled callable (``runner.CompiledGraph``) whose inputs and outputs
are CUDA tensors of fixed shapes (core's guards recompile on a new shape):

1. The first call runs ``fn`` eagerly: Triton compiles the generated kernels, matmul tunes
   its plans (none of which can happen inside a capture).
2. The second call captures ``fn`` into a ``CUDAGraph`` (``genesis_cuda.graphs``; its
   memory comes from the graph's private pool) on *static inputs*, then replays it. Inputs
   are read in place where they stay put: the very same tensor as in the first call (a
   parameter, a buffer, which the optimizer updates in place), or an output another graph
   handed out (the backward graph reads the forward's saved activations where the forward
   wrote them). Every other input gets a static buffer of ours with its layout (the
   caller's tensors are never written, nor kept); where that layout differs (a non-dense
   input gets a contiguous buffer) ``fn`` runs once more eagerly on the buffers first, so
   the kernels they need are compiled outside the capture.
   After the capture the caching allocator's free memory (what the trace and the warm-up
   held) goes back to the driver (``empty_cache``, once): the pool does that work now.
3. Every later call copies each buffered input into its buffer and replays. A graph with
   in-place ops may write its inputs: the buffers are then copied back into the caller's
   tensors after the replay, so ``x.add_(1)`` inside a compiled function still changes the
   caller's ``x``. An input read in place that is now elsewhere (a parameter replaced by
   another tensor) makes the call run eagerly, and the next one capture again; a graph
   output that was moved (see below) makes that call alone run eagerly.

Outputs are handed out without copies (``pool_outputs``): tensors over the pool memory the
replay wrote. Before the next replay overwrites that memory, any of them still in use (a
loss kept in a variable, a second forward's activations before the first one's backward)
is moved to memory of its own, values intact; in a training loop the activations saved
for backward are released by the backward first, so nothing moves.

Random fills inside (dropout) draw new numbers at every replay: ``CUDAGraph`` keeps their
Philox seed and offset on the device and advances them before each replay
(``generator.CapturedPhilox``). Work that cannot be captured (a host sync such as
``item()``, a fused kernel's own random numbers) makes the capture fail
(``GraphCaptureError``, or a driver error); the wrapper then runs ``fn`` eagerly from there
on, with a warning.

Example:
    >>> run = Graphed(CompiledGraph(graph, options, on_cuda))
    >>> out = run(inputs)    # eager; then captured; then replayed
"""

from __future__ import annotations

import warnings

import genesis
from genesis_cuda.capture import GraphCaptureError
from genesis_cuda.compiler.codegen import dense
from genesis_cuda.compiler.pool_outputs import PoolOutputs, SharedPool, is_pool_alias
from genesis_cuda.graphs import CUDAGraph, graph
from genesis_cuda.memory import empty_cache

BUFFERED, KEPT, HANDED = "buffered", "kept", "handed"  # how an input reaches the graph


class Graphed:
    """``fn(inputs) -> outputs`` replayed as a CUDA graph after one eager warm-up call.

    Args:
        fn: a callable on a list of CUDA tensors returning a list of tensors.
        warmup: eager calls before the capture (compilation and tuning happen there).
        writes_inputs: ``fn`` has in-place ops, which may write its inputs: after each
            replay the buffered inputs are copied back into the caller's tensors.
        pool: a ``pool_outputs.SharedPool`` to capture into, shared with the other graphs
            of a compiled region (default: a pool of this graph's own).

    Attributes:
        kinds: per input, how it reaches the graph: ``"buffered"`` (copied into a static
            buffer of ours), ``"kept"`` (the same tensor at every call, read in place) or
            ``"handed"`` (another graph's output, read in place where that graph wrote it).
        outputs: the captured outputs (``PoolOutputs``).
    """

    def __init__(self, fn, warmup: int = 1, writes_inputs: bool = False,
                 pool: SharedPool | None = None):
        self.fn, self.warmup, self.writes_inputs = fn, warmup, writes_inputs
        self.pool = pool
        self.calls = 0
        self.cuda_graph = None
        self.previous: list | None = None  # the last warm-up call's inputs
        self.static_inputs: list = []  # per input: our buffer, the kept tensor, or None
        self.kinds: list = []
        self.addresses: list = []  # per input read in place: (data_ptr, strides) captured
        self.outputs: PoolOutputs | None = None
        self.failed = False

    def __call__(self, inputs: list) -> list:
        self.calls += 1
        if self.failed or not _capturable(inputs):
            return self.fn(inputs)
        if self.cuda_graph is None:
            if self.calls <= self.warmup or self.previous is None:
                self.previous = list(inputs)
                return self.fn(inputs)
            return self._capture(inputs)
        for x, kind, at in zip(inputs, self.kinds, self.addresses):
            # (by address: a kept tensor given new memory, ``p.data = ...``, is elsewhere)
            if kind is BUFFERED or at == (x._data.data_ptr(), x.stride()):
                continue
            if kind is HANDED:  # that output was moved away: run this call eagerly
                return self.fn(inputs)
            self.reset()  # a kept input was replaced: capture anew
            self.previous = list(inputs)
            return self.fn(inputs)
        self._copy_in(inputs)
        if self.pool is None:
            self.outputs.evacuate()
        else:
            self.pool.before_replay(self)
        self.cuda_graph.replay()
        if self.writes_inputs:
            self._write_back(inputs)
        return self.outputs.hand_out()

    def _copy_in(self, inputs: list) -> None:
        with genesis.no_grad():
            for x, static, kind in zip(inputs, self.static_inputs, self.kinds):
                if kind is BUFFERED:
                    static.copy_(x)

    def _write_back(self, inputs: list) -> None:
        with genesis.no_grad():
            for x, static, kind in zip(inputs, self.static_inputs, self.kinds):
                if kind is BUFFERED:
                    x.copy_(static)

    def _capture(self, inputs: list) -> list:
        self.kinds = [KEPT if x is p else HANDED if is_pool_alias(x) else BUFFERED
                      for x, p in zip(inputs, self.previous)]
        self.previous = None
        self.static_inputs = [_buffer_like(x) if kind is BUFFERED else x
                              for x, kind in zip(inputs, self.kinds)]
        self._copy_in(inputs)
        relaid = any(tuple(b.stride()) != tuple(x.stride())
                     for b, x in zip(self.static_inputs, inputs))
        if relaid and not self.writes_inputs:  # (a run that edits inputs must not run twice)
            self.fn(self.static_inputs)  # warm the kernels of the buffers' layouts
        g = CUDAGraph()
        try:
            with graph(g, pool=None if self.pool is None else self.pool.handle):
                outs = self.fn(self.static_inputs)
        except (GraphCaptureError, RuntimeError) as exc:
            # (a driver or Triton error during capture: the capture is discarded and the
            # device stays usable; an error of fn itself is raised again by the call below)
            warnings.warn(f"genesis.compile: the compiled graph cannot be captured as a CUDA "
                          f"graph ({type(exc).__name__}: {exc}); it runs without CUDA graphs",
                          stacklevel=3)
            self.failed = True
            self.static_inputs, self.kinds = [], []
            return self.fn(inputs)
        self.cuda_graph, self.outputs = g, PoolOutputs(list(outs), g.pool())
        if self.pool is not None:
            self.pool.captured(self)
        # The trace and the eager warm-up left the caching allocator holding their
        # activations' memory; from now on the graph's pool does that work, so the cache
        # goes back to the driver once, here (else it stays reserved for the whole run)
        empty_cache()
        self.addresses = [None if kind is BUFFERED else (x._data.data_ptr(), x.stride())
                          for x, kind in zip(self.static_inputs, self.kinds)]
        # another graph's outputs are matched by address only (holding them would keep
        # that graph's aliases, and their memory, from ever being released)
        self.static_inputs = [None if kind is HANDED else x
                              for x, kind in zip(self.static_inputs, self.kinds)]
        g.replay()
        if self.writes_inputs:
            self._write_back(inputs)
        return self.outputs.hand_out()

    def reset(self) -> None:
        """Drop the captured graph and its static buffers (the next call warms up again),
        and those of the graphs sharing its pool. Outputs already handed out stay valid:
        they keep their memory."""
        if self.pool is not None and self.cuda_graph is not None:
            self.pool.reset()
        self.drop_capture()

    def drop_capture(self) -> None:
        """Drop this graph's capture and static buffers (``reset``, for one graph)."""
        if self.cuda_graph is not None:
            self.outputs = None
            self.static_inputs, self.kinds, self.addresses = [], [], []
            self.cuda_graph.reset()
            self.cuda_graph = None
        self.calls = 0


def _buffer_like(x):
    """A new tensor of ``x``'s shape, dtype and (dense) layout, outside any graph pool."""
    shape, stride = tuple(x.shape), tuple(x.stride())
    if dense(shape, stride):
        n = 1
        for s in shape:
            n *= s
        return genesis.as_strided(genesis.empty((n,), dtype=x.dtype, device=x.device), shape,
                                  stride)
    return genesis.empty(shape, dtype=x.dtype, device=x.device)


def _capturable(inputs: list) -> bool:
    """Only CUDA tensors can be static inputs (a CPU tensor or a Python value cannot)."""
    for x in inputs:
        if not isinstance(x, genesis.Tensor) or x.device.type != "cuda":
            return False
    return bool(inputs)
