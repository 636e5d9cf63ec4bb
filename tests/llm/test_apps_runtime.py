"""The apps' runtime: one process never touches genesis.distributed; WORLD_SIZE>1 does, lazily."""

from __future__ import annotations

import sys
import types

import pytest

import genesis
from genesis.models.apps.runtime import setup_runtime


def test_single_process(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setitem(sys.modules, "genesis.distributed", None)  # importing it would fail
    rt = setup_runtime("cpu")
    assert (rt.rank, rt.world_size, rt.is_main, rt.autocast_dtype) == (0, 1, True, None)
    model = object()
    assert rt.wrap(model) is model and rt.sum(2.5) == 2.5 and rt.shard([1, 2, 3]) == [1, 2, 3]
    rt.barrier()
    assert setup_runtime("cpu", "bf16").autocast_dtype is genesis.bfloat16
    with pytest.raises(ValueError, match="precision"):
        setup_runtime("cpu", "fp16")


def test_torchrun_environment_uses_genesis_distributed(monkeypatch):
    calls = []
    fake = types.ModuleType("genesis.distributed")
    fake.is_initialized = lambda: bool(calls)
    fake.init_process_group = lambda: calls.append("init")
    fake.barrier = lambda: calls.append("barrier")

    def all_reduce(t):
        calls.append("all_reduce")
        t.mul_(3)  # as if three ranks held the same value

    fake.all_reduce = all_reduce
    fake.DistributedDataParallel = lambda m: ("ddp", m)
    monkeypatch.setitem(sys.modules, "genesis.distributed", fake)
    # an earlier test may have imported the real package, which binds it on genesis too
    monkeypatch.setattr(genesis, "distributed", fake, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "1")
    rt = setup_runtime("cpu")
    assert (rt.rank, rt.world_size, rt.is_main) == (1, 3, False)
    assert calls == ["init"]
    assert rt.wrap("m") == ("ddp", "m")
    assert rt.sum(2.0) == 6.0
    assert rt.shard(list(range(7))) == [1, 4]
    rt.barrier()
    assert calls == ["init", "all_reduce", "barrier"]
