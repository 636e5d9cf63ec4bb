"""Faults on local Gloo processes: a dead or silent rank makes the others fail with a clear
error within the timeout (never a hang); a second init says so; destroy releases."""

from __future__ import annotations

import gc
import os
import time

import pytest
from dist_harness import run_ranks
from dist_workers import (
    checkpoint,
    collects_garbage,
    environment,
    init_twice,
    killed_peer,
    silent_peer,
    stuck_rank,
)

TIMEOUT_S = 3.0


def test_killed_rank_makes_the_others_fail_within_the_timeout():
    start = time.monotonic()
    results = run_ranks(killed_peer, 3, timeout_s=TIMEOUT_S, allow_exit=(2,),
                        join_s=TIMEOUT_S + 30)
    assert time.monotonic() - start < TIMEOUT_S + 30 + 15  # + process start-up
    for r in results[:2]:
        assert r["error"] is not None and r["seconds"] < TIMEOUT_S + 30
        assert "all_reduce" in r["error"] and "group 'world'" in r["error"]


def test_silent_rank_times_out_with_a_clear_error():
    results = run_ranks(silent_peer, 2, timeout_s=TIMEOUT_S, join_s=TIMEOUT_S + 30)
    error = results[0]["error"]
    assert error is not None and results[0]["seconds"] < TIMEOUT_S + 30
    assert "all_reduce" in error and f"timeout {TIMEOUT_S:g} s" in error


def test_a_stuck_rank_is_reported_with_its_step_stack_and_the_others_errors():
    """The harness's report of a rank that never reports (tests/support/dist_harness.py):
    the step it reached, where it is stuck (its stack), and what the others raised."""
    with pytest.raises(AssertionError) as info:
        run_ranks(stuck_rank, 2, "hang", join_s=5)
    report = str(info.value)
    assert report.startswith("ranks [1] did not finish (no rank reported for")
    assert "--- rank 1 (pid" in report and "last step: running stuck_rank" in report
    assert "in _waiting_for_nothing" in report and "in stuck_rank" in report  # its stack
    assert "--- rank 0 raised ---" in report and "RuntimeError: rank 0 gives up" in report


@pytest.mark.parametrize("how,said", [("die", "exited with code 5"),
                                      ("kill", "was killed by SIGKILL")])
def test_a_rank_that_dies_silently_is_reported_at_once(how, said):
    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"(?s)rank\(s\) \[1\] exited without reporting"
                       rf".*the process {said}"):
        run_ranks(stuck_rank, 2, how, join_s=120)
    assert time.monotonic() - start < 60  # not join_s: the death is seen when it happens


class _OwnedByThisProcess:
    """Stands for a C++ object owning this process's threads (a store server, a Gloo group):
    finalized in a rank forked from this process, where those threads do not exist, it kills
    that rank. The harness's ranks come from a fork server and never hold it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.me = self  # a cycle: only the collector frees it

    def __del__(self) -> None:
        if os.getpid() != self.pid:
            os._exit(42)


def test_forked_ranks_never_finalize_the_parents_garbage():
    gc.disable()  # (so the garbage is still there when the ranks are forked)
    try:
        _OwnedByThisProcess()
        assert run_ranks(collects_garbage, 2) == [0, 1]
    finally:
        gc.enable()


def test_ranks_are_never_forked_from_the_threaded_test_process():
    """A child forked from this process can inherit a lock held by one of its threads and
    hang (in CI a rank hung inside TCPStore(...)): the harness refuses "fork" by name."""
    with pytest.raises(ValueError, match="start_method must be one of .*'fork'.*hang"):
        run_ranks(collects_garbage, 2, start_method="fork")


def test_ranks_see_the_environment_and_directory_of_the_call(monkeypatch, tmp_path):
    """The fork server started with an earlier test's environment; a rank still sees the
    variables and the working directory the test has when it calls run_ranks."""
    assert run_ranks(collects_garbage, 1) == [0]  # the server is running before the change
    monkeypatch.setenv("GENESIS_TEST_MARK", "this test")
    monkeypatch.chdir(tmp_path)
    for r in run_ranks(environment, 2):
        assert r == {"mark": "this test", "cwd": str(tmp_path)}


def test_second_init_raises_and_destroy_allows_a_new_init():
    for r in run_ranks(init_twice, 2):
        assert "twice" in r["second_init"] and "destroy_process_group" in r["second_init"]
        assert r["after_destroy"] is False
        assert "init_process_group" in r["uninitialized"]
        assert r["again"] == [2.0, 2.0]


def test_checkpoint_saved_by_rank0_loads_on_every_rank(tmp_path):
    results = run_ranks(checkpoint, 2, str(tmp_path / "ckpt.gns"))
    for r in results:
        assert r["step"] == 7
        assert (r["weight"] == results[0]["mine"]).all()  # rank 0's (broadcast) weights


def test_collectives_need_init():
    import genesis
    import genesis.distributed as dist

    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group"):
        dist.all_reduce(genesis.ones(2))


def test_init_without_torchrun_says_what_is_missing(monkeypatch):
    import genesis.distributed as dist

    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="RANK and WORLD_SIZE not set.*torchrun"):
        dist.init_process_group("gloo")
    with pytest.raises(ValueError, match="MASTER_ADDR and MASTER_PORT"):
        dist.init_process_group("gloo", rank=0, world_size=1)
    with pytest.raises(ValueError, match=r"rank 2 is outside \[0, 1\]"):
        dist.init_process_group("gloo", rank=2, world_size=2)
    with pytest.raises(ValueError, match="unknown backend 'mpi'"):
        dist.init_process_group("mpi", rank=0, world_size=1)
    assert not dist.is_initialized()


def test_a_rank_that_never_arrives_is_named_and_init_can_be_retried():
    import datetime

    from torch import distributed as tdist

    import genesis.distributed as dist

    store = tdist.HashStore()
    with pytest.raises(RuntimeError, match=r"rank\(s\) \[1\], which did not arrive"):
        dist.init_process_group("gloo", store=store, rank=0, world_size=2,
                                timeout=datetime.timedelta(seconds=1))
    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=tdist.HashStore(), rank=0, world_size=1)
    dist.destroy_process_group()
