"""Run a function on N local processes that form a genesis.distributed world (tests only).

``run_ranks(fn, n)`` forks ``n`` processes (already importing genesis and torch: a fresh
interpreter costs seconds per rank on a busy machine), each of which joins a world through a
TCPStore served by the test process, calls ``fn(rank, world_size, *args)`` and sends back
its result or its traceback. A forked child must not use the OpenMP pool its parent may have
started (libgomp does not survive fork), so it runs torch single-threaded, as DataLoader
workers do. Worker functions live in ``tests/support`` modules (importable by name, should a
platform without fork need "spawn").
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import queue
import traceback

from torch import distributed as tdist


def _child(fn, rank: int, world_size: int, port: int, backend: str, timeout_s: float,
           args: tuple, results) -> None:
    try:
        import os

        import torch

        torch.set_num_threads(1)
        import genesis.distributed as dist

        os.environ["GENESIS_TEST_STORE_PORT"] = str(port)  # for workers that re-init
        os.environ["GENESIS_TEST_TIMEOUT_S"] = str(timeout_s)

        timeout = datetime.timedelta(seconds=timeout_s)
        store = tdist.TCPStore("127.0.0.1", port, world_size, False, timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=timeout)
        out = fn(rank, world_size, *args)
        if dist.is_initialized():
            dist.destroy_process_group()
        results.put((rank, "ok", out))
    except BaseException:  # noqa: BLE001 - every failure goes back to the test
        results.put((rank, "error", traceback.format_exc()))


def run_ranks(fn, world_size: int, *args, backend: str = "gloo", timeout_s: float = 20.0,
              join_s: float = 120.0, allow_exit: tuple[int, ...] = (),
              start_method: str = "fork") -> list:
    """``[fn(0, n, *args), ..., fn(n - 1, n, *args)]``, each run in its own process.

    GPU tests pass ``start_method="spawn"``: a forked child cannot use the parent's CUDA.

    Ranks in ``allow_exit`` may die without reporting (their result is ``None``). Raises
    AssertionError with a rank's traceback if it failed, or if any rank is still running
    after ``join_s`` seconds.
    """
    server = tdist.TCPStore("127.0.0.1", 0, world_size, True,
                            datetime.timedelta(seconds=timeout_s), wait_for_workers=False)
    ctx = mp.get_context(start_method)
    results = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(fn, r, world_size, server.port, backend,
                                              timeout_s, args, results), daemon=True)
             for r in range(world_size)]
    for p in procs:
        p.start()
    out: dict[int, object] = {}
    failures = []
    waiting = set(range(world_size)) - set(allow_exit)
    try:
        while waiting:
            try:
                rank, status, value = results.get(timeout=join_s)
            except queue.Empty:
                raise AssertionError(f"ranks {sorted(waiting)} did not finish within "
                                     f"{join_s} s") from None
            waiting.discard(rank)
            if status == "ok":
                out[rank] = value
            else:
                failures.append(f"--- rank {rank} ---\n{value}")
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    if failures:
        raise AssertionError("\n".join(failures))
    return [out.get(r) for r in range(world_size)]
