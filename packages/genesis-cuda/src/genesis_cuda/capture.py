"""Whether a CUDA graph is being captured, and the error for what cannot be captured.

A tiny state module at the bottom of genesis-cuda's layers: ``graphs`` sets the state, and
every host-synchronising entry point (``item``, ``to_numpy``, ``synchronize`` ...) calls
``check_not_capturing`` so that trying it during capture raises ``GraphCaptureError``
naming the operation, instead of a CUDA error from the driver or a broken capture.
"""

from __future__ import annotations

from genesis_cuda import driver

_capturing: dict[int, object] = {}  # device ordinal -> the CUDAGraph capturing on it


class GraphCaptureError(RuntimeError):
    """An operation that cannot be recorded into a CUDA graph was tried during capture."""


def is_capturing(device: int | None = None) -> bool:
    """True while a graph is being captured on ``device`` (``None``: on any device)."""
    if device is None:
        return bool(_capturing)
    return device in _capturing


class relaxed_mode:  # noqa: N801 - used like a function: ``with relaxed_mode(): ...``
    """Context manager: this thread's stream-capture mode is relaxed inside, so a driver call
    that is no stream operation (``cuMemAlloc``, ``cuMemHostAlloc``) is allowed during a
    "global" or "thread_local" capture (``cuThreadExchangeStreamCaptureMode``)."""

    __slots__ = ("prev",)

    def __enter__(self):
        cu = driver.driver()
        self.prev = driver.check(cu.cuThreadExchangeStreamCaptureMode(
            cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
            "cuThreadExchangeStreamCaptureMode")
        return self

    def __exit__(self, *exc):
        driver.check(driver.driver().cuThreadExchangeStreamCaptureMode(self.prev),
                     "cuThreadExchangeStreamCaptureMode")
        return False


def capturing_graph(device: int):
    """The CUDAGraph being captured on ``device``, or None."""
    return _capturing.get(device)


def check_not_capturing(what: str, device: int | None = None) -> None:
    """Raise ``GraphCaptureError`` saying ``cannot {what}`` if a capture is under way."""
    if _capturing and (device is None or device in _capturing):
        raise GraphCaptureError(
            f"cannot {what} while a CUDA graph is being captured: a graph records device "
            "work only. Do it before the capture or after it (see docs/cuda_graphs.md for "
            "what cannot be captured).")
