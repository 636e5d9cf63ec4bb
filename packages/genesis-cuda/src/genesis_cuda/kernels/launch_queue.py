"""Deferred kernel launches: while ``genesis.compile`` traces, new kernels compile side by side.

A compiled model's first call runs the function eagerly under the tracer. Every eager kernel
it meets for the first time would be compiled by Triton in this thread, one after the
other (code generation, ``ptxas``, up to Triton 3.6 a C compiler run for the launcher's
signature): tens of seconds of a cold first step, while the other CPU cores wait. Under
``deferring`` (what ``CUDABackend.tracing`` enters) this thread's kernel launches are
*queued* instead, from the first launch that would compile on:

* a launch that would compile records the compilation (``parallel_compile.collect`` of the
  kernel's ``warmup``: nothing compiled, nothing launched) and queues the launch itself;
* every later launch of this thread queues behind it (a cached kernel too: stream order is
  program order);
* the queue is *flushed* — the recorded compilations done side by side
  (``parallel_compile.compile_jobs``: worker processes), then every queued launch made, in
  order — before anything else reaches the device from this thread: every call through
  ``driver.driver()`` (copies, events, synchronisation, stream waits, graph capture, host
  reads of values), a cached block going back to the driver, and at the end of the trace.
  ``parallel_compile.precompile_calls`` takes the recorded compilations into its own batch
  (``take_jobs``), so the trace's eager kernels compile beside the compiler's generated
  kernels. A new matmul bucket's tuning waits in the queue as well
  (``matmul_tuning.TunedLater``: its candidates recorded now, timed at the flush, with the
  queue ``paused``), so a trace compiles all its kernels in one batch.

Nothing the device computes is read before its launch is made, and launches reach each
stream in program order, so the results are those of running eagerly; memory the caching
allocator reuses between queued launches is reused in stream order as before. A queued
launch keeps its stream, its device and its arguments (a host tensor descriptor, which
matmul's plans re-point at each call's arrays, is copied). A compilation error is raised
by the flush (the queued launch compiles again there, as its first launch would). Queues are
per thread: another thread's device work does not flush this one's (a trace's launches are
its own).

Example:
    >>> with deferring(parallel_compile.collect, parallel_compile.compile_jobs):
    ...     y = model(x)          # launches queued; new kernels only recorded
    ...                           # (leaving: compiled side by side, then launched)
"""

from __future__ import annotations

import copy
import threading
from contextlib import contextmanager

from genesis_cuda import driver, streams

__all__ = ["ACTIVE", "LaunchQueue", "collecting_here", "deferring", "deferring_here",
           "flush_here", "paused", "take_jobs", "waiting"]

ACTIVE = 0  # threads deferring now: the launch paths' one check while nothing defers
_active_lock = threading.Lock()
_local = threading.local()  # .queue: this thread's LaunchQueue (None: not deferring)


class LaunchQueue:
    """One thread's deferred launches and the compilations they wait for.

    Attributes:
        items: ``(call, args)`` pairs, made in order by ``flush``.
        jobs: ``parallel_compile.Job``s recorded by queued launches, not yet compiled.
        launches, compiled: totals so far (launches queued, compilations recorded).
    """

    def __init__(self, collect, compile_jobs):
        self.collect = collect
        self.compile_jobs = compile_jobs
        self.items: list = []
        self.jobs: list = []
        self.device = None  # the device of the queued launches (one device at a time)
        self.flushing = False
        self.paused_depth = 0
        self.collecting_depth = 0  # precompile_calls is collecting: its compiles are its own
        self.launches = 0
        self.compiled = 0

    def defer(self, call, args: tuple) -> None:
        """Queue ``call(*args)`` (a cached kernel's launch, on the queue's device) behind the
        launches waiting."""
        self.items.append((call, _frozen(args)))
        self.launches += 1

    def defer_work(self, call, args: tuple, device: int, jobs: list = ()) -> None:
        """Queue ``call(*args)``, work for ``device`` that waits for the compilations
        ``jobs`` (recorded with ``self.collect``); it is run at the flush on the stream
        current now."""
        if self.device != device:
            self.flush()  # (one device at a time: launches are made with it current)
            self.device = device
        self.jobs += jobs
        self.compiled += len(jobs)
        self.items.append((_run_on, (streams.current_stream(device), call, _frozen(args))))
        self.launches += 1

    def defer_compiling(self, warmup, launch, args: tuple, device: int) -> None:
        """Queue a launch that would compile: ``warmup()`` (the kernel's ``warmup`` with the
        launch's arguments) records the compilation without doing it; ``launch(*args)``
        (``Launcher.launch``'s arguments) is made at the flush, on the stream and device
        current now."""
        key, device, grid, kernel_args, big, objs = args
        self.defer_work(launch, (key, device, grid, _frozen(kernel_args), big, objs), device,
                        self.collect([warmup]))

    def flush(self) -> None:
        """Compile the recorded kernels side by side, then make every queued launch in
        order. A launch that raises drops those behind it (the error reaches the caller)."""
        if self.flushing or not (self.items or self.jobs):
            return
        self.flushing = True
        try:
            jobs, self.jobs = self.jobs, []
            if jobs:
                self.compile_jobs(jobs)
            items, self.items = self.items, []
            if items:
                with driver.using_device(self.device):
                    for call, args in items:
                        call(*args)
        finally:
            self.flushing = False


def _frozen(args: tuple) -> tuple:
    """``args`` with each host tensor descriptor copied: a plan re-points its descriptors at
    every call's arrays (matmul's TMA plans), and a queued launch must keep its own."""
    for a in args:
        if hasattr(a, "block_shape"):
            return tuple(copy.copy(a) if hasattr(a, "block_shape") else a for a in args)
    return args


def _run_on(stream, call, args: tuple) -> None:
    if streams.current_stream(stream.device) == stream:
        call(*args)
    else:
        with streams.stream(stream):
            call(*args)


def _queue():
    return getattr(_local, "queue", None)


def deferring_here() -> LaunchQueue | None:
    """This thread's queue if work is to be deferred now (not while flushing or paused).
    While ``precompile_calls`` collects (``collecting_depth``), a launch that would compile
    is only recorded, by the collector, and nothing is queued for it."""
    q = getattr(_local, "queue", None)
    if q is None or q.flushing or q.paused_depth:
        return None
    return q


def waiting(device: int) -> LaunchQueue | None:
    """This thread's queue if launches are waiting in it (a cached launch on ``device``
    then queues behind them); None otherwise, and always while flushing or paused. Waiting
    launches of another device are flushed first (then None)."""
    q = getattr(_local, "queue", None)
    if q is None or not q.items or q.flushing or q.paused_depth:
        return None
    if q.device != device:
        q.flush()
        return None
    return q


def flush_here() -> None:
    """Flush this thread's queue, if it has one (``driver.driver()`` calls this first while
    any thread defers)."""
    q = getattr(_local, "queue", None)
    if q is not None:
        q.flush()


def take_jobs() -> list:
    """The compilations this thread's queue recorded and has not done, handed over (to
    ``precompile_calls``, which compiles them in its batch)."""
    q = _queue()
    if q is None or not q.jobs:
        return []
    jobs, q.jobs = q.jobs, []
    return jobs


def _activate(delta: int) -> None:
    global ACTIVE
    with _active_lock:
        ACTIVE += delta
        driver.before_device_call = flush_here if ACTIVE else None


@contextmanager
def deferring(collect, compile_jobs):
    """Within: this thread's launches are deferred (see the module docstring); leaving
    flushes. Nested, the outer queue goes on.

    Args:
        collect: ``parallel_compile.collect``: the ``Job``s calls would compile.
        compile_jobs: ``parallel_compile.compile_jobs``: compiles jobs (repeats
            included) side by side.

    Yields:
        This thread's ``LaunchQueue``.
    """
    q = _queue()
    if q is not None:
        yield q
        return
    q = _local.queue = LaunchQueue(collect, compile_jobs)
    _activate(1)
    try:
        yield q
        q.flush()
    finally:
        try:
            if q.items or q.jobs:  # (leaving on an error: what was queued still runs)
                q.flush()
        finally:
            _local.queue = None
            _activate(-1)


@contextmanager
def paused():
    """Within: this thread's launches are made at once (the queue flushed first), for work
    that measures the device (the matmul tuner's timing)."""
    q = _queue()
    if q is None:
        yield
        return
    q.flush()
    q.paused_depth += 1
    try:
        yield
    finally:
        q.paused_depth -= 1


@contextmanager
def collecting_here():
    """Within (``parallel_compile.collecting``): a launch that would compile is recorded by
    the collector and nothing is launched or queued for it (``Launcher.launch`` calls only
    the kernel's ``warmup``); cached launches still queue behind waiting ones."""
    q = _queue()
    if q is None:
        yield
        return
    q.collecting_depth += 1
    try:
        yield
    finally:
        q.collecting_depth -= 1
