"""The caching allocator's bookkeeping of device memory: size classes, segments, free lists.

Pure bookkeeping over addresses (no driver call, no statistics), used by
``allocator.CachingAllocator``, whose docstring gives the whole design:

* ``round_size`` and ``segment_size``: the size classes. Requests are rounded up to
  multiples of 512 bytes; up to 1 MiB they come from the *small* pool, carved out of 2 MiB
  segments; larger ones from the *large* pool (20 MiB segments under 10 MiB, else the
  request rounded up to 2 MiB).
* ``Chunk``: a piece of a segment, linked to its neighbours (a segment, one ``cuMemAlloc``,
  is a doubly linked list of chunks).
* ``SegmentPools``: every segment of a device and, per stream (or CUDA-graph pool), the
  free chunks of each pool in a list sorted by (size, address), as ints (``size << 64 |
  address``: a bisection then compares ints, not tuples): best fit is one bisection, a
  request splits off the rest when it is worth keeping, a released chunk merges with its
  free neighbours.

Example:
    >>> pools = SegmentPools()
    >>> head = pools.add_segment(0x10000, SMALL_SEGMENT, stream=0, small=True)
    >>> pools.split(head, 4096)          # head now 4096 bytes, the rest free in the pool
    >>> pools.best_fit(512, 0, True).ptr == 0x10000 + 4096
    True
"""

from __future__ import annotations

from bisect import bisect_left, insort

MIN_BLOCK = 512  # every request is rounded up to a multiple of this
SMALL_SIZE = 1 << 20  # requests up to 1 MiB use the small pool
SMALL_SEGMENT = 2 << 20  # small-pool segments are 2 MiB
LARGE_SEGMENT = 20 << 20  # requests in (1 MiB, 10 MiB) share 20 MiB segments
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20  # bigger requests get their own segment, rounded to 2 MiB


# A free chunk's key in its pool's sorted list is ``size << 64 | address`` (addresses are
# below 2**64): (size, address) order, as one int, which a bisection compares cheaply.
_PTR_MASK = (1 << 64) - 1


def round_size(nbytes: int) -> int:
    """The size a request of ``nbytes`` occupies: a multiple of 512, at least 512."""
    return ((nbytes + 511) >> 9) << 9 or MIN_BLOCK


def segment_size(size: int) -> int:
    """Bytes to ask the driver for when no cached chunk can serve a (rounded) ``size``."""
    if size <= SMALL_SIZE:
        return SMALL_SEGMENT
    if size < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return ((size + ROUND_LARGE - 1) // ROUND_LARGE) * ROUND_LARGE


class Chunk:
    """A piece of a segment: free (in a pool) or owned by one ``Storage``."""

    __slots__ = ("ptr", "size", "stream", "small", "prev", "next", "allocated",
                 "event_count", "stream_uses")

    def __init__(self, ptr: int, size: int, stream: int, small: bool, prev=None, next=None):
        self.ptr = ptr
        self.size = size
        self.stream = stream  # the stream it was allocated on; it is only reused there
        self.small = small
        self.prev = prev  # neighbours in the same segment (None at its ends)
        self.next = next
        self.allocated = False  # owned by a Storage, or held: not in a pool, never merged
        self.event_count = 0  # events still to complete before the chunk is reusable
        self.stream_uses = None  # other streams it was used on (a set), or None


class SegmentPools:
    """The segments of one device and their free chunks, per stream and pool.

    Attributes:
        small, large: stream handle (or private graph pool) -> the sorted keys
            (``size << 64 | address``) of the free chunks of the small and the large pool.
        free_chunks: address -> chunk, for every chunk in a free list.
        segments: segment base address -> its first chunk.
        segment_sizes: segment base address -> bytes reserved from the driver.
    """

    __slots__ = ("small", "large", "free_chunks", "segments", "segment_sizes")

    def __init__(self):
        self.small: dict[int, list] = {}
        self.large: dict[int, list] = {}
        self.free_chunks: dict[int, Chunk] = {}
        self.segments: dict[int, Chunk] = {}
        self.segment_sizes: dict[int, int] = {}

    def pool(self, stream, small: bool) -> list:
        """The sorted free list of ``stream``'s small or large pool (made on first use)."""
        pools = self.small if small else self.large
        free = pools.get(stream)
        if free is None:
            free = pools[stream] = []
        return free

    def best_fit(self, size: int, stream, small: bool) -> Chunk | None:
        """The smallest free chunk of ``stream``'s pool that holds ``size``, taken out of
        the pool; None when none does."""
        free = (self.small if small else self.large).get(stream)
        if free:
            i = bisect_left(free, size << 64)  # (the first key of at least this size)
            if i < len(free):
                return self.free_chunks.pop(free.pop(i) & _PTR_MASK)
        return None

    def split(self, chunk: Chunk, size: int) -> None:
        """Shrink ``chunk`` (out of its pool) to ``size`` bytes and put the rest, as a new
        free chunk, into the pool, when the rest is worth keeping apart (torch's
        thresholds: 512 bytes in the small pool, over 1 MiB in the large)."""
        rest = chunk.size - size
        small = chunk.small
        if (rest >= MIN_BLOCK) if small else (rest > SMALL_SIZE):
            tail = Chunk(chunk.ptr + size, rest, chunk.stream, small, chunk, chunk.next)
            if chunk.next is not None:
                chunk.next.prev = tail
            chunk.next = tail
            chunk.size = size
            insort(self.pool(chunk.stream, small), rest << 64 | tail.ptr)
            self.free_chunks[tail.ptr] = tail

    def release(self, chunk: Chunk) -> None:
        """Put a free chunk back into its pool, merged with free neighbours."""
        free = self.pool(chunk.stream, chunk.small)
        prev = chunk.prev
        if prev is not None and not prev.allocated and not prev.event_count:
            del free[bisect_left(free, prev.size << 64 | prev.ptr)]  # (re-listed merged)
            _absorb(prev, chunk)
            chunk = prev
        nxt = chunk.next
        if nxt is not None and not nxt.allocated and not nxt.event_count:
            del free[bisect_left(free, nxt.size << 64 | nxt.ptr)]
            del self.free_chunks[nxt.ptr]
            _absorb(chunk, nxt)
        insort(free, chunk.size << 64 | chunk.ptr)
        self.free_chunks[chunk.ptr] = chunk

    def add_segment(self, ptr: int, nbytes: int, stream, small: bool) -> Chunk:
        """Record a new segment of ``nbytes`` at ``ptr``; returns its one chunk (not in a
        pool: the caller is about to hand it out)."""
        chunk = Chunk(ptr, nbytes, stream, small)
        self.segments[ptr] = chunk
        self.segment_sizes[ptr] = nbytes
        return chunk

    def wholly_free(self, keep) -> list[int]:
        """Base addresses of the segments that are one free chunk with no pending event,
        except those of the streams or graph pools in ``keep``."""
        return [base for base, head in self.segments.items()
                if not (head.allocated or head.next is not None or head.event_count
                        or head.stream in keep)]

    def drop_segment(self, base: int) -> int:
        """Forget the wholly free segment at ``base`` (out of its pool and the segment
        table, before the caller frees it); returns its size."""
        head = self.segments.pop(base)
        free = self.pool(head.stream, head.small)
        del free[bisect_left(free, head.size << 64 | head.ptr)]
        del self.free_chunks[head.ptr]
        return self.segment_sizes.pop(base)

    def has_segments(self, stream) -> bool:
        """Whether any segment belongs to ``stream`` (a private graph pool)."""
        return any(h.stream == stream for h in self.segments.values())

    def dissolve(self, pool, stream) -> list[tuple[int, int]]:
        """Turn graph pool ``pool`` into ordinary memory of ``stream``: its wholly free
        segments are forgotten (their ``(base, size)`` returned, for the caller to free and
        count) and the chunks of the others, live outputs of the graph, join ``stream``."""
        self.small.pop(pool, None)
        self.large.pop(pool, None)
        dropped = []
        for head in [h for h in self.segments.values() if h.stream == pool]:
            if not head.allocated and head.next is None:
                del self.segments[head.ptr]
                self.free_chunks.pop(head.ptr, None)
                dropped.append((head.ptr, self.segment_sizes.pop(head.ptr)))
                continue
            c = head
            while c is not None:
                c.stream = stream
                if not c.allocated:
                    insort(self.pool(stream, c.small), c.size << 64 | c.ptr)
                    self.free_chunks[c.ptr] = c
                c = c.next
        return dropped

    def free_bytes(self) -> int:
        """Bytes in the free lists of every pool."""
        return sum(key >> 64 for pools in (self.small, self.large)
                   for free in pools.values() for key in free)

    def snapshot(self) -> list[dict]:
        """Every segment with its chunks (address, size, state), by address."""
        out = []
        for base, head in sorted(self.segments.items()):
            chunks = []
            c = head
            while c is not None:
                state = "active" if c.allocated else ("pending" if c.event_count else "free")
                chunks.append({"address": c.ptr, "size": c.size, "state": state})
                c = c.next
            out.append({"address": base, "total_size": self.segment_sizes[base],
                        "stream": head.stream, "pool": "small" if head.small else "large",
                        "chunks": chunks})
        return out


def _absorb(left: Chunk, right: Chunk) -> None:
    """Merge ``right`` into its neighbour ``left`` (both free): one chunk, relinked."""
    left.size += right.size
    left.next = right.next
    if right.next is not None:
        right.next.prev = left
