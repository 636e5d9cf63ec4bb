"""Replay a compiled graph as one CUDA graph: static inputs in, copied outputs out.

``Graphed(fn)`` wraps a compiled callable (``runner.CompiledGraph``) whose inputs and outputs
are CUDA tensors of fixed shapes (core's guards recompile on a new shape):

1. The first call runs ``fn`` eagerly: Triton compiles the generated kernels, matmul tunes
   its plans (none of which can happen inside a capture).
2. The second call captures ``fn`` into a ``CUDAGraph`` (``genesis_cuda.graphs``; its
   memory comes from the graph's private pool) on *static inputs*, then replays it. An
   input that is the very same tensor as in the first call (a parameter, a buffer, which
   the optimizer updates in place) is read in place; every other input gets a static buffer
   of ours with its layout (the caller's tensors are never written, nor kept); where that
   layout differs (a non-dense input gets a contiguous buffer) ``fn`` runs once more
   eagerly on the buffers first, so the kernels they need are compiled outside the capture.
3. Every later call copies each non-persistent input into its buffer and replays. A graph
   with in-place ops may write its inputs: the buffers are then copied back into the
   caller's tensors after the replay, so ``x.add_(1)`` inside a compiled function still
   changes the caller's ``x``. A persistent input replaced by another tensor (a new
   parameter) makes the call run eagerly and the next one capture again.

Outputs: the captured outputs live in the pool and every replay overwrites them, so they are
never handed out. Each call returns *copies* of them (with their layouts), made right after the
replay in ordinary memory: a caller may keep any number of results (losses, activations
saved for backward) across later calls, and a copy costs one read and one write of the
output, far less than the launches a replay saves.

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
from genesis_cuda.compiler.runner import empty_laid_out
from genesis_cuda.graphs import CUDAGraph, graph


class Graphed:
    """``fn(inputs) -> outputs`` replayed as a CUDA graph after one eager warm-up call.

    Args:
        fn: a callable on a list of CUDA tensors returning a list of tensors.
        warmup: eager calls before the capture (compilation and tuning happen there).
        writes_inputs: ``fn`` has in-place ops, which may write its inputs: after each
            replay the owned static buffers are copied back into the caller's tensors.
    """

    def __init__(self, fn, warmup: int = 1, writes_inputs: bool = False):
        self.fn, self.warmup, self.writes_inputs = fn, warmup, writes_inputs
        self.calls = 0
        self.cuda_graph = None
        self.previous: list | None = None  # the last warm-up call's inputs
        self.static_inputs: list = []
        self.owned: list = []  # per input: a buffer of ours (True) or the caller's tensor
        self.static_outputs: list = []
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
        for x, static, own in zip(inputs, self.static_inputs, self.owned):
            if not own and x is not static:  # a persistent input was replaced: capture anew
                self.reset()
                self.previous = list(inputs)
                return self.fn(inputs)
        self._copy_in(inputs)
        self.cuda_graph.replay()
        if self.writes_inputs:
            self._write_back(inputs)
        return self._hand_out()

    def _copy_in(self, inputs: list) -> None:
        with genesis.no_grad():
            for x, static, own in zip(inputs, self.static_inputs, self.owned):
                if own:
                    static.copy_(x)

    def _write_back(self, inputs: list) -> None:
        with genesis.no_grad():
            for x, static, own in zip(inputs, self.static_inputs, self.owned):
                if own:
                    x.copy_(static)

    def _capture(self, inputs: list) -> list:
        # Inputs that were the very same tensors in the warm-up call (parameters, buffers)
        # are read in place; every other input gets a buffer of ours, with its layout.
        self.owned = [x is not p for x, p in zip(inputs, self.previous)]
        self.previous = None
        self.static_inputs = [_buffer_like(x) if own else x
                              for x, own in zip(inputs, self.owned)]
        self._copy_in(inputs)
        relaid = any(tuple(b.stride()) != tuple(x.stride())
                     for b, x in zip(self.static_inputs, inputs))
        if relaid and not self.writes_inputs:  # (a run that edits inputs must not run twice)
            self.fn(self.static_inputs)  # warm the kernels of the buffers' layouts
        g = CUDAGraph()
        try:
            with graph(g):
                outs = self.fn(self.static_inputs)
        except (GraphCaptureError, RuntimeError) as exc:
            # (a driver or Triton error during capture: the capture is discarded and the
            # device stays usable; an error of fn itself is raised again by the call below)
            warnings.warn(f"genesis.compile: the compiled graph cannot be captured as a CUDA "
                          f"graph ({type(exc).__name__}: {exc}); it runs without CUDA graphs",
                          stacklevel=3)
            self.failed = True
            self.static_inputs, self.owned = [], []
            return self.fn(inputs)
        self.cuda_graph, self.static_outputs = g, list(outs)
        g.replay()
        if self.writes_inputs:
            self._write_back(inputs)
        return self._hand_out()

    def _hand_out(self) -> list:
        return [_copy_out(o) if isinstance(o, genesis.Tensor) else o for o in self.static_outputs]

    def reset(self) -> None:
        """Drop the captured graph and its static buffers (the next call warms up again)."""
        if self.cuda_graph is not None:
            self.static_outputs = []
            self.static_inputs, self.owned = [], []
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


def _copy_out(o):
    """A copy of a captured output in ordinary memory, with the output's own layout: the
    graph that reads it next (the backward reads saved activations) was traced on that
    layout, and a view valid on a transposed output need not be valid on a C-order copy."""
    out = empty_laid_out(tuple(o.shape), tuple(o.stride()), o.dtype, o.device)
    with genesis.no_grad():
        out.copy_(o)
    return out
