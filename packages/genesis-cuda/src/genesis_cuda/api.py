"""The public ``genesis.cuda`` API: ``genesis.cuda.X`` forwards here (``public_api()``).

Devices, streams and events, random state, memory statistics, and CUDA graphs
(``CUDAGraph``, ``graph``, ``make_graphed_callables``), named as in ``torch.cuda``.

Example:
    >>> import genesis
    >>> genesis.cuda.device_count()
    >>> with genesis.cuda.stream(genesis.cuda.Stream()):
    ...     y = x * 2
    >>> genesis.cuda.memory_allocated(), genesis.cuda.max_memory_reserved()
"""

from __future__ import annotations

import genesis
from genesis.cuda import OutOfMemoryError
from genesis_cuda import driver as _driver
from genesis_cuda import generator as _generator
from genesis_cuda.array import record_stream
from genesis_cuda.capture import GraphCaptureError
from genesis_cuda.device import _index as _device_index
from genesis_cuda.device import (
    current_device,
    device,
    device_count,
    get_device_capability,
    get_device_name,
    get_device_properties,
    is_available,
    is_initialized,
    lazy_init,
    set_device,
    synchronize,
)
from genesis_cuda.graphed_callables import make_graphed_callables
from genesis_cuda.graphs import CUDAGraph, graph, graph_pool_handle, is_current_stream_capturing
from genesis_cuda.memory import (
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_history_report,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_summary,
    record_memory_history,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)
from genesis_cuda.streams import Event, Stream, current_stream, default_stream, set_stream, stream

CudaDriverError = _driver.CudaDriverError


def init() -> None:
    """Initialise the current device now instead of on first use."""
    lazy_init()


# ---------------------------------------------------------------------- random
def _as_tensor(state):
    """A generator's state array (numpy uint8) as a genesis uint8 CPU tensor."""
    return genesis.from_numpy(state)


def _as_numpy(state):
    numpy = getattr(state, "numpy", None)
    return numpy() if callable(numpy) else state


def manual_seed(seed: int) -> None:
    """Seed the random generator of the current device."""
    _generator.default_generator(current_device()).manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    """Seed the random generators of every device."""
    for index in range(device_count()):
        _generator.default_generator(index).manual_seed(seed)


def seed() -> int:
    """Seed the current device's generator with a random number; returns it."""
    import random

    s = random.getrandbits(63)
    manual_seed(s)
    return s


def initial_seed() -> int:
    """The seed of the current device's generator."""
    return _generator.default_generator(current_device()).seed


def get_rng_state(device="cuda"):
    """The random state of ``device`` (a uint8 tensor; restore with ``set_rng_state``)."""
    return _as_tensor(_generator.default_generator(_device_index(device)).get_state())


def get_rng_state_all() -> list:
    """The random states of every device."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state, device="cuda") -> None:
    """Restore a state from ``get_rng_state`` on ``device``."""
    _generator.default_generator(_device_index(device)).set_state(_as_numpy(new_state))


def set_rng_state_all(new_states) -> None:
    """Restore the states from ``get_rng_state_all``."""
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


__all__ = [
    "CudaDriverError", "CUDAGraph", "current_device", "current_stream", "default_stream",
    "device", "device_count", "empty_cache", "Event", "get_device_capability",
    "get_device_name", "get_device_properties", "get_rng_state", "get_rng_state_all",
    "graph", "graph_pool_handle", "GraphCaptureError", "init", "initial_seed",
    "is_available", "is_current_stream_capturing", "is_initialized",
    "make_graphed_callables", "manual_seed", "manual_seed_all", "max_memory_allocated",
    "max_memory_reserved", "mem_get_info", "memory_allocated", "memory_history_report",
    "memory_reserved", "memory_snapshot", "memory_stats", "memory_summary", "OutOfMemoryError",
    "record_memory_history", "record_stream", "reset_accumulated_memory_stats",
    "reset_peak_memory_stats", "seed", "set_device", "set_per_process_memory_fraction",
    "set_rng_state", "set_rng_state_all", "set_stream", "stream", "Stream", "synchronize",
]
