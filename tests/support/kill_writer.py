"""Kill a process in the middle of a save, at a point the test chooses.

``kill_while_blocked(save, *hooks)`` forks the test process; the child installs the hooks and
calls ``save()``; when a hook fires it tells the parent, which SIGKILLs the child there. After
the kill nothing of the writer runs any more (no ``finally``, no cleanup), as when a process
is killed by the OOM killer or a power cut, and the test inspects what it left on disk.
Forking (instead of starting a fresh interpreter) keeps a kill to milliseconds: the child
already has genesis and torch loaded. Make the tensors to save before the call: the child
should only write (a torch kernel of the parent's thread pool is not safe after a fork).

Hooks (each replaces a function in the child only):

- ``block_at(module, name, k)``: ``module.name`` (e.g. ``os.replace``) blocks on its
  ``k``-th call instead of running;
- ``block_after(module, name, fraction)``: a ``write_safetensors``-like ``module.name(fh,
  ...)`` writes only ``fraction`` of its bytes to ``fh``, then blocks: a torn temporary.
"""

from __future__ import annotations

import io
import os
import select
import signal
import sys
import time
import traceback

import pytest

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def block_at(module, name: str, k: int):
    """A hook: the ``k``-th call of ``module.name`` stops the writer before it runs."""
    def install(stop):
        real, calls = getattr(module, name), [0]

        def hooked(*args, **kwargs):
            calls[0] += 1
            if calls[0] == k:
                stop()
            return real(*args, **kwargs)

        setattr(module, name, hooked)
    return install


def block_after(module, name: str, fraction: float):
    """A hook: ``module.name(fh, ...)`` writes ``fraction`` of its bytes, then stops."""
    def install(stop):
        real = getattr(module, name)

        def torn(fh, *args, **kwargs):
            buf = io.BytesIO()
            real(buf, *args, **kwargs)
            data = buf.getvalue()
            fh.write(data[: int(len(data) * fraction)])
            fh.flush()
            stop()

        setattr(module, name, torn)
    return install


def kill_while_blocked(save, *hooks, timeout: float = 60.0) -> None:
    """Run ``save()`` in a forked child with ``hooks``; SIGKILL the child where one fires.

    Raises:
        AssertionError: the save finished or failed without reaching a hook.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the test runner
        status = 0
        try:
            os.close(read_end)

            def stop():
                os.write(write_end, b"blocked")
                time.sleep(600)

            for install in hooks:
                install(stop)
            save()
            os.write(write_end, b"finished")
        except BaseException:
            os.write(write_end, traceback.format_exc().encode())
            status = 1
        finally:
            sys.stdout.flush()
            os._exit(status)
    os.close(write_end)
    try:  # a child that hangs (a lock held at the fork) fails the test instead of the run
        ready, _, _ = select.select([read_end], [], [], timeout)
        said = os.read(read_end, 65536) if ready else b"(no word within %gs)" % timeout
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)  # reaped: its pid no longer runs
        os.close(read_end)
    assert said == b"blocked", f"the writer never reached the hook: {said.decode()}"
