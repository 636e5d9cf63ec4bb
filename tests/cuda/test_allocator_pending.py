"""The caching allocator's cross-stream frees on a fake driver: what waits for events, and
what the waiting costs the host.

A chunk used on another stream (``record_stream``, or freed while another stream is
current) is freed with an event on each such stream, and returns to its pool only once they
have all completed. FSDP and DDP keep such frees in flight all the time (their collectives
run on a communication stream), so the cost of checking them is paid by every allocation
of a training step: it must depend on the number of streams, not on the number of frees
waiting, and the exact-size reuse of chunks freed on their own stream must keep working.
"""

from __future__ import annotations

import random

import pytest
from allocator_invariants import check_invariants
from fake_cuda_driver import FakeOOM, FakeOps

from genesis_cuda.allocator import CachingAllocator
from genesis_cuda.allocator_events import PendingFrees

MiB = 1 << 20
COMM, OTHER = 7, 8  # side streams (a communication stream, and one more)


def make(capacity: int = 1 << 34) -> CachingAllocator:
    return CachingAllocator(FakeOps(capacity), device=0, oom_error=FakeOOM)


def freed_on(alloc: CachingAllocator, nbytes: int, *streams: int) -> int:
    """Allocate ``nbytes`` on stream 0, mark it used on ``streams``, free it; its address."""
    s = alloc.malloc(nbytes)
    for stream in streams:
        s.record_stream(stream)
    ptr = s.ptr
    del s
    return ptr


def pending(alloc: CachingAllocator) -> int:
    return alloc.stats()["num_pending_frees"]


# ------------------------------------------------------------------- host cost
def test_event_queries_per_malloc_are_bounded_by_the_streams_not_the_pending_frees():
    alloc = make()
    for _ in range(50):  # a communication stream far behind: nothing completes
        freed_on(alloc, 64 * 1024, COMM)
    freed_on(alloc, 64 * 1024, OTHER)
    assert pending(alloc) == 51
    live = []
    before = alloc.ops.queries
    for i in range(100):  # new sizes: every request takes the slow path
        live.append(alloc.malloc(512 * (i + 1)))
    assert alloc.ops.queries - before <= 100 * 2  # one query per stream with frees pending
    assert pending(alloc) == 51
    check_invariants(alloc)


def test_held_chunks_are_reused_while_cross_stream_frees_are_pending():
    alloc = make()
    freed_on(alloc, 4096, COMM)  # an event that never completes during the test
    a, b = alloc.malloc(8192), alloc.malloc(8192)
    ptr_a, ptr_b = a.ptr, b.ptr
    del a, b  # both held for their size, on stream 0
    before = alloc.ops.queries
    again = alloc.malloc(8192)  # the fast path: no search, no event query
    assert again.ptr == ptr_b and alloc.ops.queries == before
    assert [c.ptr for c in alloc._held[0][8192]] == [ptr_a]  # the other one stays held
    assert pending(alloc) == 1
    check_invariants(alloc)


def test_pending_frees_ask_each_stream_until_its_first_incomplete_event():
    waiting = PendingFrees()
    done_at = {"a1": True, "a2": True, "a3": False, "a4": True, "b1": False, "b2": True}
    for name in ("a1", "b1", "a2", "a3", "b2", "a4"):
        waiting.add(name[0], name, f"chunk {name}")
    asked, released = [], []

    def query(event):
        asked.append(event)
        return done_at[event]

    waiting.collect(query, lambda event, chunk: released.append(chunk))
    # "a4" and "b2" report done but sit behind an incomplete event of their stream: a GPU
    # never does that, and they are not asked about
    assert asked == ["a1", "a2", "a3", "b1"]
    assert released == ["chunk a1", "chunk a2"] and waiting.count == 4


def test_a_failing_event_query_leaves_the_pending_frees_in_place():
    waiting = PendingFrees()
    waiting.add(COMM, "e1", "c1")
    waiting.add(COMM, "e2", "c2")
    answers = iter([True])

    def query(event):
        try:
            return next(answers)
        except StopIteration:
            raise RuntimeError("cuEventQuery: an illegal memory access") from None

    released = []
    with pytest.raises(RuntimeError, match="illegal memory access"):
        waiting.collect(query, lambda event, chunk: released.append(chunk))
    assert released == ["c1"] and waiting.count == 1
    assert list(waiting.by_stream[COMM]) == [("e2", "c2")]


# ------------------------------------------------------------------ correctness
def test_a_chunk_is_never_handed_out_before_its_event_completes():
    alloc = make()
    waiting = {freed_on(alloc, 4096, COMM) for _ in range(8)}
    got = [alloc.malloc(4096) for _ in range(200)]  # on stream 0 and on the side stream
    got += [alloc.malloc(4096, stream=COMM) for _ in range(20)]
    assert not waiting & {s.ptr for s in got}
    assert pending(alloc) == 8
    alloc.ops.finish(COMM)
    reused = [alloc.malloc(4096) for _ in range(8)]
    assert waiting == {s.ptr for s in reused} and pending(alloc) == 0
    check_invariants(alloc)


def test_completion_in_stream_order_releases_every_completed_free():
    alloc = make()
    ptrs = [freed_on(alloc, (i + 1) * 4096, COMM) for i in range(5)]  # oldest first
    alloc.ops.finish(COMM, count=3)  # the stream has run past the first three events
    before = alloc.ops.queries
    probe = alloc.malloc(100 * 4096)  # a slow-path request processes the events
    # three completed, the fourth not: later ones are not asked (stream order)
    assert alloc.ops.queries - before == 4
    assert pending(alloc) == 2
    assert alloc.malloc(4096).ptr == ptrs[0]  # back in the pool, reusable
    assert ptrs[3] not in {alloc.malloc(4 * 4096).ptr, alloc.malloc(4 * 4096).ptr}
    del probe
    check_invariants(alloc)


def test_streams_completing_out_of_order_release_each_chunk_when_all_its_uses_are_done():
    alloc = make()
    both = freed_on(alloc, 4096, COMM, OTHER)  # used on two streams: two events
    comm_only = freed_on(alloc, 8192, COMM)
    other_only = freed_on(alloc, 16384, OTHER)
    assert pending(alloc) == 4
    alloc.ops.finish(OTHER)  # the stream recorded on later finishes first
    keep = [alloc.malloc(n) for n in (16384, 4096, 8192)]  # (kept: none is held after)
    assert [s.ptr == p for s, p in zip(keep, (other_only, both, comm_only))] == [
        True, False, False]  # `both` still waits for its use on COMM
    assert pending(alloc) == 2
    alloc.ops.finish(COMM, count=1)  # COMM's first event: `both`'s
    keep += [alloc.malloc(4096), alloc.malloc(8192)]
    assert keep[-2].ptr == both and keep[-1].ptr != comm_only
    alloc.ops.finish(COMM)
    assert alloc.malloc(8192).ptr == comm_only and pending(alloc) == 0
    check_invariants(alloc)


def test_synchronize_pending_waits_once_per_stream_and_releases_everything():
    alloc = make()
    for i in range(6):
        freed_on(alloc, (i + 1) * 4096, COMM if i % 2 else OTHER)
    freed_on(alloc, 4096, COMM, OTHER)
    alloc.synchronize_pending()
    # the newest event of a stream completes after every earlier one there
    assert sorted(ev.stream for ev in alloc.ops.synced) == [COMM, OTHER]
    assert pending(alloc) == 0 and alloc.allocated_bytes == 0
    check_invariants(alloc)
    assert alloc.empty_cache() == alloc.ops.mallocs * 2 * MiB and alloc.ops.live == {}


def test_a_new_segment_is_taken_only_after_completed_frees_were_returned():
    alloc = make(capacity=24 * MiB)
    ptr = freed_on(alloc, 12 * MiB, COMM)  # its own 12 MiB segment
    alloc.ops.finish(COMM)
    s = alloc.malloc(12 * MiB)  # served by the completed free, not by the driver
    assert s.ptr == ptr and alloc.ops.mallocs == 1
    check_invariants(alloc)


def test_out_of_memory_waits_for_frees_still_pending():
    alloc = make(capacity=24 * MiB)
    freed_on(alloc, 12 * MiB, COMM)
    freed_on(alloc, 12 * MiB, OTHER)
    s = alloc.malloc(20 * MiB)  # both segments must go back to the driver first
    assert s.size == 20 * MiB and alloc.num_alloc_retries == 1 and pending(alloc) == 0
    check_invariants(alloc)


@pytest.mark.parametrize("seed", range(4))
def test_random_cross_stream_workload_never_reuses_memory_early(seed):
    """Chunks freed with events, streams completing a few events at a time in their own
    order: no byte is handed out again while an event of its last free is incomplete."""
    rng = random.Random(seed)
    alloc = make()
    records = []  # (event, its order): every event_record, in order
    record = alloc.ops.event_record

    def logged_record(event, stream):
        record(event, stream)
        records.append((event, event.order))

    alloc.ops.event_record = logged_record
    live, unsafe = [], {}  # ptr -> (size, the records its free made)
    sizes = [512, 4096, 65536, 2 * MiB, 12 * MiB]
    for _ in range(1500):
        r = rng.random()
        if r < 0.4 and live:
            s = live.pop(rng.randrange(len(live)))
            uses = rng.sample([COMM, OTHER], rng.choice([0, 0, 1, 2]))
            for stream in uses:
                s.record_stream(stream)
            ptr, size, n = s.ptr, s.size, len(records)
            del s
            if uses:
                unsafe[ptr] = (size, records[n:])
        elif r < 0.5:
            alloc.ops.finish(rng.choice([COMM, OTHER]), count=rng.randint(1, 4))
        else:
            live.append(alloc.malloc(rng.choice(sizes), stream=rng.choice([0, 0, 0, COMM])))
            start, end = live[-1].ptr, live[-1].ptr + live[-1].size
            for ptr, (size, made) in list(unsafe.items()):
                # a pooled event recorded again completed before (its order moved on)
                if all(ev.done or ev.order != order for ev, order in made):
                    del unsafe[ptr]
                else:
                    assert end <= ptr or ptr + size <= start, "reused too early"
    live.clear()
    alloc.synchronize_pending()
    assert alloc.allocated_bytes == 0 and pending(alloc) == 0
    check_invariants(alloc)
