"""The caching allocator's bookkeeping invariants, checked by its logic tests."""

from __future__ import annotations

from genesis_cuda.allocator import CachingAllocator


def check_invariants(alloc: CachingAllocator) -> None:
    """Segments tile exactly; free chunks are merged and listed exactly once, sorted; held
    chunks are listed once under their stream and size, and stay out of the pools; a chunk
    freed with events waits once per event, under the stream its event was recorded on,
    outside the pools and the held lists."""
    held = {}
    for stream, by_size in alloc._held.items():
        for size, chunks in by_size.items():
            for chunk in chunks:
                assert chunk.size == size and chunk.stream == stream and chunk.allocated
                assert chunk.ptr not in held
                held[chunk.ptr] = chunk
    listed = {}
    for pools in (alloc.pools.small, alloc.pools.large):
        for stream, free in pools.items():
            assert free == sorted(free)
            for key in free:  # size << 64 | address
                size, ptr = key >> 64, key & ((1 << 64) - 1)
                chunk = alloc.pools.free_chunks[ptr]
                assert chunk.size == size and chunk.ptr == ptr and chunk.stream == stream
                assert not chunk.allocated and not chunk.event_count
                assert ptr not in listed and ptr not in held
                listed[ptr] = chunk
    waiting: dict[int, int] = {}  # chunk address -> (event, chunk) pairs still pending
    for stream, queue in alloc._pending.by_stream.items():
        for event, chunk in queue:  # queued under the stream its event was recorded on
            assert event.stream == stream and not chunk.allocated
            assert chunk.ptr not in held and chunk.ptr not in listed
            waiting[chunk.ptr] = waiting.get(chunk.ptr, 0) + 1
    assert alloc._pending.count == sum(waiting.values())
    seen_free = {}
    for base, head in alloc.pools.segments.items():
        assert head.prev is None and head.ptr == base
        total, c, prev = 0, head, None
        while c is not None:
            assert c.prev is prev
            assert c.ptr == base + total
            if prev is not None:
                both_free = not (c.allocated or prev.allocated or c.event_count
                                 or prev.event_count)
                assert not both_free, "adjacent free chunks were not merged"
            if not c.allocated and not c.event_count:
                seen_free[c.ptr] = c
            assert c.event_count == waiting.pop(c.ptr, 0)
            total += c.size
            prev, c = c, c.next
        assert total == alloc.pools.segment_sizes[base]
    assert set(seen_free) == set(listed) == set(alloc.pools.free_chunks)
    assert not waiting, "pending frees of chunks in no segment"
    assert alloc.reserved_bytes == sum(alloc.pools.segment_sizes.values())
