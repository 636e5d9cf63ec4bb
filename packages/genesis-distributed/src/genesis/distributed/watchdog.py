"""A watchdog for backends whose operations never block the host (NCCL).

An NCCL collective is queued on a stream and returns at once; if a peer has died, its
kernels spin on the GPU forever and the host only hangs later, at some unrelated
synchronisation. The watchdog (one daemon thread per communicator, as torch's NCCL
watchdog) polls the oldest operation still in flight; when one outlives the group's
timeout it aborts the communicator — which makes the spinning kernels return — writes the
reason to stderr, and every later use of the backend raises ``DistBackendError`` with it.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from collections.abc import Callable

from genesis.distributed.reduce_op import DistBackendError


class Watchdog:
    """Aborts a communicator whose operations outlive ``timeout_s``.

    Args:
        timeout_s: how long one operation may stay in flight.
        abort: called once, from the watchdog thread, on the first late operation.
        describe: names the rank and group in messages.
        on_start: called first in the watchdog thread (e.g. make the GPU current there).
        poll_s: seconds between polls.
    """

    def __init__(self, timeout_s: float, abort: Callable[[], None], describe: str,
                 on_start: Callable[[], None] | None = None, poll_s: float = 0.05) -> None:
        self.timeout_s = timeout_s
        self.failure: str | None = None
        self._abort = abort
        self._describe = describe
        self._on_start = on_start
        self._poll_s = poll_s
        # (what, done(), deadline): operations complete in queue order on one stream
        self._pending: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, what: str, done: Callable[[], bool]) -> None:
        """Start timing an operation just queued; ``done()`` says when it has finished."""
        with self._lock:
            self._pending.append((what, done, time.monotonic() + self.timeout_s))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"genesis-watchdog {self._describe}")
            self._thread.start()

    def check(self) -> None:
        """Raise the failure the watchdog found, if any."""
        if self.failure is not None:
            raise DistBackendError(self.failure)

    def stop(self) -> None:
        """End the thread (destroy_process_group); operations in flight are not waited for."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5 * self._poll_s + 1)

    def _run(self) -> None:
        if self._on_start is not None:
            self._on_start()
        while not self._stop.wait(self._poll_s):
            self.poll()

    def poll(self) -> None:
        """Drop finished operations; abort if the oldest one is late (the thread's step)."""
        late = None
        with self._lock:
            try:
                while self._pending and self._pending[0][1]():
                    self._pending.popleft()
            except Exception as exc:  # the device itself reports an error
                late = f"checking {self._pending[0][0]} failed: {exc}"
            if late is None and self._pending and time.monotonic() > self._pending[0][2]:
                late = (f"{self._pending[0][0]} did not finish within {self.timeout_s:g} s: a "
                        "peer rank may have died or stopped calling collectives")
            if late is None:
                return
            self._pending.clear()
        self.failure = f"{self._describe}: {late}; the communicator was aborted"
        self._stop.set()
        print(f"genesis.distributed watchdog: {self.failure}", file=sys.stderr, flush=True)
        self._abort()
