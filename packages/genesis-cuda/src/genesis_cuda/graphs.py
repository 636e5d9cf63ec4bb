"""CUDA graphs: record a region of genesis work once, replay it with a single launch.

Named and used as in ``torch.cuda``: ``CUDAGraph``, the ``graph`` context manager,
``graph_pool_handle`` and ``make_graphed_callables`` (in ``graphed_callables``).

How it works:

* Capture (``cuStreamBeginCapture``/``cuStreamEndCapture``) runs on a side stream, never on
  the legacy default stream: ``graph(...)`` makes the side stream current, so every genesis
  kernel and every Triton launch (``triton_hooks`` points Triton at genesis's current
  stream) is recorded into the graph instead of running.
* Memory: while a graph is captured, every allocation on its device comes from a *private
  pool* of the caching allocator (``CachingAllocator.begin_capture``). Chunks of that pool
  are never handed to ordinary allocations while a graph using the pool lives, so each
  replay reads and writes the addresses captured. ``pool=`` (a ``graph_pool_handle()`` or
  ``other_graph.pool()``) shares a pool between graphs; the last graph of a pool to go
  (``reset()``/``del``) returns the pool's memory. New segments are taken with plain
  ``cuMemAlloc`` during capture, with the thread's capture mode relaxed around that one
  call (``cuMemAlloc`` is no stream operation: nothing is recorded into the graph); no
  ``cuMemFree``, event query or synchronisation is made during capture (frees of ordinary
  memory and the out-of-memory retry wait until the capture ends).
* Work that needs the host to wait for the device cannot be recorded; trying it during
  capture raises ``GraphCaptureError`` naming the operation (see ``docs/cuda_graphs.md``):
  ``item()``/``float()``/``bool()`` of a tensor, ``numpy()``/``tolist()``/``cpu()``,
  ``synchronize`` (device, stream, event), ``Stream.query``/
  ``Event.query``, ``nonzero`` and boolean-mask indexing, ``empty_cache``, the first matmul
  of a new shape (its autotuning times kernels), and the random numbers of fused kernels
  (attention's ``dropout_p``: their Philox offset is a host value, so a replay would repeat
  the captured numbers; this is refused rather than replayed wrongly).
* Random fills (``rand``, ``randn``, ``dropout``, ``uniform_`` ...) *are* captured: their
  kernels read seed and offset from device memory (``generator.CapturedPhilox``), which
  ``replay`` advances first, so every replay draws new numbers. Host data copied to the device
  during capture (``genesis.tensor(..., device="cuda")``) is a constant of the graph: it is
  copied from a pinned buffer the graph owns at every replay.

Example:
    >>> g = genesis.cuda.CUDAGraph()
    >>> static_x = genesis.randn(8, 16, device="cuda")
    >>> y = (static_x @ w).relu()            # warm-up (compiles and tunes the kernels)
    >>> with genesis.cuda.graph(g):
    ...     static_y = (static_x @ w).relu()
    >>> static_x.copy_(new_x); g.replay()     # static_y now holds the result for new_x
"""

from __future__ import annotations

import itertools

from genesis_cuda import capture, driver, generator, kernel_errors, memory, streams
from genesis_cuda import device as _device
from genesis_cuda.capture import GraphCaptureError

_POOL_TAG = "genesis_graph_pool"
_pool_ids = itertools.count(1)
_MODES = ("global", "thread_local", "relaxed")


def graph_pool_handle():
    """A handle of a new private memory pool, to share one pool between several graphs.

    Returns:
        an opaque value to pass as ``pool=`` to ``graph`` or ``CUDAGraph.capture_begin``.

    Example:
        >>> pool = genesis.cuda.graph_pool_handle()
        >>> with genesis.cuda.graph(g1, pool=pool): ...
        >>> with genesis.cuda.graph(g2, pool=pool): ...
    """
    return (_POOL_TAG, next(_pool_ids))


def _check_pool(pool):
    if not (isinstance(pool, tuple) and len(pool) == 2 and pool[0] == _POOL_TAG):
        raise TypeError("pool must be a handle from genesis.cuda.graph_pool_handle() or "
                        f"CUDAGraph.pool(), got {pool!r}")
    return pool


def _capture_mode(cu, name: str):
    if name not in _MODES:
        raise ValueError(f"capture_error_mode must be one of {_MODES}, got {name!r}")
    return getattr(cu.CUstreamCaptureMode, f"CU_STREAM_CAPTURE_MODE_{name.upper()}")


_orphan_host_buffers: list[int] = []  # pinned constants of graphs reset during a capture


def _free_orphan_host_buffers(cu) -> None:
    """Free the pinned constants of destroyed graphs, once queued replays are done."""
    driver.check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
    while _orphan_host_buffers:
        driver.check(cu.cuMemFreeHost(_orphan_host_buffers.pop()), "cuMemFreeHost")


def is_current_stream_capturing() -> bool:
    """True while a graph is being captured on the current device."""
    return capture.is_capturing(_device._current_device)


class CUDAGraph:
    """A captured CUDA graph: ``capture_begin``/``capture_end`` record, ``replay`` runs.

    Use it through ``genesis.cuda.graph(g)``, which captures on a side stream. Tensors
    created during capture live in the graph's private memory pool; every ``replay()``
    rewrites them in place, reading the tensors the captured work read (copy new data into
    those *static inputs* before replaying). What cannot be captured: see the module
    docstring of ``genesis_cuda.graphs`` and ``docs/cuda_graphs.md``.
    """

    def __init__(self):
        self._graph = None  # CUgraph
        self._exec = None  # CUgraphExec
        self._pool = None
        self._device = None
        self._stream = None  # the stream captured on (during capture)
        self._alloc = None
        self._host_buffers: list[int] = []  # pinned constants copied from by the graph
        self._philox: dict = {}  # generator -> its CapturedPhilox (random fills captured)

    def philox(self, gen) -> generator.CapturedPhilox:
        """The device-side random state of ``gen`` in this graph (made on first use, during
        the capture): random fill kernels captured here read their seed and offset from it."""
        cap = self._philox.get(gen)
        if cap is None:
            cap = self._philox[gen] = generator.CapturedPhilox(gen)
        return cap

    def capture_begin(self, pool=None, capture_error_mode: str = "global") -> None:
        """Start recording the work queued on the current stream (which must not be the
        legacy default stream) into this graph.

        Args:
            pool: a pool handle to share memory with other graphs (default: a new pool).
            capture_error_mode: ``"global"``, ``"thread_local"`` or ``"relaxed"``: which
                potentially unsafe CUDA calls (of any thread, this thread, none) abort it.
        """
        if self._exec is not None or self._stream is not None:
            raise RuntimeError("this CUDAGraph already holds a capture; call reset() before "
                               "capturing into it again")
        cu = driver.driver()
        mode = _capture_mode(cu, capture_error_mode)
        pool = graph_pool_handle() if pool is None else _check_pool(pool)
        index = _device._current_device
        _device.lazy_init(index)
        if capture.is_capturing(index):
            raise GraphCaptureError(f"a CUDA graph is already being captured on cuda:{index}; "
                                    "captures cannot be nested")
        stream = streams.current_stream(index)
        if stream.handle == 0:
            raise RuntimeError("cannot capture a CUDA graph on the legacy default stream: use "
                               "`with genesis.cuda.graph(g):`, which captures on a side "
                               "stream, or make a genesis.cuda.Stream() current first")
        alloc = memory.allocator(index)
        alloc.begin_capture(pool)
        capture._capturing[index] = self
        try:
            with driver.using_device(index):
                driver.check(cu.cuStreamBeginCapture(stream.handle, mode), "cuStreamBeginCapture")
        except BaseException:
            del capture._capturing[index]
            alloc.end_capture()
            alloc.release_pool(pool)
            raise
        self._pool, self._device, self._stream, self._alloc = pool, index, stream, alloc

    def _end(self):
        """End the capture on the driver and in the allocator; returns ``(err, CUgraph)``."""
        if self._stream is None or capture._capturing.get(self._device) is not self:
            raise RuntimeError("capture_end() without a matching capture_begin()")
        cu = driver.driver()
        try:
            with driver.using_device(self._device):
                err, graph = cu.cuStreamEndCapture(self._stream.handle)
        finally:
            del capture._capturing[self._device]
            self._alloc.end_capture()
            self._stream = None
        if _orphan_host_buffers and not capture.is_capturing():
            with driver.using_device(self._device):
                _free_orphan_host_buffers(cu)
        return err, graph

    def capture_end(self) -> None:
        """Stop recording and instantiate the graph (it can then be replayed)."""
        err, graph = self._end()
        cu = driver.driver()
        if err != cu.CUresult.CUDA_SUCCESS:
            self.reset()
            if err == cu.CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
                raise GraphCaptureError(
                    "the CUDA graph capture was invalidated: an operation in the captured "
                    "region could not be captured (work on the legacy default stream, or a "
                    "CUDA call that synchronises); see docs/cuda_graphs.md")
            driver.check((err,), "cuStreamEndCapture")
        self._graph = graph
        with driver.using_device(self._device):
            # CUDA 12+ spells it cuGraphInstantiate(graph, flags) (cuda-bindings 13 has only
            # that name); older bindings have the flags form under ...WithFlags
            instantiate = getattr(cu, "cuGraphInstantiateWithFlags", None) or cu.cuGraphInstantiate
            self._exec = driver.check(instantiate(graph, 0), "cuGraphInstantiate")

    def _abort(self) -> None:
        """End a capture that failed part-way, discarding what was recorded."""
        try:
            err, graph = self._end()
            if err == 0 and int(graph):
                self._graph = graph  # destroyed by reset() below
        finally:
            self.reset()

    def keep_host_buffer(self, ptr: int) -> None:
        """Own pinned host memory at ``ptr`` that the captured work copies from (freed with
        ``cuMemFreeHost`` by ``reset``)."""
        self._host_buffers.append(ptr)

    def replay(self) -> None:
        """Run the captured work on the current stream."""
        if self._exec is None:
            raise RuntimeError("replay() needs a captured graph: capture it first with "
                               "genesis.cuda.graph(g) (or capture_begin/capture_end)")
        cu = driver.driver()
        stream = streams.current_handle(self._device)
        with driver.using_device(self._device):
            for cap in self._philox.values():  # new counters for this replay's random fills
                cap.advance(stream)
            driver.check(cu.cuGraphLaunch(self._exec, stream), "cuGraphLaunch")
        kernel_errors.mark_pending(self._device)  # its indexing kernels may record an error

    def reset(self) -> None:
        """Destroy the captured graph and release its memory pool (when no other graph
        shares it). The graph can be captured again afterwards."""
        if self._stream is not None:
            raise RuntimeError("reset() during capture: end the capture first")
        cu = driver._cu
        try:
            if self._exec is not None and cu is not None:
                driver.check(cu.cuGraphExecDestroy(self._exec), "cuGraphExecDestroy")
            if self._graph is not None and cu is not None:
                driver.check(cu.cuGraphDestroy(self._graph), "cuGraphDestroy")
            if self._host_buffers and cu is not None:
                _orphan_host_buffers.extend(self._host_buffers)
                self._host_buffers = []
                if not capture.is_capturing():  # freeing waits for replays: not now
                    with driver.using_device(self._device):
                        _free_orphan_host_buffers(cu)
        finally:
            self._exec = self._graph = None
            self._philox = {}
            if self._pool is not None:
                pool, self._pool = self._pool, None
                self._alloc.release_pool(pool)

    def pool(self):
        """This graph's memory-pool handle (pass it as ``pool=`` to share the pool)."""
        if self._pool is None:
            raise RuntimeError("pool() needs a captured graph (or one being captured)")
        return self._pool

    def __del__(self):
        if getattr(self, "_stream", None) is None:
            try:
                self.reset()
            except Exception:  # interpreter shutdown: the driver may already be gone
                pass

    def __repr__(self) -> str:
        state = ("capturing" if self._stream is not None else
                 "captured" if self._exec is not None else "empty")
        return f"<genesis.cuda.CUDAGraph {state}>"


_side_streams: dict[int, streams.Stream] = {}


class graph:  # noqa: N801 - used like torch.cuda.graph
    """Context manager: capture the enclosed genesis work into ``cuda_graph``.

    The device is synchronised first; capture runs on a side stream
    (``stream``, or one kept per device), which is current inside the block.

    Args:
        cuda_graph: the ``CUDAGraph`` to capture into.
        pool: a pool handle (``graph_pool_handle()``, ``other.pool()``) to share memory.
        stream: the stream to capture on (not the legacy default stream).
        capture_error_mode: ``"global"`` (default), ``"thread_local"`` or ``"relaxed"``.

    Example:
        >>> g = genesis.cuda.CUDAGraph()
        >>> with genesis.cuda.graph(g):
        ...     static_out = model(static_in)
        >>> g.replay()
    """

    def __init__(self, cuda_graph: CUDAGraph, pool=None, stream=None,
                 capture_error_mode: str = "global"):
        if not isinstance(cuda_graph, CUDAGraph):
            raise TypeError(f"graph() needs a genesis.cuda.CUDAGraph, got "
                            f"{type(cuda_graph).__name__}")
        self.cuda_graph = cuda_graph
        self.pool = pool
        self.capture_stream = stream
        self.capture_error_mode = capture_error_mode
        self._ctx = None

    def __enter__(self):
        index = _device._current_device
        if capture.is_capturing(index):
            raise GraphCaptureError(f"a CUDA graph is already being captured on cuda:{index}; "
                                    "captures cannot be nested")
        s = self.capture_stream
        if s is None:
            s = _side_streams.get(index)
            if s is None:
                s = _side_streams[index] = streams.Stream(index)
        _device.synchronize(index)  # work queued before the capture has finished
        # No gc.collect() here (torch's graph() runs one to free memory for the graph): a
        # full collection costs up to hundreds of ms in a big process, and nothing needs
        # it. Garbage collected during the capture is safe: the allocator holds back frees
        # of ordinary memory and pool dissolves until the capture ends.
        self._ctx = streams.stream(s)
        self._ctx.__enter__()
        try:
            self.cuda_graph.capture_begin(self.pool, self.capture_error_mode)
        except BaseException:
            self._ctx.__exit__(None, None, None)
            raise
        return self.cuda_graph

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.cuda_graph.capture_end()
            else:
                self.cuda_graph._abort()
        finally:
            self._ctx.__exit__(None, None, None)
        return False
