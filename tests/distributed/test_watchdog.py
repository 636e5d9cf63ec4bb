"""The NCCL watchdog's logic, on the CPU with stand-in operations."""

from __future__ import annotations

import time

import pytest

from genesis.distributed import DistBackendError
from genesis.distributed.watchdog import Watchdog


def test_finished_operations_are_dropped_and_nothing_is_aborted():
    aborted = []
    dog = Watchdog(0.05, lambda: aborted.append(1), "rank 0 of group 'world' (size 2)")
    dog._thread = object()  # no thread: drive poll() by hand
    dog.watch("all_reduce", lambda: True)
    dog.watch("broadcast", lambda: True)
    time.sleep(0.1)
    dog.poll()
    assert not dog._pending and not aborted
    dog.check()


def test_a_late_operation_aborts_once_and_later_calls_raise():
    aborted = []
    dog = Watchdog(0.2, lambda: aborted.append(1), "rank 1 of group 'world' (size 2)",
                   poll_s=0.01)
    dog.watch("all_reduce", lambda: True)
    dog.watch("broadcast", lambda: False)  # a peer never joins
    deadline = time.monotonic() + 10
    while dog.failure is None and time.monotonic() < deadline:
        time.sleep(0.01)
    dog.stop()
    assert aborted == [1]
    with pytest.raises(DistBackendError, match=r"rank 1 of group 'world' \(size 2\): "
                                               r"broadcast did not finish within 0.2 s.*aborted"):
        dog.check()


def test_an_error_while_checking_aborts_with_its_message():
    def broken() -> bool:
        raise RuntimeError("CUDA_ERROR_LAUNCH_FAILED")

    aborted = []
    dog = Watchdog(60, lambda: aborted.append(1), "rank 0")
    dog._thread = object()
    dog.watch("reduce", broken)
    dog.poll()
    assert aborted == [1] and "CUDA_ERROR_LAUNCH_FAILED" in dog.failure


def test_a_wait_that_the_abort_ended_still_fails():
    """Aborting the communicator can let the queued kernels end, and so the event a host
    wait polls: the wait must raise the watchdog's failure, not return as if done."""
    from genesis.distributed.backend_nccl import NcclBackend

    dog = Watchdog(0.2, lambda: None, "rank 0 of group 'world' (size 2)")
    dog.failure = "rank 0 of group 'world' (size 2): all_reduce did not finish within 0.2 s"

    class Aborted:  # the backend's state after the watchdog's abort
        _raise_async_error = NcclBackend._raise_async_error
        _watchdog, _comm, _describe = dog, None, "rank 0 of group 'world' (size 2)"

    class Ended:  # the event: complete at once
        @staticmethod
        def query() -> bool:
            return True

    with pytest.raises(DistBackendError, match="all_reduce did not finish"):
        NcclBackend.wait_host(Aborted(), Ended())
