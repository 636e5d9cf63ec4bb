"""The caching allocator: device memory reused without driver calls on the hot path.

The design is PyTorch's (``c10/cuda/CUDACachingAllocator.cpp``), in plain Python:

* Requests are rounded up to multiples of 512 bytes. Requests of at most 1 MiB come from
  the *small* pool, carved out of 2 MiB segments; larger ones from the *large* pool, whose
  segments are 20 MiB for requests under 10 MiB and the request rounded up to 2 MiB
  otherwise. Keeping the pools apart stops small tensors from fragmenting big segments.
* A segment (one ``cuMemAlloc``) is a doubly linked list of chunks. A request takes the
  smallest free chunk that fits (best fit) and splits off the rest when the rest is worth
  keeping; a freed chunk merges with free neighbours, so a segment can become whole again.
* Free chunks are kept per stream: a chunk freed on stream S is only handed out again to a
  request on S, where stream order makes the reuse safe without any synchronisation.
  When a chunk was also used on other streams (``Storage.record_stream``, or freed while
  another stream is current), an event is recorded on each of those streams at free time
  and the chunk returns to its pool only once they have all completed. Those frees wait
  in one queue per stream (``allocator_events``); a request that is not served by a held
  chunk first returns the completed ones to their pools (so they are found before a new
  segment is taken), asking the driver about each stream's oldest event only (events on
  one stream complete in order): FSDP's and DDP's frees in flight on their communication
  stream cost a query or two per such request, not one per waiting free.
* A chunk freed on the stream it was allocated on (the common case) is first *held*: kept
  unmerged in a list of its exact size, where the next request of that size on that stream
  takes it back with two dictionary lookups (a training step frees and re-requests the same
  sizes over and over), whether or not cross-stream frees are waiting (a held chunk has
  no events to wait for). Held memory counts as free in the statistics. Before a request is
  served by a new segment, the stream's held chunks are released into the pools and merged
  and the search is repeated, so holding never makes the allocator reserve more; emptying
  the cache and ``snapshot`` release them too.
* When the driver runs out of memory, every cached (wholly free) segment is released and the
  allocation retried once; then ``genesis.cuda.OutOfMemoryError`` is raised. Nothing is lost
  on that path: live storages stay valid and later allocations that fit succeed.
* CUDA graphs get *private pools* (``begin_capture``/``end_capture``, ``retain_pool``/
  ``release_pool``): while a graph is captured every allocation comes from its pool, whose
  free lists are keyed by the pool's handle instead of a stream handle, so no ordinary
  allocation ever receives that memory while a graph using the pool lives (replays write
  to the addresses captured). During capture no driver call that synchronises is made:
  frees of ordinary memory, event bookkeeping and the out-of-memory retry (which empties
  the cache) wait until the capture ends. When the last graph of a pool goes, the device
  is synchronised, the pool's free segments go back to the driver and its live chunks
  become ordinary memory.

The allocator needs a few driver operations, passed in as an object (``DriverOps``), so all
its logic runs and is tested without a GPU. The size classes and the segment and free-list
bookkeeping (best fit, splitting, merging) are ``allocator_pools``; this file holds the
allocator's policy: streams, held chunks, cross-stream events, graph pools, out-of-memory
handling and statistics.
"""

from __future__ import annotations

from typing import Protocol

from genesis_cuda.allocator_events import PendingFrees
from genesis_cuda.allocator_pools import (  # noqa: F401 - the size classes, re-exported
    LARGE_SEGMENT,
    MIN_BLOCK,
    SMALL_SEGMENT,
    SMALL_SIZE,
    Chunk,
    SegmentPools,
    round_size,
    segment_size,
)


def format_bytes(n: int) -> str:
    """``n`` bytes as a short human-readable string (``"1.50 GiB"``)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


class DriverOps(Protocol):
    """What the allocator needs from the driver (a fake one runs the tests without a GPU)."""

    def malloc(self, nbytes: int) -> int | None:
        """Device memory of ``nbytes``; ``None`` when the device is out of memory."""

    def free(self, ptr: int) -> None: ...

    def mem_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes of the device."""

    def event_create(self): ...

    def event_record(self, event, stream: int) -> None: ...

    def event_query(self, event) -> bool:
        """True once the work recorded before ``event`` has completed."""

    def event_synchronize(self, event) -> None: ...

    def synchronize(self) -> None:
        """Wait for all work on the device (before cached memory goes back to the driver)."""


class Storage:
    """Device memory owned by arrays: ``ptr`` and ``size`` in bytes on device ``device``.

    Arrays (views) share one ``Storage``; when the last reference goes, the memory returns to
    the allocator on the stream current when it was allocated (``malloc``: ``_new_storage``)."""

    __slots__ = ("ptr", "size", "device", "_chunk", "_alloc", "__weakref__")

    def __init__(self, ptr: int, size: int, device: int, chunk, alloc):
        self.ptr = ptr
        self.size = size
        self.device = device
        self._chunk = chunk
        self._alloc = alloc

    def data_ptr(self) -> int:
        """Address of the first byte (Triton's scratch allocator reads this)."""
        return self.ptr

    def record_stream(self, stream) -> None:
        """Mark this memory as used by work queued on ``stream`` (a ``Stream`` or handle):
        when freed, it is not reused before that work completes."""
        handle = getattr(stream, "handle", stream)
        chunk = self._chunk
        if chunk is not None and handle != chunk.stream:
            if chunk.stream_uses is None:
                chunk.stream_uses = {handle}
            else:
                chunk.stream_uses.add(handle)

    def __del__(self):
        chunk = self._chunk
        if chunk is not None:
            self._chunk = None
            try:
                self._alloc.free(chunk)
            except Exception:  # interpreter shutdown: the driver may already be gone
                pass

    def __repr__(self) -> str:
        return f"Storage(ptr=0x{self.ptr:x}, size={self.size}, device={self.device})"


def _new_storage(ptr: int, size: int, device: int, chunk, alloc) -> Storage:
    """``Storage(ptr, size, device, chunk, alloc)``, fields set here, not by ``__init__`` (kept
    for subclasses), which runs in a frame entered from C: ~600 instructions more per malloc."""
    s = _bare(Storage)
    s.ptr, s.size, s.device = ptr, size, device
    s._chunk, s._alloc = chunk, alloc
    return s


_bare = object.__new__


class CachingAllocator:
    """The caching allocator of one device.

    Args:
        ops: the driver operations (``DriverOps``) for this device.
        device: the device ordinal, stored on every ``Storage``.
        oom_error: exception class raised when memory runs out (a ``RuntimeError``).

    ``current_stream`` (a raw stream handle) is kept up to date by ``genesis_cuda.streams``;
    ``malloc`` allocates on it unless told otherwise, and ``free`` treats it as a use.
    """

    def __init__(self, ops: DriverOps, device: int = 0, oom_error: type = MemoryError):
        self.ops = ops
        self.device = device
        self.oom_error = oom_error
        self.current_stream = 0
        self.limit: int | None = None  # set_per_process_memory_fraction, in bytes
        self.pools = SegmentPools()  # segments and free chunks (best fit by bisect)
        # Held chunks: stream handle -> chunk size -> chunks freed there, not yet merged.
        self._held: dict[int, dict[int, list]] = {}
        self._pending = PendingFrees()  # (event, chunk) waiting for another stream's work
        self._event_pool: list = []
        # A Storage's __del__ may run in the middle of malloc/free (the garbage collector
        # runs on allocation); such frees are queued here and done when the outer call ends.
        self._busy = False
        self._deferred: list = []
        self.capture_pool = None  # the private pool being captured into, if any
        self._after_capture: list = []  # frees of ordinary chunks made during capture
        self._pool_refs: dict = {}  # private pool handle -> graphs using it
        self._dissolve_later: list = []  # pools released during a capture
        self.reset_stats()

    # ---------------------------------------------------------------- stats
    def reset_stats(self) -> None:
        """Zero every counter; current sizes are kept and become the new peaks."""
        self.allocated_bytes = getattr(self, "allocated_bytes", 0)
        self.reserved_bytes = getattr(self, "reserved_bytes", 0)
        self.peak_allocated = self.allocated_bytes
        self.peak_reserved = self.reserved_bytes
        self.num_allocs = 0
        self.num_frees = 0
        self.num_cache_hits = 0
        self.num_segment_allocs = 0
        self.num_segment_frees = 0
        self.num_ooms = 0
        self.num_alloc_retries = 0

    def reset_peak_stats(self) -> None:
        """Make the current allocated/reserved sizes the peaks."""
        self.peak_allocated = self.allocated_bytes
        self.peak_reserved = self.reserved_bytes

    # ------------------------------------------------------------- allocate
    def malloc(self, nbytes: int, stream: int | None = None) -> Storage:
        """A ``Storage`` of at least ``nbytes`` bytes usable on ``stream`` (default: current)."""
        size = ((nbytes + 511) >> 9) << 9 or MIN_BLOCK
        if self.capture_pool is not None:
            stream = self.capture_pool  # everything allocated during capture is the graph's
        else:
            if stream is None:
                stream = self.current_stream
            held = self._held.get(stream)
            if held:
                chunks = held.get(size)
                if chunks:  # the fast path: a held chunk of this very size
                    chunk = chunks.pop()
                    allocated = self.allocated_bytes + size
                    self.allocated_bytes = allocated
                    if allocated > self.peak_allocated:
                        self.peak_allocated = allocated
                    self.num_allocs += 1
                    self.num_cache_hits += 1
                    return _new_storage(chunk.ptr, size, self.device, chunk, self)
        small = size <= SMALL_SIZE
        self._busy = True
        try:
            if self._pending.count and self.capture_pool is None:
                self._pending.collect(self.ops.event_query, self._event_done)
            chunk = self._best_fit(size, stream, small)
            if chunk is None and self._held.get(stream):
                self._release_held(stream)  # merged, they may serve it: no new segment
                chunk = self._best_fit(size, stream, small)
            if chunk is None:
                chunk = self._new_segment(size, stream, small)
            self.pools.split(chunk, size)
            chunk.allocated = True
            allocated = self.allocated_bytes + chunk.size
            self.allocated_bytes = allocated
            if allocated > self.peak_allocated:
                self.peak_allocated = allocated
            self.num_allocs += 1
            storage = _new_storage(chunk.ptr, chunk.size, self.device, chunk, self)
        finally:
            self._busy = False
            if self._deferred:  # (also when this call raised: those frees happened)
                self._drain_deferred()
        return storage

    def _best_fit(self, size: int, stream: int, small: bool) -> Chunk | None:
        """The smallest free chunk of ``stream``'s pool that holds ``size``, taken out of
        the pool (a cache hit); None when none does."""
        chunk = self.pools.best_fit(size, stream, small)
        if chunk is not None:
            self.num_cache_hits += 1
        return chunk

    def _release_held(self, stream=None) -> None:
        """Put the held chunks of ``stream`` (default: every stream) into their pools,
        merged with free neighbours. Called with ``_busy`` set."""
        streams = list(self._held) if stream is None else [stream]
        for s in streams:
            for chunks in self._held.pop(s, {}).values():
                for chunk in chunks:
                    chunk.allocated = False
                    self.pools.release(chunk)

    def _new_segment(self, size: int, stream: int, small: bool) -> Chunk:
        nbytes = segment_size(size)
        ptr = self._driver_malloc(nbytes)
        if ptr is None and self.capture_pool is not None:
            self.num_ooms += 1  # emptying the cache would synchronise: not during capture
            raise self.oom_error(self._oom_message(size, nbytes) + " (during CUDA graph "
                                 "capture the cache cannot be emptied and no retry is made)")
        if ptr is None:
            # Out of memory: give back everything cached and try exactly once more.
            self.num_alloc_retries += 1
            self._release_cached()
            ptr = self._driver_malloc(nbytes)
            if ptr is None:
                self.num_ooms += 1
                raise self.oom_error(self._oom_message(size, nbytes))
        chunk = self.pools.add_segment(ptr, nbytes, stream, small)
        self.reserved_bytes += nbytes
        if self.reserved_bytes > self.peak_reserved:
            self.peak_reserved = self.reserved_bytes
        self.num_segment_allocs += 1
        return chunk

    def _driver_malloc(self, nbytes: int) -> int | None:
        if self.limit is not None and self.reserved_bytes + nbytes > self.limit:
            return None
        return self.ops.malloc(nbytes)

    def _oom_message(self, size: int, nbytes: int) -> str:
        try:
            free, total = self.ops.mem_info()
            device = f"total capacity {format_bytes(total)}, {format_bytes(free)} free"
        except Exception as exc:  # the message must not fail while reporting a failure
            device = f"capacity unknown ({exc})"
        limit = ("" if self.limit is None else
                 f"; the per-process limit is {format_bytes(self.limit)}")
        return (f"CUDA out of memory on device {self.device}: tried to allocate "
                f"{format_bytes(size)} (a new {format_bytes(nbytes)} segment). Device: "
                f"{device}. Genesis has {format_bytes(self.allocated_bytes)} allocated by "
                f"tensors and {format_bytes(self.reserved_bytes)} reserved in total{limit}. "
                "The cache was already emptied and the allocation retried.")

    # ----------------------------------------------------------------- free
    def free(self, chunk: Chunk) -> None:
        """Return ``chunk`` (called by ``Storage.__del__``)."""
        stream = chunk.stream
        if (stream == self.current_stream and chunk.stream_uses is None and not self._busy
                and self.capture_pool is None):  # the fast path: hold it for reuse
            self.allocated_bytes -= chunk.size
            self.num_frees += 1
            held = self._held.get(stream)
            if held is None:  # (setdefault: a collection may free chunks while [] is made)
                held = self._held.setdefault(stream, {})
            chunks = held.get(chunk.size)
            if chunks is None:
                chunks = held.setdefault(chunk.size, [])
            chunks.append(chunk)
            return
        if self._busy:
            self._deferred.append(chunk)
            return
        private = chunk.stream in self._pool_refs
        if self.capture_pool is not None and not private:
            self._after_capture.append(chunk)  # its events would be recorded in the graph
            return
        self._busy = True
        try:
            self.allocated_bytes -= chunk.size
            self.num_frees += 1
            chunk.allocated = False
            if private:  # a graph's memory: reused in capture order, by its pool only
                self.pools.release(chunk)
            else:
                cur = self.current_stream
                if cur != chunk.stream:  # freed while another stream is current: a use there
                    if chunk.stream_uses is None:
                        chunk.stream_uses = {cur}
                    else:
                        chunk.stream_uses.add(cur)
                if chunk.stream_uses:
                    self._record_events(chunk)
                else:
                    self.pools.release(chunk)
        finally:
            self._busy = False
            if self._deferred:
                self._drain_deferred()

    def _exclusively(self, fn, *args):
        """``fn(*args)`` with ``_busy`` set: frees that the garbage collector makes meanwhile
        are queued, and done once it returns (malloc and free spell this out: hot paths)."""
        self._busy = True
        try:
            return fn(*args)
        finally:
            self._busy = False
            if self._deferred:
                self._drain_deferred()

    def _drain_deferred(self) -> None:
        while self._deferred:
            self.free(self._deferred.pop())

    # --------------------------------------------------- cross-stream frees
    def _record_events(self, chunk: Chunk) -> None:
        uses, chunk.stream_uses = chunk.stream_uses, None
        for stream in uses:
            event = self._event_pool.pop() if self._event_pool else self.ops.event_create()
            self.ops.event_record(event, stream)
            chunk.event_count += 1
            self._pending.add(stream, event, chunk)

    def _event_done(self, event, chunk: Chunk) -> None:
        self._event_pool.append(event)
        chunk.event_count -= 1
        if chunk.event_count == 0:
            self.pools.release(chunk)

    def synchronize_pending(self) -> None:
        """Wait for every pending cross-stream free, then return those chunks."""
        self._pending.drain(self.ops.event_synchronize, self._event_done)

    # ------------------------------------------------------ CUDA graph pools
    def retain_pool(self, pool) -> None:
        """One more graph uses private pool ``pool`` (any hashable that is not an int)."""
        self._pool_refs[pool] = self._pool_refs.get(pool, 0) + 1

    def release_pool(self, pool) -> None:
        """A graph using ``pool`` is gone; the last one returns the pool's memory."""
        n = self._pool_refs[pool] - 1
        if n:
            self._pool_refs[pool] = n
            return
        del self._pool_refs[pool]
        if self.capture_pool is not None:  # dissolving synchronises: after the capture
            self._dissolve_later.append(pool)
        else:
            self._dissolve_pool(pool)

    def _dissolve_pool(self, pool) -> None:
        self._exclusively(self._dissolve_segments, pool)

    def _dissolve_segments(self, pool) -> None:
        if not self.pools.has_segments(pool):
            return
        self.ops.synchronize()  # replays still queued may write into the pool's memory
        for base, size in self.pools.dissolve(pool, self.current_stream):
            self.ops.free(base)  # wholly free: to the driver
            self.reserved_bytes -= size
            self.num_segment_frees += 1

    def begin_capture(self, pool) -> None:
        """Route every allocation into private pool ``pool`` until ``end_capture``."""
        if self.capture_pool is not None:
            raise RuntimeError("a CUDA graph is already being captured on this device")
        self.retain_pool(pool)
        self.capture_pool = pool

    def end_capture(self) -> None:
        """Back to ordinary allocation; the frees held back during capture are done now."""
        self.capture_pool = None
        held, self._after_capture = self._after_capture, []
        for chunk in held:
            self.free(chunk)
        pools, self._dissolve_later = self._dissolve_later, []
        for pool in pools:
            if pool not in self._pool_refs:  # not retained again in the meantime
                self._dissolve_pool(pool)

    # ---------------------------------------------------------------- cache
    def _release_cached(self) -> int:
        """Give every wholly free segment back to the driver; returns bytes released."""
        self._release_held()
        self.synchronize_pending()
        bases = self.pools.wholly_free(self._pool_refs)  # a live graph's pool keeps its memory
        if bases:  # a cached chunk may still be read by queued kernels on its stream
            self.ops.synchronize()
        released = 0
        for base in bases:
            released += self.pools.drop_segment(base)
            self.ops.free(base)
            self.num_segment_frees += 1
        self.reserved_bytes -= released
        return released

    def empty_cache(self) -> int:
        """Release all unused cached memory to the driver (live storages are untouched)."""
        return self._exclusively(self._release_cached)

    def set_memory_fraction(self, fraction: float) -> None:
        """Cap what this allocator may reserve at ``fraction`` of the device's memory."""
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"memory fraction must be in [0, 1], got {fraction}")
        _, total = self.ops.mem_info()
        self.limit = int(total * fraction)

    # ------------------------------------------------------------ inspection
    def stats(self) -> dict:
        """Counters and sizes as a flat dict (torch-style dotted names included)."""
        cached = self.pools.free_bytes()
        cached += sum(size * len(chunks) for held in self._held.values()
                      for size, chunks in held.items())
        s = {
            "allocated_bytes.all.current": self.allocated_bytes,
            "allocated_bytes.all.peak": self.peak_allocated,
            "reserved_bytes.all.current": self.reserved_bytes,
            "reserved_bytes.all.peak": self.peak_reserved,
            "inactive_split_bytes.all.current": cached,
            "num_allocs": self.num_allocs,
            "num_frees": self.num_frees,
            "num_cache_hits": self.num_cache_hits,
            "num_segment_allocs": self.num_segment_allocs,
            "num_segment_frees": self.num_segment_frees,
            "num_ooms": self.num_ooms,
            "num_alloc_retries": self.num_alloc_retries,
            "num_pending_frees": self._pending.count,
            "segment.all.current": len(self.pools.segments),
        }
        s["allocation.all.allocated"] = self.num_allocs
        s["allocation.all.freed"] = self.num_frees
        s["allocation.all.current"] = self.num_allocs - self.num_frees
        s["segment.all.allocated"] = self.num_segment_allocs
        s["segment.all.freed"] = self.num_segment_frees
        return s

    def snapshot(self) -> list[dict]:
        """Every segment with its chunks, for ``memory_summary`` and debugging (held
        chunks are released first: they show as the merged free memory they are)."""
        self._exclusively(self._release_held)
        return self.pools.snapshot()
