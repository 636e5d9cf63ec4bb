"""A world of one process (in this process, through an in-memory store): what a script run
without torchrun gets. Every call must work, and the world must be released afterwards."""

from __future__ import annotations

import datetime

import numpy as np
import pytest
from torch import distributed as tdist

import genesis
import genesis.distributed as dist
from genesis import nn


def test_collectives_and_work_handles(world_of_one):
    t = genesis.tensor([1.0, 2.0, 4.0])
    work = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)
    assert isinstance(work, dist.Work) and "all_reduce" in repr(work)
    assert work.wait() is True and work.is_completed()
    assert t.tolist() == [1.0, 2.0, 4.0]
    assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1, "gloo")
    group = dist.new_group([0])
    dist.barrier(group)
    dist.destroy_process_group(group)
    with pytest.raises(RuntimeError, match="destroyed"):
        dist.all_reduce(t, group=group)


def test_ddp_of_one_rank_is_the_plain_model(world_of_one):
    genesis.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    genesis.manual_seed(0)
    plain = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    ddp = dist.DistributedDataParallel(model, find_unused_parameters=True)
    x = genesis.randn(5, 3)
    ddp(x).sum().backward()
    plain(x).sum().backward()
    for a, b in zip(model.parameters(), plain.parameters()):
        np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())
    with pytest.raises(TypeError, match="wraps an nn.Module"):
        dist.DistributedDataParallel(lambda v: v)


def test_distributed_sampler_takes_the_worlds_size_and_rank():
    """Without num_replicas/rank the sampler asks the process group (genesis.distributed
    tells genesis.utils.data how: genesis-nn does not import it); with none, a clear error."""
    from genesis.utils.data import DistributedSampler

    with pytest.raises(RuntimeError, match="needs num_replicas= and rank="):
        DistributedSampler(range(10))
    dist.init_process_group("gloo", store=tdist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        sampler = DistributedSampler(range(10), shuffle=False)
        assert (sampler.num_replicas, sampler.rank) == (1, 0) and list(sampler) == list(range(10))
    finally:
        dist.destroy_process_group()
