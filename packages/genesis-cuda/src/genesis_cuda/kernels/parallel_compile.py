"""Compile many Triton kernels at once, on every CPU core, before their first launch.

Triton compiles a kernel the first time it is launched, one after the other: its code
generator (Python), its MLIR and LLVM passes, ``ptxas`` and, up to Triton 3.6, a C compiler
building the launcher of a new argument signature. A compiled model's first step meets
about a hundred new kernels (the compiler's generated ones, each matmul tile config the
tuner times) and would wait for each in turn. ``precompile_calls`` does it in two steps:

1. **Collect**: run the calls that would compile (a kernel's ``warmup``, a matmul
   candidate's launch) with Triton's compilation intercepted (its ``jit_cache_hook``, in
   this thread only): each compilation a call would start is recorded as a job (the
   ``@triton.jit`` function and Triton's own serialised specialisation: signature,
   constexprs, pointer attributes, options) and skipped; nothing is compiled or launched.
2. **Compile** the distinct jobs side by side: on worker processes (``compile_pool``;
   Triton's code generator holds the interpreter lock, so only processes keep every core
   busy), which write into Triton's on-disk cache under the key the parent's own
   compilation computes (same source, signature, constexprs, options and target), so a
   kernel's first launch loads it from there; what the workers could not compile goes to
   threads of this process (``JITFunction.preload``, the same compilation in process; one
   thread per ``@triton.jit`` function), which overlap the compiler's external processes.

Errors are not raised here: a kernel that failed to compile compiles again at its first
launch, which raises where the kernel is used.

``GENESIS_COMPILE_WORKERS`` sets the number of worker processes (as Inductor's
``compile_threads``): unset, one per CPU core up to ``MAX_WORKERS``, the cores shared among
the host's ``torchrun`` ranks (none when fewer than two are left); ``0``, no processes
(threads only).

Example:
    >>> precompile_calls([lambda: fn.warmup(x, y, n, grid=(1,), BLOCK=128)])
    Report(kernels=1, in_workers=1, in_threads=0, errors=[])
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import NamedTuple

from triton import knobs
from triton.runtime import driver as triton_driver

from . import launch_queue
from ._launch import INTERPRET
from .compile_pool import WorkerPool
from .compile_worker import build_launcher

MAX_WORKERS = 16
MAX_THREADS = 16
WORKERS_ENV = "GENESIS_COMPILE_WORKERS"


class Job(NamedTuple):
    """One compilation Triton would have run: a ``@triton.jit`` function and Triton's
    serialised specialisation of it (JSON, as its ``jit_cache_hook`` hands it over)."""

    fn: object
    spec: str


class Report(NamedTuple):
    """What ``precompile_calls`` did: distinct kernels collected, how many the worker
    processes and the threads compiled, and the workers' errors (those kernels went to the
    threads too)."""

    kernels: int
    in_workers: int
    in_threads: int
    errors: list


def usable_cores() -> int:
    """The CPU cores this process may run on: its affinity mask where the OS keeps one
    (a container's or ``taskset``'s limit), else every core."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def worker_count() -> int:
    """The number of compile worker processes: ``GENESIS_COMPILE_WORKERS``, else one per CPU
    core this process may run on, shared among the ranks of this host that ``torchrun``
    started (``LOCAL_WORLD_SIZE``: eight ranks on 128 cores take 16 each, not 128), at most
    ``MAX_WORKERS``; none when that leaves fewer than two."""
    raw = os.environ.get(WORKERS_ENV, "").strip()
    if not raw:
        cores = usable_cores()
        try:
            ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        except ValueError:
            ranks = 1  # (not torchrun's: the process is alone)
        share = cores // ranks
        return 0 if share < 2 else min(MAX_WORKERS, share)
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(f"{WORKERS_ENV} must be a number of processes (0 for none), "
                         f"got {raw!r}")
    return n


# ----------------------------------------------------------------------------- collect
_local = threading.local()  # .jobs: the list this thread's compilations go to, if any
_hook_lock = threading.Lock()
_hook_users = 0
_previous_hook = None


def _hook(**kwargs):
    """Triton's ``jit_cache_hook``: True (skip compiling) for a compilation of a collecting
    thread, after recording it; other threads see the hook that was there before."""
    jobs = getattr(_local, "jobs", None)
    if jobs is None:
        return _previous_hook(**kwargs) if _previous_hook is not None else None
    jobs.append(Job(kwargs["fn"].jit_function, kwargs["compile"]["specialization_data"]))
    return True


@contextmanager
def collecting():
    """Within: every Triton compilation this thread starts is recorded in the list yielded
    and skipped (the launch that asked for it launches nothing)."""
    global _hook_users, _previous_hook
    with _hook_lock:
        if _hook_users == 0:
            _previous_hook = knobs.runtime.jit_cache_hook
            knobs.runtime.jit_cache_hook = _hook
        _hook_users += 1
    _local.jobs = jobs = []
    try:
        with launch_queue.collecting_here():  # (a trace's queue: these compiles are ours)
            yield jobs
    finally:
        _local.jobs = None
        with _hook_lock:
            _hook_users -= 1
            if _hook_users == 0:
                knobs.runtime.jit_cache_hook = _previous_hook
                _previous_hook = None


def distinct(jobs: list) -> list:
    """``jobs`` without repeats (one per function and specialisation), in order."""
    seen: dict = {}
    for job in jobs:
        seen.setdefault((id(job.fn), job.spec), job)
    return list(seen.values())


def collect(calls) -> list:
    """The distinct ``Job``s that running ``calls`` (callables without arguments) would
    compile. A call that raises is passed over: run for real later, it raises there."""
    with collecting() as jobs:
        for call in calls:
            try:
                call()
            except Exception:  # noqa: BLE001 - the call itself reports it when run for real
                pass
    return distinct(jobs)


# ----------------------------------------------------------------------------- compile
_pool: WorkerPool | None = None
_pool_lock = threading.Lock()


def start_workers(size: int) -> WorkerPool | str:
    """The process's pool of ``size`` compile workers, started (or restarted, when one died
    or the size changed) if need be; why not, as a string, if processes cannot be started."""
    global _pool
    with _pool_lock:
        if _pool is not None and (len(_pool.procs) != size or _pool.alive < size):
            _pool.close()
            _pool = None
        if _pool is None:
            try:
                _pool = WorkerPool(size)
            except OSError as e:
                return f"compile workers could not be started: {e}"
        return _pool


def _close_workers() -> None:
    if _pool is not None:
        _pool.close()


atexit.register(_close_workers)


def worker_job(job: Job, target) -> dict | None:
    """``job`` as a ``compile_worker`` job for ``target`` (a ``GPUTarget``), or None when a
    worker could not find its function (not defined at the top of a module)."""
    fn = job.fn.fn  # the Python function under the @triton.jit
    if fn.__qualname__ != fn.__name__:
        return None
    module = sys.modules.get(fn.__module__)
    return {"module": fn.__module__, "name": fn.__name__, "spec": job.spec,
            "path": getattr(module, "__file__", None),
            "target": {"backend": target.backend, "arch": target.arch,
                       "warp_size": target.warp_size},
            "cache_dir": knobs.cache.dir}


def _compile_here(jobs: list) -> None:
    """Compile ``jobs`` (all of one ``@triton.jit`` function) one after the other in this
    process; a job that fails is passed over (its first launch raises)."""
    for job in jobs:
        try:
            compiled = job.fn.preload(job.spec)
        except Exception:  # noqa: BLE001 - the kernel's first launch reports it
            continue
        launcher_cls = getattr(triton_driver.active, "launcher_cls", None)
        if compiled is not None and launcher_cls is not None:
            build_launcher(launcher_cls, compiled)


def compile_jobs(jobs: list, workers: int | None = None) -> Report:
    """Compile ``jobs`` side by side: on ``workers`` processes (None: ``worker_count()``),
    and what they could not do on threads of this process.

    Returns:
        A ``Report``.
    """
    workers = worker_count() if workers is None else workers
    jobs = distinct(jobs)
    left, errors, done = list(jobs), [], 0
    if workers > 0 and left:
        target = triton_driver.active.get_current_target()
        payloads = [worker_job(j, target) for j in left]
        sendable = [i for i, p in enumerate(payloads) if p is not None]
        results: list = []
        if sendable:
            pool = start_workers(workers)
            results = ([pool] * len(sendable) if isinstance(pool, str)  # (why not started)
                       else pool.run([payloads[i] for i in sendable]))
        failed = {i for i, err in zip(sendable, results) if err is not None}
        errors = [err for err in results if err is not None]
        done = len(sendable) - len(failed)
        sent = set(sendable) - failed
        left = [j for i, j in enumerate(left) if i not in sent]
    if left:
        # one thread per @triton.jit function: the JIT's state of a function (its hash, its
        # per-device caches) is built on first use without a lock, so two threads compiling
        # one function at once can lose a kernel
        by_fn: dict = {}
        for job in left:
            by_fn.setdefault(id(job.fn), []).append(job)
        threads = max(1, min(MAX_THREADS, usable_cores(), len(by_fn)))
        with ThreadPoolExecutor(threads, thread_name_prefix="genesis-compile") as pool:
            for future in [pool.submit(_compile_here, jobs) for jobs in by_fn.values()]:
                future.result()
    return Report(len(jobs), done, len(left), errors)


def precompile_calls(calls, workers: int | None = None) -> Report:
    """Compile, side by side, every kernel that running ``calls`` would compile; the calls
    themselves launch nothing (see the module docstring).

    Args:
        calls: callables without arguments, each of which would compile kernels.
        workers: worker processes to use (None: ``GENESIS_COMPILE_WORKERS``, see
            ``worker_count``; 0: threads only).

    Returns:
        A ``Report`` (nothing under the Triton interpreter, which compiles nothing).
    """
    if INTERPRET:
        return Report(0, 0, 0, [])
    workers = worker_count() if workers is None else workers
    if workers > 0:
        start_workers(workers)  # they start up (import Triton) while the calls are collected
    # with the compilations a trace's deferred launches wait for (launch_queue), if any
    return compile_jobs(collect(calls) + launch_queue.take_jobs(), workers)
