"""What runs inside a DataLoader worker process, and the fetchers shared with the main process.

A worker takes ``(task_index, indices)`` from its own index queue, fetches and collates the
samples, converts tensors to numpy (``to_transport``) and puts ``(task_index, batch)`` on the
shared result queue. Errors travel back as ``ExceptionWrapper`` and are re-raised in the main
process with the worker's traceback.
"""

from __future__ import annotations

import os
import queue
import random
import sys
import traceback
from dataclasses import dataclass

import numpy as np

import genesis
from genesis.utils.data.collate import to_transport

# How often (seconds) an idle worker checks that the main process is still alive.
STATUS_CHECK_INTERVAL = 5.0

_worker_info: WorkerInfo | None = None


@dataclass(frozen=True)
class WorkerInfo:
    """What ``get_worker_info()`` returns inside a worker process.

    Attributes:
        id: this worker's index in ``[0, num_workers)``.
        num_workers: how many workers the DataLoader runs.
        seed: the seed this worker's RNGs (genesis, ``random``, numpy) were seeded with.
        dataset: this process's copy of the dataset.
    """

    id: int
    num_workers: int
    seed: int
    dataset: object


def get_worker_info() -> WorkerInfo | None:
    """Information about the current DataLoader worker, or ``None`` in the main process.

    Example:
        >>> class Shards(IterableDataset):
        ...     def __iter__(self):
        ...         info = get_worker_info()
        ...         start = 0 if info is None else info.id
        ...         step = 1 if info is None else info.num_workers
        ...         return iter(range(start, 100, step))
    """
    return _worker_info


class ExceptionWrapper:
    """An exception caught in a worker: its type and formatted traceback, picklable."""

    def __init__(self, where: str) -> None:
        exc_type, exc, _ = sys.exc_info()
        self.exc_type = exc_type
        self.exc_msg = "".join(traceback.format_exception(exc_type, exc, exc.__traceback__))
        self.where = where

    def reraise(self):
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        if self.exc_type is KeyError:  # KeyError would repr() the message: keep it readable
            msg = KeyErrorMessage(msg)
        try:
            err = self.exc_type(msg)
        except Exception:  # an exception type whose constructor needs other arguments
            raise RuntimeError(msg) from None
        raise err


class KeyErrorMessage(str):
    def __repr__(self) -> str:
        return str(self)


@dataclass(frozen=True)
class IterableDatasetStopIteration:
    """Sent by a worker whose iterable dataset is exhausted."""

    worker_id: int


class ResumeIteration:
    """Sent to persistent workers at the start of a new epoch (re-creates the fetcher)."""


# ------------------------------------------------------------------------------ fetchers
class MapFetcher:
    """Fetches samples of a map-style dataset by index and collates them."""

    def __init__(self, dataset, auto_collation: bool, collate_fn, drop_last: bool) -> None:
        self.dataset = dataset
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.getitems = getattr(dataset, "__getitems__", None) if auto_collation else None

    def fetch(self, index):
        if not self.auto_collation:
            return self.collate_fn(self.dataset[index])
        if self.getitems is not None:
            return self.collate_fn(self.getitems(index))
        return self.collate_fn([self.dataset[i] for i in index])


class IterableFetcher:
    """Pulls samples from an iterable dataset's iterator; ``index`` only says how many."""

    def __init__(self, dataset, auto_collation: bool, collate_fn, drop_last: bool) -> None:
        self.iterator = iter(dataset)
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.drop_last = drop_last
        self.ended = False

    def fetch(self, index):
        if self.ended:
            raise StopIteration
        if not self.auto_collation:
            return self.collate_fn(next(self.iterator))
        data = []
        for _ in index:
            try:
                data.append(next(self.iterator))
            except StopIteration:
                self.ended = True
                break
        if not data or (self.drop_last and len(data) < len(index)):
            raise StopIteration
        return self.collate_fn(data)


def make_fetcher(is_iterable: bool, dataset, auto_collation, collate_fn, drop_last):
    cls = IterableFetcher if is_iterable else MapFetcher
    return cls(dataset, auto_collation, collate_fn, drop_last)


def numpy_seed(base_seed: int, worker_id: int) -> int:
    """A numpy seed for worker ``worker_id`` (mixes both so workers never share a stream)."""
    return int(np.random.SeedSequence([worker_id, base_seed & 0xFFFFFFFF,
                                       base_seed >> 32]).generate_state(1)[0])


# --------------------------------------------------------------------------- the loop
def worker_loop(is_iterable, dataset, index_queue, data_queue, done_event, auto_collation,
                collate_fn, drop_last, base_seed, init_fn, worker_id, num_workers):
    """Main function of a worker process (see the module docstring)."""
    global _worker_info
    parent = os.getppid()
    try:
        seed = base_seed + worker_id
        random.seed(seed)
        genesis.manual_seed(seed)
        np.random.seed(numpy_seed(base_seed, worker_id))
        set_threads = getattr(genesis, "set_num_threads", None)
        if set_threads is not None:
            set_threads(1)  # N workers x all cores of threads would oversubscribe the CPU
        _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed,
                                  dataset=dataset)
        init_error = None
        fetcher = None
        try:
            if init_fn is not None:
                init_fn(worker_id)
            fetcher = make_fetcher(is_iterable, dataset, auto_collation, collate_fn, drop_last)
        except Exception:
            init_error = ExceptionWrapper(f"in DataLoader worker process {worker_id}")

        exhausted = False
        while True:
            try:
                task = index_queue.get(timeout=STATUS_CHECK_INTERVAL)
            except queue.Empty:
                if os.getppid() != parent:  # the main process died: do not linger
                    break
                continue
            if task is None:  # shutdown
                break
            if isinstance(task, ResumeIteration):
                exhausted = False
                if init_error is None:
                    fetcher = make_fetcher(is_iterable, dataset, auto_collation, collate_fn,
                                           drop_last)
                data_queue.put((task, None))
                continue
            if done_event.is_set() or exhausted:
                continue
            idx, index = task
            if init_error is not None:  # every task of this worker fails as its init did
                data = init_error
            else:
                try:
                    data = to_transport(fetcher.fetch(index))
                except StopIteration:
                    if not is_iterable:
                        data = ExceptionWrapper(f"in DataLoader worker process {worker_id}")
                    else:
                        data = IterableDatasetStopIteration(worker_id)
                        exhausted = True
                except Exception:
                    data = ExceptionWrapper(f"in DataLoader worker process {worker_id}")
            data_queue.put((idx, data))
    except KeyboardInterrupt:
        pass
    if done_event.is_set():
        # results nobody will read must not keep this process alive at exit
        data_queue.cancel_join_thread()
        data_queue.close()
