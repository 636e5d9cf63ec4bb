"""genesis.utils.data: datasets, samplers, collation and the (multi-process) DataLoader."""

from __future__ import annotations

import collections
import os

import numpy as np
import pytest

import genesis
from genesis.utils.data import (
    BatchSampler,
    ConcatDataset,
    DataLoader,
    Dataset,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    Subset,
    TensorDataset,
    WeightedRandomSampler,
    default_collate,
    get_worker_info,
    random_split,
)


def values(t) -> list:
    return t.numpy().tolist()


class Squares(Dataset):
    def __init__(self, n: int = 10) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return {"x": genesis.full((2,), float(i)), "y": i * i, "name": f"s{i}"}


class Sharded(IterableDataset):
    """Each worker yields its own interleaved shard of range(n)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, self.n, step))


class Failing(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i):
        if i == 5:
            raise ValueError("sample 5 is broken")
        return genesis.tensor([float(i)])


class WorkerIdentity(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i):
        info = get_worker_info()
        draw = float(genesis.rand(()).item())
        return {"worker": -1 if info is None else info.id, "pid": os.getpid(), "draw": draw,
                "i": i}


# ------------------------------------------------------------------------------ datasets
def test_tensor_dataset_and_errors():
    x, y = genesis.randn(6, 3), genesis.arange(6)
    ds = TensorDataset(x, y)
    assert len(ds) == 6
    xi, yi = ds[2]
    assert values(xi) == values(x[2]) and int(yi.item()) == 2
    with pytest.raises(ValueError, match=r"size mismatch.*\[6, 3\].*\[5\]"):
        TensorDataset(x, genesis.arange(5))


def test_subset_concat():
    ds = TensorDataset(genesis.arange(10))
    sub = Subset(ds, [7, 1, 4])
    assert [int(sub[i][0].item()) for i in range(3)] == [7, 1, 4]
    both = ConcatDataset([sub, TensorDataset(genesis.arange(100, 102))])
    assert len(both) == 5
    assert [int(both[i][0].item()) for i in range(5)] == [7, 1, 4, 100, 101]
    assert int(both[-1][0].item()) == 101
    assert len(sub + sub) == 6


def test_random_split_lengths_fractions_and_generator():
    ds = TensorDataset(genesis.arange(10))
    a, b = random_split(ds, [7, 3], generator=genesis.Generator().manual_seed(0))
    assert len(a) == 7 and len(b) == 3
    assert sorted(a.indices + b.indices) == list(range(10))
    c, d = random_split(ds, [7, 3], generator=genesis.Generator().manual_seed(0))
    assert c.indices == a.indices  # same generator seed, same split
    parts = random_split(ds, [0.5, 0.3, 0.2])
    assert [len(p) for p in parts] == [5, 3, 2]
    parts = random_split(TensorDataset(genesis.arange(11)), [0.5, 0.5])
    assert [len(p) for p in parts] == [6, 5]  # remainder goes round-robin from the first
    with pytest.raises(ValueError, match=r"sum of input lengths \(9\).*\(10\)"):
        random_split(ds, [5, 4])


# ------------------------------------------------------------------------------ samplers
def test_samplers():
    assert list(SequentialSampler(range(4))) == [0, 1, 2, 3]
    g = genesis.Generator().manual_seed(3)
    perm = list(RandomSampler(range(20), generator=g))
    assert sorted(perm) == list(range(20)) and perm != list(range(20))
    again = list(RandomSampler(range(20), generator=genesis.Generator().manual_seed(3)))
    assert again == perm
    draws = list(RandomSampler(range(5), replacement=True, num_samples=50, generator=g))
    assert len(draws) == 50 and set(draws) <= set(range(5))
    assert list(BatchSampler(range(5), 2, drop_last=False)) == [[0, 1], [2, 3], [4]]
    assert list(BatchSampler(range(5), 2, drop_last=True)) == [[0, 1], [2, 3]]
    assert len(BatchSampler(range(5), 2, drop_last=False)) == 3
    w = list(WeightedRandomSampler([0.0, 1.0, 0.0, 3.0], 40, generator=g))
    assert set(w) <= {1, 3} and len(w) == 40
    no_repl = list(WeightedRandomSampler([1.0, 1.0, 1.0], 3, replacement=False, generator=g))
    assert sorted(no_repl) == [0, 1, 2]
    with pytest.raises(ValueError, match="batch_size"):
        BatchSampler(range(5), 0, drop_last=False)


# ------------------------------------------------------------------------------- collate
Point = collections.namedtuple("Point", ["x", "y"])


def test_default_collate_rules():
    batch = default_collate([(genesis.zeros(2), 1, 0.5, "a"), (genesis.ones(2), 2, 1.5, "b")])
    assert isinstance(batch, list) and len(batch) == 4
    assert values(batch[0]) == [[0.0, 0.0], [1.0, 1.0]]
    assert batch[1].dtype == genesis.int64 and values(batch[1]) == [1, 2]
    assert batch[2].dtype == genesis.float64 and values(batch[2]) == [0.5, 1.5]
    assert batch[3] == ["a", "b"]
    d = default_collate([{"a": np.zeros(3, dtype=np.float32)}, {"a": np.ones(3, dtype=np.float32)}])
    assert d["a"].dtype == genesis.float32 and tuple(d["a"].shape) == (2, 3)
    p = default_collate([Point(1, 2.0), Point(3, 4.0)])
    assert isinstance(p, Point) and values(p.x) == [1, 3]
    flags = default_collate([True, False])
    assert flags.dtype == genesis.bool
    with pytest.raises(RuntimeError, match=r"equal size.*\[2\].*\[3\]"):
        default_collate([genesis.zeros(2), genesis.zeros(3)])
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([(1, 2), (1, 2, 3)])


# ---------------------------------------------------------------------------- DataLoader
def test_loader_batches_drop_last_and_len():
    ds = TensorDataset(genesis.arange(10).float(), genesis.arange(10))
    loader = DataLoader(ds, batch_size=4)
    assert len(loader) == 3
    batches = list(loader)
    assert [tuple(b[0].shape) for b in batches] == [(4,), (4,), (2,)]
    assert values(batches[2][1]) == [8, 9]
    assert len(list(DataLoader(ds, batch_size=4, drop_last=True))) == 2


def test_loader_shuffle_is_reproducible_with_generator():
    ds = TensorDataset(genesis.arange(32))

    def order(seed):
        g = genesis.Generator().manual_seed(seed)
        return [v for (b,) in DataLoader(ds, batch_size=5, shuffle=True, generator=g)
                for v in values(b)]

    first = order(0)
    assert sorted(first) == list(range(32)) and first != list(range(32))
    assert order(0) == first
    assert order(1) != first
    g = genesis.Generator().manual_seed(0)
    loader = DataLoader(ds, batch_size=32, shuffle=True, generator=g)
    epoch1, epoch2 = values(next(iter(loader))[0]), values(next(iter(loader))[0])
    assert epoch1 != epoch2  # a new permutation each epoch


def test_loader_without_auto_batching_and_custom_collate():
    ds = Squares(3)
    items = list(DataLoader(ds, batch_size=None))
    assert items[1]["y"] == 1 and values(items[1]["x"]) == [1.0, 1.0]
    sums = list(DataLoader(ds, batch_size=2, collate_fn=lambda b: sum(s["y"] for s in b)))
    assert sums == [1, 4]


def test_loader_batch_sampler_and_option_errors():
    ds = TensorDataset(genesis.arange(6))
    loader = DataLoader(ds, batch_sampler=[[5, 0], [3]])
    assert [values(b[0]) for b in loader] == [[5, 0], [3]]
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(ds, batch_sampler=[[0]], batch_size=2)
    with pytest.raises(ValueError, match="mutually exclusive with shuffle"):
        DataLoader(ds, sampler=[0, 1], shuffle=True)
    with pytest.raises(ValueError, match="shuffle"):
        DataLoader(Sharded(4), shuffle=True)
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(ds, num_workers=-1)


def test_workers_keep_order_and_match_single_process():
    ds = Squares(23)
    single = list(DataLoader(ds, batch_size=3))
    multi = list(DataLoader(ds, batch_size=3, num_workers=2))
    assert len(single) == len(multi) == 8
    for a, b in zip(single, multi):
        assert values(a["x"]) == values(b["x"])
        assert values(a["y"]) == values(b["y"]) and a["name"] == b["name"]
        assert b["x"].dtype == genesis.float32 and b["y"].dtype == genesis.int64


def test_workers_shuffle_same_as_single_process():
    ds = TensorDataset(genesis.arange(40))
    a = [values(b) for (b,) in DataLoader(ds, batch_size=8, shuffle=True,
                                          generator=genesis.Generator().manual_seed(5))]
    b = [values(b) for (b,) in DataLoader(ds, batch_size=8, shuffle=True, num_workers=3,
                                          generator=genesis.Generator().manual_seed(5))]
    assert a == b


def test_workers_are_processes_with_seeds_and_init_fn(tmp_path):
    marker = tmp_path / "init"

    def init_fn(worker_id):
        (marker.parent / f"init{worker_id}").write_text(str(get_worker_info().seed))

    def run():
        g = genesis.Generator().manual_seed(9)
        return list(DataLoader(WorkerIdentity(), batch_size=2, num_workers=2, generator=g,
                               worker_init_fn=init_fn))

    batches = run()
    workers = [w for b in batches for w in values(b["worker"])]
    assert workers == [0, 0, 1, 1, 0, 0, 1, 1]  # round-robin dispatch, in order
    pids = {p for b in batches for p in values(b["pid"])}
    assert os.getpid() not in pids and len(pids) == 2
    seeds = [int((tmp_path / f"init{i}").read_text()) for i in range(2)]
    assert seeds[1] == seeds[0] + 1  # base_seed + worker_id, as torch
    draws = [d for b in batches for d in values(b["draw"])]
    assert draws == [d for b in run() for d in values(b["draw"])]  # deterministic
    assert len(set(draws)) == len(draws)  # workers do not share a random stream


def test_iterable_dataset_with_workers():
    single = [v for b in DataLoader(Sharded(10), batch_size=3) for v in values(b)]
    assert single == list(range(10))
    multi = [v for b in DataLoader(Sharded(10), batch_size=2, num_workers=2) for v in values(b)]
    assert sorted(multi) == list(range(10))
    assert multi[:4] == [0, 2, 1, 3]  # worker 0's batch, then worker 1's
    dropped = list(DataLoader(Sharded(7), batch_size=2, num_workers=2, drop_last=True))
    assert all(tuple(b.shape) == (2,) for b in dropped)


def test_worker_error_is_reraised_with_traceback():
    loader = DataLoader(Failing(), batch_size=2, num_workers=2)
    with pytest.raises(ValueError, match=r"(?s)Caught ValueError in DataLoader worker process "
                                         r"0.*sample 5 is broken"):
        list(loader)


def test_persistent_workers_two_epochs():
    ds = Squares(7)
    loader = DataLoader(ds, batch_size=2, num_workers=2, persistent_workers=True)
    first = [values(b["y"]) for b in loader]
    second = [values(b["y"]) for b in loader]
    assert first == second == [[0, 1], [4, 9], [16, 25], [36]]
    it = loader._iterator
    assert all(w.is_alive() for w in it._workers)
    it._shutdown_workers()


def test_break_early_does_not_hang():
    loader = DataLoader(Squares(50), batch_size=2, num_workers=2)
    for i, _ in enumerate(loader):
        if i == 1:
            break
    assert len(list(DataLoader(Squares(4), batch_size=2, num_workers=2))) == 2


class Crashing(Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i):
        if get_worker_info() is not None and i == 2:
            os._exit(3)  # a worker dying without a Python exception (e.g. killed for memory)
        return i


class Slow(Dataset):
    def __len__(self) -> int:
        return 2

    def __getitem__(self, i):
        import time

        time.sleep(3.0)
        return i


def test_dead_worker_is_reported_not_hung():
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid\(s\) \d+\) exited "
                                           r"unexpectedly \(exit code\(s\) 3\)"):
        list(DataLoader(Crashing(), batch_size=1, num_workers=2))


def test_timeout():
    with pytest.raises(RuntimeError, match="timed out after 0.5 seconds"):
        list(DataLoader(Slow(), batch_size=1, num_workers=1, timeout=0.5))
    with pytest.raises(ValueError, match="timeout"):
        DataLoader(Slow(), timeout=-1)


def _outcomes(loader) -> list:
    """Each ``next()`` of one epoch: the batch's values, or the error's type."""
    out, it = [], iter(loader)
    for _ in range(len(loader) + 1):  # bounded: a loader that keeps raising must not hang us
        try:
            batch = next(it)
        except StopIteration:
            return out
        except ValueError as exc:
            out.append(type(exc).__name__)
        else:
            out.append(values(batch))
    raise AssertionError(f"no StopIteration after {len(loader) + 1} next() calls: {out}")


@pytest.mark.parametrize("persistent", [False, True])
def test_after_a_failed_batch_the_next_batches_still_come(persistent):
    """torch (and num_workers=0) raise for the bad batch, then go on with the rest."""
    single = _outcomes(DataLoader(Failing(), batch_size=2))
    loader = DataLoader(Failing(), batch_size=2, num_workers=2,
                        persistent_workers=persistent)
    assert single == [[[0.0], [1.0]], [[2.0], [3.0]], "ValueError", [[6.0], [7.0]]]
    assert _outcomes(loader) == single
    if persistent:  # and the next epoch works the same
        assert _outcomes(loader) == single
        loader._iterator._shutdown_workers()


def test_failing_worker_init_fails_each_of_its_batches():
    def init(worker_id):
        if worker_id == 1:
            raise ValueError("worker 1 cannot start")

    got = _outcomes(DataLoader(Squares(8), batch_size=2, num_workers=2, worker_init_fn=init,
                               collate_fn=lambda b: genesis.tensor([s["y"] for s in b])))
    assert got == [[0, 1], "ValueError", [16, 25], "ValueError"]
