"""``DataLoader``: batches from a dataset, in the main process or in worker processes.

With ``num_workers > 0`` each worker is a separate process (``fork`` where available, so the
dataset is inherited rather than pickled) with its own index queue; results come back on one
queue and are re-ordered by task number, so the batch order is exactly the single-process
order whatever the workers' speeds. Tensors cross the process boundary as numpy arrays.
"""

from __future__ import annotations

import itertools
import multiprocessing
import queue
import sys
import warnings

import genesis
from genesis.utils.data import worker as _worker
from genesis.utils.data.collate import default_collate, default_convert, from_transport
from genesis.utils.data.dataset import IterableDataset
from genesis.utils.data.sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = ["DataLoader", "get_worker_info"]

get_worker_info = _worker.get_worker_info


class _InfiniteConstantSampler(Sampler):
    """Yields ``None`` forever: an iterable dataset decides itself when to stop."""

    def __iter__(self):
        while True:
            yield None


def _default_context():
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


class DataLoader:
    """Iterate over a dataset in batches.

    Args:
        dataset: a map-style ``Dataset`` or an ``IterableDataset``.
        batch_size: samples per batch (default 1); ``None`` turns automatic batching off
            (each item is converted with ``default_convert`` instead of collated).
        shuffle: reshuffle at every epoch (map-style datasets only).
        sampler: an iterable of indices (excludes ``shuffle``).
        batch_sampler: an iterable of index lists (excludes ``batch_size``, ``shuffle``,
            ``sampler`` and ``drop_last``).
        num_workers: worker processes (0: load in the main process).
        collate_fn: merges a list of samples into a batch (default ``default_collate``).
        pin_memory: accepted for torch compatibility; genesis does not pin memory.
        drop_last: drop the last incomplete batch.
        timeout: seconds to wait for a worker's batch (0: forever).
        worker_init_fn: called as ``fn(worker_id)`` in each worker after seeding.
        multiprocessing_context: a start-method name or context (default: fork, else spawn).
        generator: a ``genesis.Generator`` for shuffling and the workers' base seed.
        prefetch_factor: batches loaded in advance per worker (default 2).
        persistent_workers: keep the workers alive between epochs.

    Example:
        >>> ds = TensorDataset(genesis.randn(100, 3), genesis.arange(100))
        >>> for x, y in DataLoader(ds, batch_size=32, shuffle=True, num_workers=2):
        ...     pass
    """

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler=None, batch_sampler=None, num_workers: int = 0, collate_fn=None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor: int | None = None, persistent_workers: bool = False) -> None:
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"num_workers option should be non-negative; use num_workers=0 to "
                             f"disable multiprocessing (got {num_workers!r})")
        if timeout < 0:
            raise ValueError(f"timeout option should be non-negative, got {timeout}")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in "
                             "multiprocessing; let num_workers > 0 to enable multiprocessing")
        if prefetch_factor is None:
            prefetch_factor = 2
        if prefetch_factor <= 0:
            raise ValueError(f"prefetch_factor must be positive, got {prefetch_factor}")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if pin_memory:
            warnings.warn("DataLoader(pin_memory=True): genesis does not pin host memory; "
                          "the option is ignored", stacklevel=2)

        self.is_iterable = isinstance(dataset, IterableDataset)
        if self.is_iterable:
            if shuffle not in (None, False):
                raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle "
                                 f"option, but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified sampler "
                                 f"option, but got sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified "
                                 f"batch_sampler option, but got batch_sampler={batch_sampler}")
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")

        if sampler is None:
            if self.is_iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.collate_fn = collate_fn if collate_fn is not None else (
            default_collate if batch_sampler is not None else default_convert)
        self.pin_memory = False
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        if isinstance(multiprocessing_context, str):
            multiprocessing_context = multiprocessing.get_context(multiprocessing_context)
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self._iterator = None

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def __len__(self) -> int:
        if self.is_iterable:
            n = len(self.dataset)  # TypeError when the iterable dataset has no length
            if self.batch_size is not None:
                n = n // self.batch_size if self.drop_last else -(-n // self.batch_size)
            return n
        return len(self._index_sampler)

    def __iter__(self):
        if self.num_workers == 0:
            return _SingleProcessIter(self)
        if self.persistent_workers:
            if self._iterator is None:
                self._iterator = _MultiProcessIter(self)
            else:
                self._iterator._reset(self)
            return self._iterator
        return _MultiProcessIter(self)

    def _base_seed(self) -> int:
        return int(genesis.randint(0, 2**62, (), dtype=genesis.int64,
                                   generator=self.generator).item())


class _BaseIter:
    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader
        self._is_iterable = loader.is_iterable
        self._auto_collation = loader._auto_collation
        self._collate_fn = loader.collate_fn
        self._drop_last = loader.drop_last
        self._index_sampler = loader._index_sampler
        self._sampler_iter = iter(self._index_sampler)
        # drawn by every iterator, workers or not (as torch), so that a seeded shuffle gives
        # the same order with any num_workers
        self._base_seed = loader._base_seed()
        self._num_yielded = 0

    def __iter__(self):
        return self

    def _next_index(self):
        return next(self._sampler_iter)

    def __len__(self) -> int:
        return len(self._loader)


class _SingleProcessIter(_BaseIter):
    def __init__(self, loader: DataLoader) -> None:
        super().__init__(loader)
        self._fetcher = _worker.make_fetcher(self._is_iterable, loader.dataset,
                                             self._auto_collation, self._collate_fn,
                                             self._drop_last)

    def __next__(self):
        index = self._next_index()  # StopIteration ends the epoch
        data = self._fetcher.fetch(index)
        self._num_yielded += 1
        return data


class _MultiProcessIter(_BaseIter):
    """Round-robin task dispatch to workers, in-order delivery (see the module docstring)."""

    def __init__(self, loader: DataLoader) -> None:
        super().__init__(loader)
        self._num_workers = loader.num_workers
        self._prefetch = loader.prefetch_factor
        self._timeout = loader.timeout
        self._persistent = loader.persistent_workers
        ctx = loader.multiprocessing_context or _default_context()
        self._result_queue = ctx.Queue()
        self._done_event = ctx.Event()
        self._index_queues = []
        self._workers = []
        base_seed = self._base_seed
        for wid in range(self._num_workers):
            iq = ctx.Queue()
            iq.cancel_join_thread()  # unread tasks must never block our exit
            w = ctx.Process(
                target=_worker.worker_loop,
                args=(self._is_iterable, loader.dataset, iq, self._result_queue,
                      self._done_event, self._auto_collation, self._collate_fn,
                      self._drop_last, base_seed, loader.worker_init_fn, wid,
                      self._num_workers),
                daemon=True)
            w.start()
            self._index_queues.append(iq)
            self._workers.append(w)
        self._shutdown = False
        self._reset(loader, first_iter=True)

    def _reset(self, loader: DataLoader, first_iter: bool = False) -> None:
        self._sampler_iter = iter(self._index_sampler)
        self._num_yielded = 0
        self._send_idx = 0
        self._rcvd_idx = 0
        self._task_info: dict[int, tuple] = {}  # task -> (worker,) or (worker, data)
        self._tasks_outstanding = 0
        self._workers_status = [True] * self._num_workers
        self._worker_cycle = itertools.cycle(range(self._num_workers))
        if not first_iter:  # persistent workers: tell each one a new epoch starts
            for iq in self._index_queues:
                iq.put(_worker.ResumeIteration())
            pending = self._num_workers
            while pending > 0:
                task, _ = self._get_data()
                if isinstance(task, _worker.ResumeIteration):
                    pending -= 1
        for _ in range(self._prefetch * self._num_workers):
            self._try_put_index()

    def _try_put_index(self) -> None:
        try:
            index = self._next_index()
        except StopIteration:
            return
        for _ in range(self._num_workers):
            wid = next(self._worker_cycle)
            if self._workers_status[wid]:
                break
        else:
            return  # every worker is exhausted (iterable dataset)
        self._index_queues[wid].put((self._send_idx, index))
        self._task_info[self._send_idx] = (wid,)
        self._tasks_outstanding += 1
        self._send_idx += 1

    def _get_data(self):
        """Next ``(task, data)`` from the result queue, watching for dead workers."""
        waited = 0.0
        step = min(self._timeout, 1.0) if self._timeout > 0 else 1.0
        while True:
            try:
                return self._result_queue.get(timeout=step)
            except queue.Empty:
                waited += step
                dead = [w for w in self._workers if not w.is_alive()]
                if dead:
                    pids = ", ".join(str(w.pid) for w in dead)
                    codes = ", ".join(str(w.exitcode) for w in dead)
                    self._shutdown_workers()
                    raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited unexpectedly "
                                       f"(exit code(s) {codes})") from None
                if self._timeout > 0 and waited >= self._timeout:
                    self._shutdown_workers()
                    raise RuntimeError(f"DataLoader timed out after {self._timeout} "
                                       "seconds") from None

    def __next__(self):
        while True:
            while self._rcvd_idx < self._send_idx:
                info = self._task_info[self._rcvd_idx]
                if len(info) == 2 or self._workers_status[info[0]]:
                    break
                del self._task_info[self._rcvd_idx]  # its worker stopped: nothing will come
                self._rcvd_idx += 1
            else:
                if not self._persistent:
                    self._shutdown_workers()
                raise StopIteration
            if len(self._task_info[self._rcvd_idx]) == 2:
                data = self._task_info.pop(self._rcvd_idx)[1]
                self._rcvd_idx += 1
                return self._process(data)
            idx, data = self._get_data()
            self._tasks_outstanding -= 1
            if isinstance(data, _worker.IterableDatasetStopIteration):
                self._workers_status[data.worker_id] = False
                self._try_put_index()
                continue
            if idx != self._rcvd_idx:
                self._task_info[idx] += (data,)  # early: keep it until its turn
                continue
            del self._task_info[idx]
            self._rcvd_idx += 1
            return self._process(data)

    def _process(self, data):
        self._try_put_index()
        if isinstance(data, _worker.ExceptionWrapper):
            # the workers stay up: like torch (and num_workers=0), the next `next()` goes on
            # with the following batch; they are shut down at the end or when the iterator dies
            data.reraise()
        self._num_yielded += 1
        return from_transport(data)

    def _shutdown_workers(self) -> None:
        if self._shutdown:
            return
        self._shutdown = True
        self._done_event.set()
        for iq in self._index_queues:
            try:
                iq.put(None)
            except (OSError, ValueError):
                pass
        for w in self._workers:
            w.join(timeout=5.0)
            if w.is_alive():
                w.terminate()
                w.join(timeout=1.0)
        for iq in self._index_queues:
            iq.close()
        self._result_queue.cancel_join_thread()
        self._result_queue.close()

    def __del__(self) -> None:
        if sys is None or sys.is_finalizing():
            return
        try:
            self._shutdown_workers()
        except Exception:
            pass
