"""``allocator_pools.SegmentPools``, the caching allocator's bookkeeping, on its own: best
fit, splitting, merging, dropping and dissolving segments over plain addresses (no driver).
The allocator's policy over it is ``test_allocator_logic.py``."""

from __future__ import annotations

from genesis_cuda.allocator_pools import LARGE_SEGMENT, SMALL_SEGMENT, SegmentPools

BASE = 0x10000


def test_best_fit_takes_the_smallest_free_chunk_that_holds_the_request():
    pools = SegmentPools()
    head = pools.add_segment(BASE, SMALL_SEGMENT, 0, True)
    pools.split(head, 4096)  # head: 4096 bytes, the rest free
    # the rest is listed by its key, size << 64 | address
    assert pools.pool(0, True) == [(SMALL_SEGMENT - 4096) << 64 | (BASE + 4096)]
    assert pools.free_chunks == {BASE + 4096: head.next}
    assert pools.best_fit(512, 1, True) is None  # another stream's pool is empty
    assert pools.best_fit(512, 0, False) is None  # and so is the large pool
    chunk = pools.best_fit(512, 0, True)
    assert chunk.ptr == BASE + 4096 and pools.pool(0, True) == [] and not pools.free_chunks


def test_a_large_remainder_of_at_most_1mib_stays_with_its_chunk():
    pools = SegmentPools()
    head = pools.add_segment(BASE, LARGE_SEGMENT, 0, False)
    pools.split(head, LARGE_SEGMENT - (1 << 20))
    assert head.size == LARGE_SEGMENT and head.next is None


def test_released_chunks_merge_and_a_wholly_free_segment_can_be_dropped():
    pools = SegmentPools()
    head = pools.add_segment(BASE, SMALL_SEGMENT, 0, True)
    pools.split(head, 512)
    mid = pools.best_fit(512, 0, True)
    pools.split(mid, 512)
    for c in (head, mid):
        c.allocated = True
    assert pools.wholly_free(keep=()) == []
    for c in (mid, head):
        c.allocated = False
        pools.release(c)
    assert head.next is None and head.size == SMALL_SEGMENT  # one chunk again
    assert pools.free_bytes() == SMALL_SEGMENT
    assert pools.wholly_free(keep={0}) == []  # e.g. a live graph's pool keeps its memory
    assert pools.wholly_free(keep=()) == [BASE]
    assert pools.drop_segment(BASE) == SMALL_SEGMENT
    assert pools.segments == {} and pools.free_bytes() == 0


def test_dissolving_a_graph_pool_frees_its_empty_segments_and_keeps_its_outputs():
    graph = ("genesis_graph_pool", 1)
    pools = SegmentPools()
    pools.add_segment(BASE, SMALL_SEGMENT, graph, True)  # wholly free
    live = pools.add_segment(BASE + SMALL_SEGMENT, SMALL_SEGMENT, graph, True)
    pools.split(live, 512)
    live.allocated = True
    assert pools.has_segments(graph)
    assert pools.dissolve(graph, 7) == [(BASE, SMALL_SEGMENT)]
    assert not pools.has_segments(graph) and graph not in pools.small
    assert live.stream == 7 and live.next.stream == 7
    assert pools.pool(7, True) == [(SMALL_SEGMENT - 512) << 64 | live.next.ptr]
    assert pools.free_chunks[live.next.ptr] is live.next
    assert [s["address"] for s in pools.snapshot()] == [BASE + SMALL_SEGMENT]
