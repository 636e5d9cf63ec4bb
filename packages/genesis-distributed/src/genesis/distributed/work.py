"""``Work``: the handle an ``async_op=True`` collective returns.

A backend gives a ``Work`` two functions: ``wait`` (block the host, or on CUDA make the
current stream wait) and ``done`` (has it finished?). Steps that must follow the transfer —
the division of an average on Gloo, copying a gathered tensor out into a list — are queued
with ``then`` and run once, inside ``wait()``.
"""

from __future__ import annotations

from collections.abc import Callable

from genesis.distributed.reduce_op import DistBackendError


class Work:
    """Handle of a collective in flight: ``wait()`` finishes it, ``is_completed()`` asks.

    Example:
        >>> work = dist.all_reduce(t, async_op=True)
        >>> ...                      # overlap other work here
        >>> work.wait()              # t now holds the sum
    """

    def __init__(self, what: str, wait: Callable[[], None] | None = None,
                 done: Callable[[], bool] | None = None, keep: tuple = ()) -> None:
        self._what = what
        self._wait = wait
        self._done = done
        self._then: list[Callable[[], None]] = []
        self._finished = False
        self._keep = keep  # tensors the transfer still reads or writes

    def then(self, fn: Callable[[], None]) -> Work:
        """Run ``fn()`` after the transfer, inside ``wait()``."""
        self._then.append(fn)
        return self

    def wait(self) -> bool:
        """Finish the collective; its output tensors are ready afterwards. Returns True.
        (The group's timeout, from init_process_group/new_group, bounds the wait.)

        Raises:
            DistBackendError: the backend failed (a peer died, the group's timeout passed).
        """
        if self._wait is not None:
            wait, self._wait = self._wait, None
            try:
                wait()
            except DistBackendError:
                raise
            except RuntimeError as exc:
                raise DistBackendError(f"{self._what} failed: {exc}") from exc
        self._finished = True
        then, self._then = self._then, []
        for fn in then:
            fn()
        self._keep = ()
        return True

    def is_completed(self) -> bool:
        """True when the transfer has finished (``wait()`` may still have steps to run)."""
        if self._finished or self._wait is None:
            return True
        return bool(self._done()) if self._done is not None else False

    def __repr__(self) -> str:
        state = "completed" if self._finished else "in flight"
        return f"<genesis.distributed.Work {self._what} ({state})>"


def completed(what: str) -> Work:
    """A ``Work`` with nothing left to do (empty tensors, world size 1 no-ops)."""
    return Work(what)
