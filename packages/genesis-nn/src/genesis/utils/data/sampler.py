"""Samplers: iterables of dataset indices (or, for ``BatchSampler``, of index lists)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence

import genesis

__all__ = [
    "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
    "WeightedRandomSampler", "BatchSampler", "DistributedSampler",
]


def _fresh_generator(generator):
    """``generator`` itself, or a new one seeded from the global generator (torch's way, so
    ``genesis.manual_seed`` makes an unseeded shuffle reproducible)."""
    if generator is not None:
        return generator
    seed = int(genesis.randint(0, 2**62, (), dtype=genesis.int64).item())
    return genesis.Generator().manual_seed(seed)


class Sampler:
    """Base class: subclasses implement ``__iter__`` (and usually ``__len__``)."""

    def __init__(self, data_source=None) -> None:
        pass

    def __iter__(self) -> Iterator:
        raise NotImplementedError


class SequentialSampler(Sampler):
    """``0, 1, ..., len(data_source) - 1``."""

    def __init__(self, data_source) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """Indices in random order (a permutation per pass), or drawn with replacement.

    Args:
        data_source: the dataset (only its length is used).
        replacement: draw ``num_samples`` indices independently.
        num_samples: how many to draw (default: ``len(data_source)``).
        generator: a ``genesis.Generator``; each ``iter()`` continues its stream.

    Example:
        >>> list(RandomSampler(range(4), generator=genesis.Generator().manual_seed(0)))
    """

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None,
                 generator=None) -> None:
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, got {replacement!r}")
        if not isinstance(self.num_samples, int) or self.num_samples < 0:
            raise ValueError(f"num_samples should be a non-negative integer, got "
                             f"{self.num_samples!r}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n = len(self.data_source)
        gen = _fresh_generator(self.generator)
        if self.replacement:
            for _ in range(self.num_samples // 32):
                yield from genesis.randint(0, n, (32,), dtype=genesis.int64,
                                           generator=gen).tolist()
            rest = self.num_samples % 32
            if rest:
                yield from genesis.randint(0, n, (rest,), dtype=genesis.int64,
                                           generator=gen).tolist()
            return
        for _ in range(self.num_samples // n if n else 0):
            yield from genesis.randperm(n, generator=gen).tolist()
        if n:
            yield from genesis.randperm(n, generator=gen).tolist()[:self.num_samples % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices, in a random order each pass."""

    def __init__(self, indices: Sequence[int], generator=None) -> None:
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        for i in genesis.randperm(len(self.indices), generator=self.generator).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn with probability proportional to ``weights``.

    Draws on the host from the generator's stream (inverse-CDF sampling of uniforms).
    """

    def __init__(self, weights: Sequence[float], num_samples: int, replacement: bool = True,
                 generator=None) -> None:
        if not isinstance(num_samples, int) or num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer, got {num_samples!r}")
        import numpy as np

        w = np.asarray(weights.numpy() if hasattr(weights, "numpy") else weights,
                       dtype=np.float64)
        if w.ndim != 1 or (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
            raise ValueError("weights should be a 1-d sequence of non-negative finite numbers "
                             f"with a positive sum, got shape {w.shape}")
        if not replacement and num_samples > int((w > 0).sum()):
            raise ValueError("WeightedRandomSampler: cannot draw more samples without "
                             "replacement than there are non-zero weights")
        self.weights = w
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        import numpy as np

        gen = _fresh_generator(self.generator)
        w = self.weights.copy()
        out: list[int] = []
        while len(out) < self.num_samples:
            need = self.num_samples - len(out) if self.replacement else 1
            u = genesis.rand(need, dtype=genesis.float64, generator=gen).numpy()
            cdf = np.cumsum(w)
            picks = np.searchsorted(cdf, u * cdf[-1], side="right")
            picks = np.minimum(picks, len(w) - 1)
            out.extend(int(p) for p in picks)
            if not self.replacement:
                w[picks] = 0.0
        return iter(out)

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Groups another sampler's indices into lists of ``batch_size``.

    Args:
        sampler: an iterable of indices.
        batch_size: indices per batch.
        drop_last: drop the last batch when it is smaller than ``batch_size``.

    Example:
        >>> list(BatchSampler(SequentialSampler(range(5)), 2, drop_last=False))
        [[0, 1], [2, 3], [4]]
    """

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size!r}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got "
                             f"drop_last={drop_last!r}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


class DistributedSampler(Sampler):
    """Each rank's share of the dataset's indices, for data-parallel training (as torch).

    The indices (shuffled with seed ``seed + epoch`` when ``shuffle``) are padded by
    repeating the first ones up to a multiple of ``num_replicas`` — or, with ``drop_last``,
    cut down to one — and rank ``r`` takes every ``num_replicas``-th one starting at ``r``.
    Every rank sees the same number of samples; call ``set_epoch`` before each epoch for a
    new order.

    Args:
        dataset: only its length is used.
        num_replicas, rank: default ``genesis.distributed``'s world size and rank.
        shuffle: a new permutation per epoch (the same on every rank).
        seed: base of the shuffle's seed; must be equal on every rank.
        drop_last: drop the tail instead of padding.

    Example:
        >>> sampler = DistributedSampler(dataset, num_replicas=2, rank=0, seed=1)
        >>> loader = DataLoader(dataset, batch_size=8, sampler=sampler)
        >>> for epoch in range(3):
        ...     sampler.set_epoch(epoch)
        ...     for batch in loader: ...
    """

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:
        if num_replicas is None or rank is None:
            world_size, world_rank = _distributed_world()
            num_replicas = world_size if num_replicas is None else num_replicas
            rank = world_rank if rank is None else rank
        if num_replicas < 1:
            raise ValueError(f"num_replicas should be a positive integer, got {num_replicas}")
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            gen = genesis.Generator().manual_seed(self.seed + self.epoch)
            indices = genesis.randperm(n, generator=gen).tolist()
        else:
            indices = list(range(n))
        if self.drop_last:
            indices = indices[:self.total_size]
        elif indices:
            padding = self.total_size - len(indices)
            indices += (indices * math.ceil(padding / len(indices)))[:padding]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` in the shuffle's seed (call it with the same value on every rank)."""
        self.epoch = epoch


# () -> (world size, rank) of the initialised process group, or None: set by
# genesis.distributed when it is imported (genesis-nn does not import genesis-distributed).
_world_of_the_process_group = None


def set_world_provider(provider) -> None:
    """Let ``DistributedSampler`` ask ``provider()`` for ``(world size, rank)`` when it is
    given neither (``genesis.distributed`` installs its own on import)."""
    global _world_of_the_process_group
    _world_of_the_process_group = provider


def _distributed_world() -> tuple[int, int]:
    """(world size, rank) of the initialised genesis.distributed world, or a clear error."""
    world = _world_of_the_process_group() if _world_of_the_process_group is not None else None
    if world is None:
        raise RuntimeError("DistributedSampler needs num_replicas= and rank=, or "
                           "genesis.distributed.init_process_group() called first")
    return world
