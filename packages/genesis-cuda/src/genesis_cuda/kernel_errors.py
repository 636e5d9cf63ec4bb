"""Bad input that a kernel finds (an out-of-range index), raised on the host later.

A kernel cannot raise. torch's kernels stop with a device-side assert, which leaves the CUDA
context unusable; Triton's ``tl.device_assert`` does the same and only exists in debug
builds (``TRITON_DEBUG=1``). Genesis's indexing kernels instead mask the lanes whose index is
out of range (so no memory outside a tensor is read or written) and record the first such
index in a small per-device *error word*; the host raises ``IndexError`` at its next
synchronising point: ``item()``, a copy to the host (``cpu()``, ``numpy()``, ``tolist()``),
``synchronize()`` of the device or of a stream. Like torch's report, it comes later than the
op that failed, and the op's result must not be used.

The word is four int64s: ``[op code, bad index, dim size, unused]``, op code 0 meaning no
error. A kernel claims it with one atomic compare-and-swap, only in a block that found a bad
index, so the first error wins and the valid path costs one block reduction. The word is
allocated when the device is initialised (so never during a CUDA-graph capture) and never
moves: captured kernels write to it on every replay.

Reading it costs one 24-byte copy, done only when a guarded kernel was launched (or a graph
replayed) since the last read, and at every device ``synchronize()`` after the first guarded
launch (a kernel still running on another stream at a stream-level read reports there).
"""

from __future__ import annotations

import numpy as np

from genesis import dtypes as D
from genesis_cuda import driver

# The ops whose kernels check their indices; a kernel's op code is its position here + 1.
OPS = ("gather", "scatter", "index_select", "index_add", "index", "index_put_")

_WORD_BYTES = 32


def op_code(op: str) -> int:
    """The code a kernel writes into the error word for ``op`` (a name in ``OPS``)."""
    return OPS.index(op) + 1


class DeviceWord:
    """The error word of one device in device memory; also the kernels' pointer argument
    (``data_ptr()`` and an int64 ``dtype``, which is what Triton reads off an argument)."""

    dtype = D.int64

    def __init__(self, index: int):
        self.index = index
        cu = driver.driver()
        with driver.using_device(index):
            self.ptr = int(driver.check(cu.cuMemAlloc(_WORD_BYTES), "cuMemAlloc"))
            driver.check(cu.cuMemsetD8(self.ptr, 0, _WORD_BYTES), "cuMemsetD8")

    def data_ptr(self) -> int:
        return self.ptr

    def read(self) -> tuple[int, int, int]:
        """``(op code, bad index, dim size)``; waits for the legacy default stream."""
        host = np.zeros(3, np.int64)
        with driver.using_device(self.index):
            driver.check(driver.driver().cuMemcpyDtoH(host.ctypes.data, self.ptr, 24),
                         "cuMemcpyDtoH")
        return int(host[0]), int(host[1]), int(host[2])

    def clear(self) -> None:
        with driver.using_device(self.index):
            driver.check(driver.driver().cuMemsetD8(self.ptr, 0, _WORD_BYTES), "cuMemsetD8")


_words: dict[int, object] = {}  # device ordinal -> its word (DeviceWord, or a test's stand-in)
_pending: set[int] = set()  # devices with a guarded launch or a replay since their last read
_armed: set[int] = set()  # devices that ever launched a guarded kernel


def init_device(index: int) -> None:
    """Device init hook: allocate ``index``'s error word (zeroed)."""
    if index not in _words:
        _words[index] = DeviceWord(index)


def word_for_launch(index: int):
    """The error word of device ``index``, for a guarded kernel about to be launched there;
    marks the device as having a result to read."""
    _pending.add(index)
    _armed.add(index)
    word = _words.get(index)
    if word is None:  # a kernel test's views of torch memory, before genesis initialised it
        init_device(index)
        word = _words[index]
    return word


def mark_pending(index: int) -> None:
    """Work was queued that may hold guarded kernels (a CUDA-graph replay)."""
    if index in _armed:
        _pending.add(index)


def raise_pending(index: int, whole_device: bool = False) -> None:
    """Raise the ``IndexError`` a kernel on device ``index`` recorded, if any, and clear it.

    Call it right after the host waited for the device (a stream or the whole device:
    ``whole_device``). Costs nothing when no guarded kernel ran since the last call."""
    if index not in _pending and not (whole_device and index in _armed):
        return
    _pending.discard(index)
    word = _words[index]
    code, bad, size = word.read()
    if code:
        word.clear()
        op = OPS[code - 1] if 0 < code <= len(OPS) else f"kernel op {code}"
        raise IndexError(f"{op}: index {bad} is out of bounds for dimension with size {size} "
                         "(found by the device kernel; reported at this synchronisation)")
