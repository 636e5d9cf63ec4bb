"""The allocation history on a fake driver (no GPU): what it records, the peak it replays,
the report it prints, and that stopping gives the allocator its own methods back."""

from __future__ import annotations

import pytest
from fake_cuda_driver import FakeOOM, FakeOps

from genesis_cuda.allocator import CachingAllocator
from genesis_cuda.memory_history import AllocationHistory, by_stack, format_report

MiB = 1 << 20


@pytest.fixture
def alloc():
    return CachingAllocator(FakeOps(), device=0, oom_error=FakeOOM)


def make_activations(alloc, n):
    out = []
    for _ in range(n):  # (a loop, not a comprehension: no frame of its own on 3.11)
        out.append(alloc.malloc(4 * MiB))
    return out


def make_workspace(alloc):
    return alloc.malloc(16 * MiB)


def test_the_peak_is_made_of_what_was_alive_then_by_allocating_function(alloc):
    weights = alloc.malloc(8 * MiB)  # alive before recording: in the record, with no stack
    history = AllocationHistory(alloc)
    history.start()
    acts = make_activations(alloc, 3)
    work = make_workspace(alloc)
    del work  # peak was weights + acts + workspace = 36 MiB
    acts += make_activations(alloc, 1)  # 8 + 16 = 24 MiB: below the peak
    total, live = history.peak()
    assert total == 36 * MiB == alloc.peak_allocated
    groups = {stack[0][2] if stack else None: (b, n) for b, n, stack in by_stack(live)}
    assert groups == {"make_workspace": (16 * MiB, 1), "make_activations": (12 * MiB, 3),
                      None: (8 * MiB, 1)}
    text = format_report(history, top=2)
    assert text.splitlines()[0].startswith("peak of the record: 36.00 MiB allocated in 5 blocks")
    assert "make_workspace" in text and "make_activations" in text
    assert "in 1 more stacks" in text  # the weights, past top=2
    now = format_report(history, at="now")
    assert now.startswith("alive now: 24.00 MiB allocated in 5 blocks")
    del weights, acts


def test_clear_restarts_the_record_from_what_is_alive(alloc):
    history = AllocationHistory(alloc)
    history.start()
    big = make_workspace(alloc)
    del big
    kept = make_activations(alloc, 2)
    alloc.reset_peak_stats()
    history.clear()
    assert history.events == [] and sum(s for s, _ in history.initial.values()) == 8 * MiB
    extra = make_activations(alloc, 1)
    total, live = history.peak()
    assert total == 12 * MiB == alloc.peak_allocated  # the 16 MiB workspace is history
    assert {stack[0][2] for _, stack in live.values()} == {"make_activations"}
    del kept, extra


def test_held_reuse_and_deferred_frees_are_recorded_once(alloc):
    history = AllocationHistory(alloc)
    history.start()
    a = alloc.malloc(MiB)
    del a  # held for reuse (the fast path)
    b = alloc.malloc(MiB)  # served from the held chunk: still an allocation with a stack
    assert [size for _, size, _ in history.events] == [MiB, -MiB, MiB]
    alloc._busy = True  # a free arriving while the allocator is busy is deferred ...
    del b
    assert len(history.events) == 3 + 1 and alloc._deferred
    alloc._busy = False
    alloc._drain_deferred()  # ... and comes back through free: not recorded again
    assert len(history.events) == 4 and alloc.allocated_bytes == 0
    assert history.peak()[0] == MiB and history.live() == {}


def test_stop_gives_the_allocator_its_own_methods_back(alloc):
    history = AllocationHistory(alloc)
    history.start()
    assert "malloc" in vars(alloc) and "free" in vars(alloc)
    history.stop()
    assert "malloc" not in vars(alloc) and "free" not in vars(alloc)
    x = alloc.malloc(MiB)
    del x
    assert history.events == []


def test_stacks_are_kept_once_and_cut_at_max_frames(alloc):
    history = AllocationHistory(alloc, max_frames=2)
    history.start()
    xs = make_activations(alloc, 3)
    stacks = [stack for _, _, stack in history.events]
    assert len(stacks[0]) == 2 and stacks[0][0][2] == "make_activations"
    assert stacks[0] is stacks[1] is stacks[2]  # one tuple per distinct stack
    del xs


def test_bad_arguments_are_refused(alloc):
    with pytest.raises(ValueError, match="max_frames must be >= 1, got 0"):
        AllocationHistory(alloc, max_frames=0)
    history = AllocationHistory(alloc)
    with pytest.raises(ValueError, match="at must be 'peak' or 'now', got 'end'"):
        format_report(history, at="end")
