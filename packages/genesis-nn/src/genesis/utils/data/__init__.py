"""``genesis.utils.data``: datasets, samplers and the DataLoader (torch.utils.data's API).

Example:
    >>> from genesis.utils.data import DataLoader, TensorDataset, random_split
    >>> ds = TensorDataset(genesis.randn(100, 3), genesis.arange(100))
    >>> train, test = random_split(ds, [0.8, 0.2])
    >>> for x, y in DataLoader(train, batch_size=16, shuffle=True):
    ...     pass
"""

from genesis.utils.data.collate import default_collate, default_convert
from genesis.utils.data.dataloader import DataLoader
from genesis.utils.data.dataset import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    IterableDataset,
    Subset,
    TensorDataset,
    random_split,
)
from genesis.utils.data.sampler import (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)
from genesis.utils.data.worker import WorkerInfo, get_worker_info

__all__ = [
    "BatchSampler", "ChainDataset", "ConcatDataset", "DataLoader", "Dataset",
    "DistributedSampler", "IterableDataset",
    "RandomSampler", "Sampler", "SequentialSampler", "Subset", "SubsetRandomSampler",
    "TensorDataset", "WeightedRandomSampler", "WorkerInfo", "default_collate", "default_convert",
    "get_worker_info", "random_split",
]
