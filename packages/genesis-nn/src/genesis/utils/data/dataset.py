"""Datasets: map-style (``__getitem__`` + ``__len__``) and iterable, plus views and splits."""

from __future__ import annotations

import bisect
import math
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Generic, TypeVar

import genesis

__all__ = [
    "Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "ChainDataset", "Subset",
    "random_split",
]

T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    """A map-style dataset: subclasses implement ``__getitem__(index)`` and ``__len__``.

    Example:
        >>> class Squares(Dataset):
        ...     def __len__(self): return 10
        ...     def __getitem__(self, i): return i * i
    """

    def __getitem__(self, index) -> T_co:
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co]):
    """A dataset that is a stream: subclasses implement ``__iter__``.

    With ``num_workers > 0`` every worker process iterates its own copy; use
    ``genesis.utils.data.get_worker_info()`` inside ``__iter__`` to give each worker a shard.

    Example:
        >>> class Count(IterableDataset):
        ...     def __iter__(self): return iter(range(5))
    """

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__")

    def __add__(self, other: Dataset) -> ChainDataset:
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Samples are ``tuple(t[i] for t in tensors)``: tensors indexed along their first dim.

    Args:
        *tensors: tensors with the same first-dim size.

    Example:
        >>> ds = TensorDataset(genesis.randn(100, 3), genesis.arange(100))
        >>> x, y = ds[0]
    """

    def __init__(self, *tensors) -> None:
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        n = tensors[0].shape[0] if tensors[0].ndim > 0 else None
        for i, t in enumerate(tensors):
            if t.ndim == 0 or t.shape[0] != n:
                raise ValueError(
                    "TensorDataset: size mismatch between tensors: tensor 0 has size "
                    f"{list(tensors[0].shape)}, tensor {i} has size {list(t.shape)} (all need "
                    "the same first dimension)")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class ConcatDataset(Dataset):
    """Several map-style datasets back to back.

    Example:
        >>> len(ConcatDataset([TensorDataset(genesis.zeros(3)), TensorDataset(genesis.ones(2))]))
        5
    """

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = []
        total = 0
        for d in self.datasets:
            total += len(d)
            self.cumulative_sizes.append(total)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise IndexError(f"index {idx} out of range for ConcatDataset of length "
                                 f"{len(self)}")
            idx = len(self) + idx
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        if which >= len(self.datasets):
            raise IndexError(f"index {idx} out of range for ConcatDataset of length {len(self)}")
        start = self.cumulative_sizes[which - 1] if which > 0 else 0
        return self.datasets[which][idx - start]


class ChainDataset(IterableDataset):
    """Several iterable datasets one after another."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = datasets

    def __iter__(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise TypeError("ChainDataset only supports IterableDataset")
            yield from d

    def __len__(self) -> int:
        return sum(len(d) for d in self.datasets)


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order.

    Example:
        >>> evens = Subset(TensorDataset(genesis.arange(10)), [0, 2, 4])
        >>> len(evens)
        3
    """

    def __init__(self, dataset: Dataset, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list[int]) -> list:
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self) -> int:
        return len(self.indices)


def _lengths_from_fractions(lengths: Sequence[float], n: int) -> list[int]:
    """torch's rule: floor each share, then hand the remainder out round-robin."""
    counts = []
    for i, frac in enumerate(lengths):
        if frac < 0 or frac > 1:
            raise ValueError(f"random_split: fraction at index {i} is not between 0 and 1: "
                             f"{frac}")
        counts.append(int(math.floor(n * frac)))
    remainder = n - sum(counts)
    for i in range(remainder):
        counts[i % len(counts)] += 1
    for i, c in enumerate(counts):
        if c == 0:
            warnings.warn(f"random_split: length of split at index {i} is 0; this might "
                          "result in an empty dataset", stacklevel=3)
    return counts


def random_split(dataset: Dataset, lengths: Sequence[int | float],
                 generator=None) -> list[Subset]:
    """Split ``dataset`` into non-overlapping random subsets.

    Args:
        dataset: a map-style dataset.
        lengths: the subset sizes (summing to ``len(dataset)``), or fractions summing to 1
            (sizes are floored and the remainder handed out round-robin, as torch does).
        generator: a ``genesis.Generator`` for the permutation (default: the global one).

    Returns:
        A list of ``Subset``s.

    Example:
        >>> train, test = random_split(ds, [0.8, 0.2], generator=genesis.Generator().manual_seed(0))
    """
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        lengths = _lengths_from_fractions(lengths, n)
    if sum(lengths) != n:
        raise ValueError(f"random_split: sum of input lengths ({sum(lengths)}) does not equal "
                         f"the length of the input dataset ({n})")
    perm = genesis.randperm(n, generator=generator).tolist()
    out, offset = [], 0
    for length in lengths:
        out.append(Subset(dataset, perm[offset:offset + length]))
        offset += length
    return out
