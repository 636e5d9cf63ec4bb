"""Per-device caching allocators on the real driver, and the public memory functions.

``genesis.cuda.memory_allocated()`` and friends land here (through ``genesis_cuda.api``).
Functions asked about a device genesis has not used yet answer without creating a context.
"""

from __future__ import annotations

from genesis.cuda import OutOfMemoryError
from genesis_cuda import capture, driver, streams
from genesis_cuda import device as _device
from genesis_cuda.allocator import CachingAllocator
from genesis_cuda.memory_history import AllocationHistory, format_report
from genesis_cuda.memory_summary import summary as _summary

_allocators: dict[int, CachingAllocator] = {}  # read directly by array.empty (hot path)
_histories: dict[int, AllocationHistory] = {}  # devices whose allocations are recorded


class CudaOps:
    """``allocator.DriverOps`` on cuda-python for one device."""

    def __init__(self, index: int):
        self.index = index
        self.cu = driver.driver()
        self._oom = self.cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY
        self._not_ready = self.cu.CUresult.CUDA_ERROR_NOT_READY
        self._no_timing = int(self.cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)

    def malloc(self, nbytes: int) -> int | None:
        with driver.using_device(self.index):
            if capture.is_capturing(self.index):
                # No stream operation (nothing is recorded), but the "global" capture mode
                # forbids it as potentially unsafe: relaxed for this call, as torch does.
                with capture.relaxed_mode():
                    err, ptr = self.cu.cuMemAlloc(nbytes)
            else:
                err, ptr = self.cu.cuMemAlloc(nbytes)
        if err == self._oom:
            return None
        driver.check((err,), f"cuMemAlloc({nbytes})")
        return int(ptr)

    def free(self, ptr: int) -> None:
        with driver.using_device(self.index):  # (driver(): deferred launches made first)
            driver.check(driver.driver().cuMemFree(ptr), "cuMemFree")

    def mem_info(self) -> tuple[int, int]:
        with driver.using_device(self.index):
            free, total = driver.check(self.cu.cuMemGetInfo(), "cuMemGetInfo")
        return int(free), int(total)

    def event_create(self):
        with driver.using_device(self.index):
            return driver.check(self.cu.cuEventCreate(self._no_timing), "cuEventCreate")

    def event_record(self, event, stream: int) -> None:
        with driver.using_device(self.index):  # (driver(): deferred launches made first)
            driver.check(driver.driver().cuEventRecord(event, stream), "cuEventRecord")

    def event_query(self, event) -> bool:
        (err,) = self.cu.cuEventQuery(event)
        if err == self._not_ready:
            return False
        driver.check((err,), "cuEventQuery")
        return True

    def event_synchronize(self, event) -> None:
        driver.check(self.cu.cuEventSynchronize(event), "cuEventSynchronize")

    def synchronize(self) -> None:
        with driver.using_device(self.index):
            driver.check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")


def _create_allocator(index: int) -> None:
    """Device init hook: every device gets its allocator, following its current stream."""
    if index not in _allocators:
        alloc = CachingAllocator(CudaOps(index), index, OutOfMemoryError)
        alloc.current_stream = streams.current_handle(index)
        _allocators[index] = alloc


def _follow_stream(index: int, handle: int) -> None:
    alloc = _allocators.get(index)
    if alloc is not None:
        alloc.current_stream = handle


_device.on_init(_create_allocator)
streams.on_change(_follow_stream)


def allocator(device=None) -> CachingAllocator:
    """The caching allocator of ``device`` (initialising the device on first use)."""
    index = _device._index(device)
    alloc = _allocators.get(index)
    if alloc is None:
        _device.lazy_init(index)
        alloc = _allocators[index]
    return alloc


def _existing(device) -> CachingAllocator | None:
    return _allocators.get(_device._index(device))


# ------------------------------------------------------------------ public API
def memory_allocated(device=None) -> int:
    """Bytes held by live tensors on ``device`` (rounded to the allocator's 512 B blocks)."""
    a = _existing(device)
    return 0 if a is None else a.allocated_bytes


def max_memory_allocated(device=None) -> int:
    """Peak of ``memory_allocated`` since the start or ``reset_peak_memory_stats``."""
    a = _existing(device)
    return 0 if a is None else a.peak_allocated


def memory_reserved(device=None) -> int:
    """Bytes the allocator holds from the driver (allocated plus cached)."""
    a = _existing(device)
    return 0 if a is None else a.reserved_bytes


def max_memory_reserved(device=None) -> int:
    """Peak of ``memory_reserved`` since the start or ``reset_peak_memory_stats``."""
    a = _existing(device)
    return 0 if a is None else a.peak_reserved


def memory_stats(device=None) -> dict:
    """Allocator statistics of ``device``: current/peak allocated and reserved bytes,
    alloc/free counts, cache hits, ``num_ooms``, ``num_alloc_retries`` (torch's dotted
    names, e.g. ``"allocated_bytes.all.peak"``, are included)."""
    a = _existing(device)
    return {} if a is None else a.stats()


def memory_snapshot(device=None) -> list[dict]:
    """Every cached segment of ``device`` with its chunks (address, size, state)."""
    a = _existing(device)
    return [] if a is None else a.snapshot()


def reset_peak_memory_stats(device=None) -> None:
    """Make the current allocated/reserved sizes the new peaks (and restart the allocation
    history, when one is recorded, so that its report's peak is this peak)."""
    a = _existing(device)
    if a is not None:
        a.reset_peak_stats()
        history = _histories.get(a.device)
        if history is not None:
            history.clear()


def record_memory_history(enabled: bool = True, device=None, max_frames: int = 12) -> None:
    """Record (or stop recording) every allocation on ``device`` with the Python stack that
    made it, for ``memory_history_report``. torch's counterpart is
    ``torch.cuda.memory._record_memory_history``.

    Recording costs a stack walk per allocation; stopping restores the allocator's own
    paths. Starting again discards the previous record.

    Args:
        enabled: start (True) or stop (False) recording.
        device: the device (default: the current one).
        max_frames: frames kept per allocation, innermost first.

    Example:
        >>> genesis.cuda.record_memory_history()
        >>> loss = model(x).sum(); loss.backward()
        >>> print(genesis.cuda.memory_history_report(top=5))
    """
    index = _device._index(device)
    old = _histories.pop(index, None)
    if old is not None:
        old.stop()
    if enabled:
        history = AllocationHistory(allocator(index), max_frames)
        history.start()
        _histories[index] = history


def memory_history_report(device=None, top: int = 15, frames: int = 6, at: str = "peak") -> str:
    """The allocating stacks of the memory alive at the recorded peak (or now), largest
    first: what a ``max_memory_allocated`` figure is made of.

    The record runs from ``record_memory_history()`` or the last
    ``reset_peak_memory_stats()``, whichever came later.

    Args:
        device: the device (default: the current one).
        top: how many stacks to list (the rest are summed in one line).
        frames: frames printed per stack, innermost first.
        at: ``"peak"`` (the highest allocated total in the record) or ``"now"``.

    Returns:
        A printable report.

    Raises:
        RuntimeError: nothing is being recorded on ``device``.
    """
    index = _device._index(device)
    history = _histories.get(index)
    if history is None:
        raise RuntimeError(f"memory_history_report: no allocation history is recorded on "
                           f"cuda:{index}; call genesis.cuda.record_memory_history() first")
    return format_report(history, top=top, frames=frames, at=at)


def reset_accumulated_memory_stats(device=None) -> None:
    """Zero the counters (allocs, frees, cache hits, OOMs, retries)."""
    a = _existing(device)
    if a is not None:
        a.reset_stats()


def empty_cache() -> None:
    """Give cached, unused device memory back to the driver, on every device genesis uses.

    Memory held by live tensors is untouched; ``memory_reserved`` drops to what segments
    with live tensors in them occupy.
    """
    capture.check_not_capturing("empty the CUDA memory cache (empty_cache)")
    for a in list(_allocators.values()):
        a.empty_cache()


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    """Cap genesis's reserved memory on ``device`` at ``fraction`` of its total memory.

    Allocations beyond it fail as out-of-memory (after emptying the cache and retrying).

    Example:
        >>> genesis.cuda.set_per_process_memory_fraction(0.5)
    """
    allocator(device).set_memory_fraction(fraction)


def mem_get_info(device=None) -> tuple[int, int]:
    """``(free, total)`` bytes of ``device`` as the driver reports them."""
    return allocator(device).ops.mem_info()


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A printable table of the allocator's state on ``device``."""
    index = _device._index(device)
    return _summary(index, _allocators.get(index), abbreviated)
