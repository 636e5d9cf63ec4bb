"""CUDA-graph logic that needs no GPU: the allocator's private pools (on a fake driver), the
capture-state errors, and the API surface of ``genesis_cuda.graphs``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fake_cuda_driver import FakeOOM, FakeOps

from genesis_cuda import capture, graphs
from genesis_cuda.allocator import SMALL_SEGMENT, CachingAllocator
from genesis_cuda.capture import GraphCaptureError
from genesis_cuda.generator import PhiloxGenerator

MiB = 1 << 20
POOL = ("genesis_graph_pool", -1)


def make(capacity: int = 1 << 34) -> CachingAllocator:
    return CachingAllocator(FakeOps(capacity), device=0, oom_error=FakeOOM)


@pytest.fixture
def capturing():
    """Mark device 0 as capturing for the duration of a test."""
    capture._capturing[0] = object()
    yield
    capture._capturing.pop(0, None)


# ------------------------------------------------------------------ private pools
def test_capture_allocations_come_from_a_private_pool():
    a = make()
    ordinary = a.malloc(1000)
    ordinary_ptr = ordinary.ptr
    del ordinary  # a cached ordinary chunk: capture must not take it
    a.begin_capture(POOL)
    s = a.malloc(1000)
    assert s.ptr != ordinary_ptr
    ptr = s.ptr
    del s  # freed during capture: back into the pool, reusable by the same capture
    t = a.malloc(1000)
    assert t.ptr == ptr
    a.end_capture()
    del t
    u = a.malloc(1000)  # after capture: ordinary allocations never get pool memory
    assert u.ptr == ordinary_ptr
    assert POOL in {seg["stream"] for seg in a.snapshot()}


def test_pool_memory_is_not_given_to_ordinary_allocations_while_graph_lives():
    a = make()
    a.begin_capture(POOL)
    s = a.malloc(4 * MiB)
    pool_ptr = s.ptr
    a.end_capture()
    del s  # the graph's output freed by the user: stays in the pool
    ptrs = [a.malloc(4 * MiB).ptr for _ in range(3)]
    assert pool_ptr not in ptrs


def test_shared_pool_reuses_memory_across_captures():
    a = make()
    a.begin_capture(POOL)
    s = a.malloc(2000)
    ptr = s.ptr
    del s
    a.end_capture()
    a.begin_capture(POOL)  # a second graph on the same pool
    t = a.malloc(2000)
    assert t.ptr == ptr
    a.end_capture()
    assert a._pool_refs[POOL] == 2
    del t
    segments = a.ops.mallocs
    a.release_pool(POOL)
    assert a.ops.frees == 0  # one graph still uses the pool
    a.release_pool(POOL)
    assert a.ops.frees == segments and POOL not in a._pool_refs


def test_releasing_the_pool_returns_memory_to_baseline():
    a = make()
    base_alloc, base_reserved = a.allocated_bytes, a.reserved_bytes
    a.begin_capture(POOL)
    xs = [a.malloc(n) for n in (100, 3 * MiB, 30 * MiB)]
    a.end_capture()
    assert a.reserved_bytes > base_reserved
    del xs
    assert a.allocated_bytes == base_alloc
    a.release_pool(POOL)
    assert a.reserved_bytes == base_reserved
    assert a.ops.used == 0
    assert a.ops.device_syncs == 1  # replays may still be queued: synchronised first


def test_live_pool_chunks_become_ordinary_when_the_pool_goes():
    a = make()
    a.begin_capture(POOL)
    kept = a.malloc(1000)  # a graph output the user still holds
    a.end_capture()
    a.release_pool(POOL)
    assert a.reserved_bytes == SMALL_SEGMENT  # the segment stays: a live chunk is in it
    ptr = kept.ptr
    del kept
    assert a.allocated_bytes == 0
    assert a.malloc(1000).ptr == ptr  # now ordinary memory, reused by ordinary requests
    a.empty_cache()


def test_ordinary_frees_during_capture_wait_for_its_end():
    a = make()
    s = a.malloc(1000)
    a.begin_capture(POOL)
    a.current_stream = 7  # capture runs on a side stream
    del s
    assert a.allocated_bytes == 512 * 2  # not freed yet
    assert not a.ops.events  # no event recorded into the graph
    a.end_capture()
    assert a.allocated_bytes == 0
    assert a.stats()["num_pending_frees"] == 1  # freed with a cross-stream event, after the capture


def test_oom_during_capture_neither_empties_cache_nor_synchronises():
    a = make(capacity=4 * MiB)
    cached = a.malloc(1000)
    del cached
    a.begin_capture(POOL)
    with pytest.raises(FakeOOM, match="during CUDA graph capture"):
        a.malloc(8 * MiB)
    a.end_capture()
    assert a.ops.device_syncs == 0 and a.ops.frees == 0


def test_empty_cache_keeps_a_live_pool():
    a = make()
    a.begin_capture(POOL)
    s = a.malloc(1000)
    a.end_capture()
    del s
    a.empty_cache()
    assert a.ops.frees == 0
    a.release_pool(POOL)
    assert a.ops.frees == 1


def test_pool_released_during_another_capture_is_dissolved_after_it():
    a = make()
    a.begin_capture(POOL)
    s = a.malloc(1000)
    a.end_capture()
    del s
    a.begin_capture(("genesis_graph_pool", -2))
    a.release_pool(POOL)  # an old graph collected during a capture: no synchronisation now
    assert a.ops.device_syncs == 0 and a.ops.frees == 0
    a.end_capture()
    assert a.ops.device_syncs == 1 and a.ops.frees == 1


def test_nested_capture_is_refused():
    a = make()
    a.begin_capture(POOL)
    with pytest.raises(RuntimeError, match="already being captured"):
        a.begin_capture(("genesis_graph_pool", -2))


# ------------------------------------------------------------------ capture errors
def test_check_not_capturing_names_the_operation(capturing):
    assert capture.is_capturing() and capture.is_capturing(0) and not capture.is_capturing(1)
    with pytest.raises(GraphCaptureError, match="cannot read a value while a CUDA graph is"):
        capture.check_not_capturing("read a value")
    capture.check_not_capturing("read a value", device=1)  # another device: fine


def test_random_numbers_refused_during_capture(capturing):
    gen = PhiloxGenerator(0, seed=1)
    with pytest.raises(GraphCaptureError, match="cannot draw random numbers"):
        gen.next_offset(10)
    assert gen.offset == 0
    assert PhiloxGenerator(1).next_offset(10) == 0  # a device not capturing


def test_host_transfers_refused_during_capture(capturing):
    from genesis_cuda import transfer

    fake = SimpleNamespace(device=0, dtype=None, shape=(1,))
    with pytest.raises(GraphCaptureError, match=r"cannot read a tensor's value .*item\(\)"):
        transfer.item(fake)
    with pytest.raises(GraphCaptureError, match="cannot copy a tensor to the host"):
        transfer.to_numpy(fake)


def test_synchronize_and_empty_cache_refused_during_capture(capturing):
    from genesis_cuda import device, memory

    with pytest.raises(GraphCaptureError, match="cannot synchronize the device"):
        device.synchronize(0)
    with pytest.raises(GraphCaptureError, match="cannot empty the CUDA memory cache"):
        memory.empty_cache()


# ------------------------------------------------------------------ API surface
def test_public_api_names():
    import genesis

    for name in ("CUDAGraph", "graph", "graph_pool_handle", "make_graphed_callables",
                 "is_current_stream_capturing", "GraphCaptureError"):
        assert getattr(genesis.cuda, name) is not None


def test_pool_handles_are_distinct_and_checked():
    assert graphs.graph_pool_handle() != graphs.graph_pool_handle()
    with pytest.raises(TypeError, match="graph_pool_handle"):
        graphs._check_pool(3)


def test_capture_mode_names():
    modes = SimpleNamespace(CU_STREAM_CAPTURE_MODE_GLOBAL=0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL=1,
                            CU_STREAM_CAPTURE_MODE_RELAXED=2)
    cu = SimpleNamespace(CUstreamCaptureMode=modes)
    assert graphs._capture_mode(cu, "thread_local") == 1
    with pytest.raises(ValueError, match="capture_error_mode must be one of"):
        graphs._capture_mode(cu, "strict")


def test_uncaptured_graph_errors():
    g = graphs.CUDAGraph()
    assert "empty" in repr(g)
    with pytest.raises(RuntimeError, match="replay\\(\\) needs a captured graph"):
        g.replay()
    with pytest.raises(RuntimeError, match="pool\\(\\) needs a captured graph"):
        g.pool()
    with pytest.raises(RuntimeError, match="capture_end\\(\\) without a matching"):
        g.capture_end()
    g.reset()  # nothing to destroy: no error
    with pytest.raises(TypeError, match="needs a genesis.cuda.CUDAGraph"):
        graphs.graph(object())


def test_make_graphed_callables_argument_errors():
    import genesis
    from genesis_cuda.graphed_callables import make_graphed_callables

    x = genesis.ones(2)
    with pytest.raises(TypeError, match="must be a tuple of tensors"):
        make_graphed_callables(lambda t: t, x)
    with pytest.raises(TypeError, match=r"sample_args\[0\] must be a CUDA genesis.Tensor"):
        make_graphed_callables(lambda t: t, (x,))
    with pytest.raises(ValueError, match="2 callables but 1 sample_args"):
        make_graphed_callables((abs, abs), ((x,),))
