"""A pool of compile worker processes (``compile_worker``), fed jobs as lines of JSON.

Workers are started with ``subprocess`` (fork and exec of a fresh interpreter: nothing of
the parent's CUDA context or threads is inherited, and the user's ``__main__`` is not
imported again, as ``multiprocessing``'s spawn would), with ``CUDA_VISIBLE_DEVICES=""``
(a worker compiles, it never runs anything on a GPU), the parent's ``sys.path`` and the rest of
its environment (Triton's cache key includes the ``TRITON_*`` variables). They live as long
as the parent: one pool per process, started on first use, closed at exit (a worker also
exits when its input closes, so a parent that dies takes its workers with it). Jobs and
replies are JSON, never pickles. A worker that dies fails its job (with its exit code) and
leaves the others to the rest of the pool.

Example:
    >>> pool = WorkerPool(4)
    >>> pool.run([job, job2])        # [None, "<error>"]: one entry per job
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading


class WorkerPool:
    """``size`` compile worker processes and the threads that feed them.

    Args:
        size: how many worker processes (at least 1).
    """

    def __init__(self, size: int):
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"a compile worker pool needs at least one worker, got {size!r}")
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="",
                   PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        cmd = [sys.executable, "-m", "genesis_cuda.kernels.compile_worker"]
        self.procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, env=env, text=True,
                                       bufsize=1)
                      for _ in range(size)]
        self._lock = threading.Lock()  # one run at a time

    @property
    def alive(self) -> int:
        """How many workers are running."""
        return sum(p.poll() is None for p in self.procs)

    def run(self, jobs: list) -> list:
        """Compile ``jobs`` (``compile_worker`` job dicts) on the workers.

        Returns:
            One entry per job, in order: None where it compiled, else the error (a worker's
            traceback, or why no worker could take it).
        """
        results: list = ["no compile worker was running"] * len(jobs)
        todo: queue.SimpleQueue = queue.SimpleQueue()
        for i, job in enumerate(jobs):
            todo.put((i, json.dumps(job)))
        with self._lock:
            feeders = [threading.Thread(target=self._feed, args=(p, todo, results),
                                        name="genesis-compile-feed", daemon=True)
                       for p in self.procs if p.poll() is None]
            for t in feeders:
                t.start()
            for t in feeders:
                t.join()
        return results

    @staticmethod
    def _feed(proc, todo, results) -> None:
        """Hand ``proc`` jobs until none are left or it dies."""
        while True:
            try:
                i, line = todo.get_nowait()
            except queue.Empty:
                return
            try:
                proc.stdin.write(line + "\n")
                proc.stdin.flush()
                reply = json.loads(proc.stdout.readline() or "null")
            except (OSError, ValueError):
                reply = None
            if not isinstance(reply, dict) or "ok" not in reply:
                results[i] = f"compile worker exited (code {proc.wait()})"
                return  # this worker is gone; the others take what is left
            results[i] = None if reply["ok"] else str(reply.get("error"))

    def close(self) -> None:
        """Stop the workers: close their input, wait a little, then kill the stragglers."""
        for p in self.procs:
            try:
                p.stdin.close()
            except OSError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()  # (left open, the interpreter warns of it at exit)
