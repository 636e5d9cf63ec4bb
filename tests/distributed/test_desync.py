"""Collectives cannot desync (issue 32): a rank with an empty tensor still takes part, and
ranks whose calls differ (size, dtype, reduce op, root, collective) all raise
``CollectiveMismatchError`` naming every rank's call, before any data moves, and stay
usable; a rank that dies inside a collective makes the others fail fast. Two Gloo processes.

``GENESIS_DISTRIBUTED_DEBUG``: the default checks Gloo collectives on dtypes and element
counts; ``DETAIL`` adds full shapes; ``OFF`` checks nothing.
"""

from __future__ import annotations

import pytest
from dist_desync_workers import (
    all_to_all_with_an_empty_rank,
    dies_mid_collective,
    mismatched_call,
    mismatched_calls,
)
from dist_harness import run_ranks

TIMEOUT_S = 20.0


EXPECTED = {  # kind of mismatch -> what both ranks' error names (each rank's call)
    "empty": ("tensor: float32 of shape (0,)", "tensor: float32 of shape (4,)"),
    "size": ("shape (3,)", "shape (5,)"),
    "dtype": ("float32 of shape (4,)", "float64 of shape (4,)"),
    "op": ("op=SUM", "op=MAX"),
    "collective": ("rank 0: all_reduce(", "rank 1: broadcast("),
    "root": ("src=0", "src=1"),
    "gather": ("input_tensor: float32 of shape (2,)", "input_tensor: float32 of shape (3,)"),
    "barrier": ("rank 0: barrier()", "rank 1: all_reduce("),
}


@pytest.fixture(scope="module")
def mismatches():
    """Every kind of mismatch, then an empty tensor on both ranks and a same-size reshape,
    one after the other in one world of two Gloo ranks (default debug level)."""
    kinds = list(EXPECTED) + ["all_empty", "shape"]
    return run_ranks(mismatched_calls, 2, kinds, None, timeout_s=TIMEOUT_S)


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_mismatched_calls_raise_on_every_rank_and_leave_the_group_usable(mismatches, kind):
    for rank in mismatches:
        r = rank[kind]
        assert r["error"] is not None, f"{kind}: a mismatch went through"
        assert "group 'world'" in r["error"] and "No data was moved" in r["error"]
        for text in EXPECTED[kind]:  # both ranks' calls are named on both ranks
            assert text in r["error"], r["error"]
        assert r["after"] == [3.0, 3.0]


def test_an_empty_tensor_on_every_rank_is_fine(mismatches):
    for rank in mismatches:
        assert rank["all_empty"] == {"error": None, "after": [3.0, 3.0]}


def test_same_size_other_shape_passes_by_default_and_is_caught_under_detail(mismatches):
    for rank in mismatches:
        assert rank["shape"]["error"] is None  # the element counts agree: the sums are right
    for r in run_ranks(mismatched_call, 2, "shape", "DETAIL", timeout_s=TIMEOUT_S):
        assert "shape (2, 3)" in r["error"] and "shape (3, 2)" in r["error"]
        assert r["after"] == [3.0, 3.0]


def test_a_rank_with_nothing_to_exchange_still_takes_part_in_all_to_all():
    results = run_ranks(all_to_all_with_an_empty_rank, 2, timeout_s=TIMEOUT_S)
    assert results[0] == {"out": [], "after": [3.0, 3.0]}
    assert results[1] == {"out": [7.0, 7.0, 7.0], "after": [3.0, 3.0]}


@pytest.mark.parametrize("level", [None, "OFF"])
def test_a_rank_dying_inside_a_collective_fails_the_others_fast(level):
    """With the check (default) the survivors wait in it; without (OFF) in the transfer."""
    results = run_ranks(dies_mid_collective, 2, level, timeout_s=TIMEOUT_S, allow_exit=(1,),
                        join_s=TIMEOUT_S + 30)
    error = results[0]["error"]
    assert error is not None and "all_reduce" in error and "group 'world'" in error
    assert results[0]["seconds"] < TIMEOUT_S / 2  # the broken connection, not the timeout


def test_bad_debug_level_is_named(monkeypatch):
    from genesis.distributed.agreement import debug_level

    monkeypatch.setenv("GENESIS_DISTRIBUTED_DEBUG", "verbose")
    with pytest.raises(ValueError, match="GENESIS_DISTRIBUTED_DEBUG='verbose'.*DETAIL"):
        debug_level()
    monkeypatch.setenv("GENESIS_DISTRIBUTED_DEBUG", "detail")
    assert debug_level() == "DETAIL"
    monkeypatch.delenv("GENESIS_DISTRIBUTED_DEBUG")
    assert debug_level() == "INFO"


@pytest.mark.multigpu
def test_nccl_mismatches_are_caught_under_detail():
    """On CUDA tensors (NCCL) the check runs under DETAIL only (it reads its result on the
    host: a device synchronisation per collective)."""
    pytest.importorskip("cupy.cuda.nccl", reason="the nccl backend needs CuPy")
    kinds = ["empty", "dtype", "shape"]
    results = run_ranks(mismatched_calls, 2, kinds, "DETAIL", "cuda", backend="nccl",
                        start_method="spawn", timeout_s=60, join_s=300)
    for rank in results:
        for kind in kinds:
            r = rank[kind]
            assert r["error"] is not None and "No data was moved" in r["error"], (kind, r)
            assert r["after"] == [3.0, 3.0]
