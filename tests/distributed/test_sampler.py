"""genesis.utils.data.DistributedSampler gives torch's indices, and partitions the data."""

from __future__ import annotations

import pytest
from torch.utils.data import DistributedSampler as TorchSampler

from genesis.utils.data import DataLoader, DistributedSampler


@pytest.mark.parametrize("length", [0, 1, 5, 10, 11, 17])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_indices_equal_torchs(length, replicas, shuffle, drop_last):
    data = list(range(length))
    for rank in range(replicas):
        ours = DistributedSampler(data, replicas, rank, shuffle=shuffle, seed=3,
                                  drop_last=drop_last)
        theirs = TorchSampler(data, replicas, rank, shuffle=shuffle, seed=3,
                              drop_last=drop_last)
        for epoch in (0, 1):
            ours.set_epoch(epoch)
            theirs.set_epoch(epoch)
            assert list(ours) == list(theirs)
            assert len(ours) == len(theirs)


@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_partition_the_dataset(drop_last):
    length, replicas = 23, 4
    parts = [list(DistributedSampler(range(length), replicas, r, seed=5, drop_last=drop_last))
             for r in range(replicas)]
    assert len({len(p) for p in parts}) == 1  # every rank gets as many samples
    seen = [i for p in parts for i in p]
    if drop_last:  # disjoint, the tail of the shuffled order dropped
        assert len(set(seen)) == len(seen) == (length // replicas) * replicas
    else:  # every index at least once; the padding repeats the first ones
        assert set(seen) == set(range(length)) and len(seen) == 24


def test_epoch_changes_the_order_equally_on_every_rank():
    a0 = DistributedSampler(range(50), 2, 0, seed=1)
    b0 = DistributedSampler(range(50), 2, 1, seed=1)
    first = list(a0) + list(b0)
    a0.set_epoch(1)
    b0.set_epoch(1)
    assert sorted(first) == sorted(list(a0) + list(b0)) and first != list(a0) + list(b0)


def test_with_dataloader_and_errors():
    loader = DataLoader(list(range(10)), batch_size=2,
                        sampler=DistributedSampler(range(10), 2, 1, shuffle=False))
    assert [b.tolist() for b in loader] == [[1, 3], [5, 7], [9]]
    with pytest.raises(ValueError, match=r"Invalid rank 2, rank should be in the interval"):
        DistributedSampler(range(4), num_replicas=2, rank=2)
    with pytest.raises(RuntimeError, match="init_process_group"):
        DistributedSampler(range(4))
