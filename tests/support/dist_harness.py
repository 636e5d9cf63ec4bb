"""Run a function on N local processes that form a genesis.distributed world (tests only).

``run_ranks(fn, n)`` starts ``n`` processes, each of which joins a world through a TCPStore
served by the test process, calls ``fn(rank, world_size, *args)`` and sends back its result
or its traceback. Worker functions live in ``tests/support`` modules, importable by name.

The ranks are forked by multiprocessing's fork server, never by the test process itself.
The test process runs threads (the store server's, Gloo's, an earlier test's): a child
forked from it inherits every lock those threads held at that instant, still locked, and
with no thread left to release it. In CI a rank hung that way inside ``TCPStore(...)``
before it ever connected; earlier, ranks died finalizing a parent's C++ object whose threads
did not exist in the child (SIGABRT). The fork server is a fresh, single-threaded
interpreter that has already imported torch and genesis (``PRELOAD``), so a rank still
starts in a fraction of a second, and it starts clean. A rank takes the test's environment
variables and working directory as they are when ``run_ranks`` is called (as a forked child
would), not the server's from when it started. A rank runs torch single-threaded, as
DataLoader workers do: two cores are shared by every rank. GPU tests pass
``start_method="spawn"`` (CUDA must not be initialized before the fork either).

When a rank does not report in time, the failure says what every rank was doing: the
harness step it had reached (written to the store as it goes), the Python stack of each of
its threads (``faulthandler``, asked for with SIGUSR1: it answers even from a thread stuck in
C code, where the last collective it entered is on top), its exit code if it died, and the
errors the other ranks reported (a rank that timed out usually names the one it waited for).
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import queue
import signal
import tempfile
import time
import traceback

from torch import distributed as tdist

STEP_KEY = "dist_harness/step/{rank}"  # the harness's own keys (genesis uses genesis/...)
STACK_WAIT_S = 3.0  # how long a stuck rank gets to write its stacks after SIGUSR1
# imported once by the fork server, so each rank forked from it starts with them loaded (the
# worker modules are not: the server's sys.path lacks tests/support until Python 3.12)
PRELOAD = ["torch", "genesis", "genesis.nn", "genesis.distributed", "pytest"]
START_METHODS = ("forkserver", "spawn")


def _step(store, rank: int, what: str) -> None:
    store.set(STEP_KEY.format(rank=rank), f"{what} (at {time.strftime('%H:%M:%S')})")


def _child(fn, rank: int, world_size: int, port: int, backend: str, timeout_s: float,
           args: tuple, results, stacks_path: str, environ: dict, cwd: str) -> None:
    try:
        # the test's environment and directory now, not the fork server's when it started
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
        import faulthandler

        # kept open for the process's life: faulthandler writes to its descriptor
        stacks = open(stacks_path, "w")  # noqa: SIM115
        faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
        import torch

        torch.set_num_threads(1)
        import genesis.distributed as dist

        os.environ["GENESIS_TEST_STORE_PORT"] = str(port)  # for workers that re-init
        os.environ["GENESIS_TEST_TIMEOUT_S"] = str(timeout_s)

        timeout = datetime.timedelta(seconds=timeout_s)
        store = tdist.TCPStore("127.0.0.1", port, world_size, False, timeout)
        _step(store, rank, "init_process_group")
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=timeout)
        _step(store, rank, f"running {fn.__name__}")
        out = fn(rank, world_size, *args)
        _step(store, rank, f"{fn.__name__} returned; destroy_process_group")
        if dist.is_initialized():
            dist.destroy_process_group()
        _step(store, rank, "sending its result")
        results.put((rank, "ok", out))
    except BaseException:  # noqa: BLE001 - every failure goes back to the test
        results.put((rank, "error", traceback.format_exc()))


def _describe_stuck(rank: int, proc, server, stacks_path: str) -> str:
    """What rank ``rank`` was doing: its last harness step, and its threads' stacks (or its
    exit code if it is dead)."""
    key = STEP_KEY.format(rank=rank)
    step = server.get(key).decode() if server.check([key]) else "starting up (not connected)"
    lines = [f"--- rank {rank} (pid {proc.pid}): last step: {step}"]
    if not proc.is_alive():
        code = proc.exitcode
        if code is not None and code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
            if -code == signal.SIGKILL:
                how += " (where the test sends none: the kernel's out-of-memory killer?)"
        else:
            how = f"exited with code {code}"
        lines.append(f"    the process {how} without reporting")
        return "\n".join(lines)
    os.kill(proc.pid, signal.SIGUSR1)
    deadline, text, previous = time.monotonic() + STACK_WAIT_S, "", None
    while time.monotonic() < deadline and not (text and text == previous):
        time.sleep(0.2)  # done when the dump has stopped growing
        previous = text
        with open(stacks_path) as f:
            text = f.read()
    lines.append(text.rstrip() or "    (no stack dump: the process did not answer SIGUSR1)")
    return "\n".join(lines)


def _wait_for(procs, results, waiting: set, join_s: float, out: dict, failures: list) -> None:
    """Collect results until every rank in ``waiting`` has reported; an AssertionError when
    ``join_s`` seconds pass without any report, or a rank dies without reporting."""
    last_report = time.monotonic()
    while waiting:
        try:
            rank, status, value = results.get(timeout=1.0)
        except queue.Empty:
            dead = [r for r in waiting if not procs[r].is_alive()]
            if not dead and time.monotonic() - last_report < join_s:
                continue
            try:  # a rank that exited may still have a report in the pipe
                rank, status, value = results.get(timeout=1.0)
            except queue.Empty:
                why = (f"rank(s) {dead} exited without reporting" if dead else
                       f"no rank reported for {join_s:g} s")
                raise _Stuck(why) from None
        last_report = time.monotonic()
        waiting.discard(rank)
        if status == "ok":
            out[rank] = value
        else:
            failures.append(f"--- rank {rank} raised ---\n{value}")


class _Stuck(Exception):
    """Raised inside ``run_ranks`` when ranks stop reporting (turned into the test's error)."""


def run_ranks(fn, world_size: int, *args, backend: str = "gloo", timeout_s: float = 20.0,
              join_s: float = 120.0, allow_exit: tuple[int, ...] = (),
              start_method: str = "forkserver") -> list:
    """``[fn(0, n, *args), ..., fn(n - 1, n, *args)]``, each run in its own process.

    GPU tests pass ``start_method="spawn"``: a forked child cannot use the parent's CUDA.

    Args:
        fn: the worker, ``fn(rank, world_size, *args)``; a module-level function.
        world_size: how many processes.
        backend: passed to ``init_process_group``.
        timeout_s: the group's (and the store's) timeout: how long one collective waits.
        join_s: how long the test waits with no rank reporting before it fails. It bounds a
            silence, not the run: every wait inside a rank (the store, each collective)
            gives up after ``timeout_s``, so a live rank reports, a result or an error,
            within about ``timeout_s`` of its peers stopping, and a dead one is seen at once.
            The default, six group timeouts, leaves room for ranks starved of CPU on a
            loaded 2-core machine; a rank silent that long is stuck, and is described.
        allow_exit: ranks that may die without reporting (their result is ``None``).
        start_method: ``"forkserver"`` or ``"spawn"``; never ``"fork"`` (module docstring).

    Returns:
        Each rank's return value, in rank order.

    Raises:
        AssertionError: a rank raised (its traceback), died without reporting, or nothing was
            reported for ``join_s`` seconds; the message then says what each rank still
            running was doing (see the module docstring).
    """
    if start_method not in START_METHODS:
        raise ValueError(f"run_ranks: start_method must be one of {START_METHODS}, got "
                         f"{start_method!r} (a rank forked from the threaded test process can "
                         "inherit a held lock and hang: see tests/support/dist_harness.py)")
    ctx = mp.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)  # takes effect when the server first starts
    server = tdist.TCPStore("127.0.0.1", 0, world_size, True,
                            datetime.timedelta(seconds=timeout_s), wait_for_workers=False)
    results = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="dist_harness_") as scratch:
        stack_files = [os.path.join(scratch, f"rank{r}.stacks") for r in range(world_size)]
        procs = [ctx.Process(target=_child, args=(fn, r, world_size, server.port, backend,
                                                  timeout_s, args, results, stack_files[r],
                                                  dict(os.environ), os.getcwd()),
                             daemon=True)
                 for r in range(world_size)]
        for p in procs:
            p.start()
        out: dict[int, object] = {}
        failures: list[str] = []
        waiting = set(range(world_size)) - set(allow_exit)
        try:
            _wait_for(procs, results, waiting, join_s, out, failures)
        except _Stuck as exc:
            report = [_describe_stuck(r, procs[r], server, stack_files[r])
                      for r in sorted(waiting)]
            for r in waiting:  # described: no need to wait for them below
                procs[r].kill()
            raise AssertionError(
                f"ranks {sorted(waiting)} did not finish ({exc}; group timeout "
                f"{timeout_s:g} s)\n" + "\n".join(report + failures)) from None
        finally:
            for p in procs:
                p.join(timeout=5)
                if p.is_alive():
                    p.kill()
    if failures:
        raise AssertionError("\n".join(failures))
    return [out.get(r) for r in range(world_size)]
