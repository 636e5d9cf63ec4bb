"""Random-number generators and seeding.

Each backend keeps one default generator per device; ``genesis.manual_seed`` reseeds all of
them (including those of backends loaded later), so results are reproducible from the seed
alone. ``Generator`` objects give independent streams for data shuffling and the like.
"""

from __future__ import annotations

import contextlib
import time

from genesis.backends import registry
from genesis.backends.seed import initial_seed, set_initial_seed
from genesis.device import CPU, placement
from genesis.tensor import Tensor


class Generator:
    """A random-number generator for one device.

    Args:
        device: the device whose kernels draw from it (default CPU).

    Example:
        >>> g = genesis.Generator().manual_seed(0)
        >>> genesis.rand(3, generator=g)
    """

    def __init__(self, device="cpu", *, _state=None):
        self.device = placement(device)
        backend = self.device.backend
        self._gen = _state if _state is not None else backend.new_generator(self.device.index)
        self._seed = None
        if _state is None:
            self.manual_seed(initial_seed())

    def manual_seed(self, seed: int) -> Generator:
        """Reset the stream to a pure function of ``seed``; returns self."""
        seed = int(seed) % (2**64)
        self.device.backend.manual_seed_generator(self._gen, seed)
        self._seed = seed
        return self

    def seed(self) -> int:
        """Reseed from a non-deterministic source and return the seed."""
        s = time.time_ns() % (2**63)
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self):
        """The generator state as a uint8 CPU tensor."""
        state = self.device.backend.get_generator_state(self._gen).copy()
        return Tensor._wrap(CPU.backend.from_numpy(state, None), CPU)

    def set_state(self, state) -> Generator:
        """Restore a state from ``get_state``."""
        self.device.backend.set_generator_state(self._gen, _state_bytes(state))
        return self


def _state_bytes(state):
    import numpy as np

    arr = state.numpy() if hasattr(state, "numpy") else np.asarray(state)
    if arr.dtype != np.uint8 or arr.ndim != 1:
        raise TypeError(f"RNG state must be a 1-d uint8 tensor, got {arr.dtype} {arr.shape}")
    return arr


def default_generator_for(device):
    """The backend's default generator for ``device`` (the handle kernels take)."""
    return device.backend.default_generator(device.index)


def resolve_generator(generator: Generator | None, device):
    """The backend generator handle an op on ``device`` draws from."""
    if generator is None:
        return device.backend.default_generator(device.index)
    if generator.device is not device:
        raise RuntimeError(
            f"Expected a '{device}' generator for an op on {device}, got one for "
            f"{generator.device}")
    return generator._gen


def manual_seed(seed: int) -> Generator:
    """Seed every device's default generator (CPU and any backend, now or later).

    Returns the CPU default generator.

    Args:
        seed: an int.

    Returns:
        The CPU default generator.
    """
    seed = set_initial_seed(seed)
    for backend in registry.loaded_backends():
        for index in _device_indices(backend):
            backend.manual_seed_generator(backend.default_generator(index), seed)
    return default_generator


def seed() -> int:
    """Seed every default generator from a non-deterministic source; returns the seed.

    Returns:
        The seed used (an int).
    """
    s = time.time_ns() % (2**63)
    manual_seed(s)
    return s


def _device_indices(backend) -> list:
    if backend.name == "cpu":
        return [None]
    return list(range(backend.device_count()))


def get_rng_state():
    """The CPU default generator's state as a uint8 tensor.

    Returns:
        A uint8 tensor, for ``set_rng_state``.
    """
    return default_generator.get_state()


def set_rng_state(state) -> None:
    """Restore the CPU default generator's state.

    Args:
        state: a uint8 tensor from ``get_rng_state``.
    """
    default_generator.set_state(state)


@contextlib.contextmanager
def fork_rng(devices=(), enabled: bool = True):
    """Run a block and restore the CPU (and listed devices') RNG states afterwards.

    Args:
        devices: devices (e.g. ``['cuda:0']``) whose default generators are also restored.
        enabled: False makes this a no-op.

    Yields:
        Nothing: the block runs with the generators as they were, and whatever it draws is
        undone when it ends.

    Example:
        >>> with genesis.fork_rng():
        ...     noise = genesis.randn(3)   # the default generator is restored afterwards
    """
    if not enabled:
        yield
        return
    devs = [CPU] + [placement(d) for d in devices]
    saved = [(d, d.backend.get_generator_state(default_generator_for(d))) for d in devs]
    try:
        yield
    finally:
        for d, state in saved:
            d.backend.set_generator_state(default_generator_for(d), state)


class _DefaultCPUGenerator(Generator):
    """``genesis.default_generator``: a view of the CPU backend's default generator."""

    def __init__(self):
        self.device = CPU
        self._seed = None

    @property
    def _gen(self):
        return CPU.backend.default_generator(None)

    def manual_seed(self, seed: int) -> Generator:
        self._seed = int(seed) % (2**64)
        CPU.backend.manual_seed_generator(self._gen, self._seed)
        return self

    def initial_seed(self) -> int:
        return initial_seed() if self._seed is None else self._seed


default_generator = _DefaultCPUGenerator()
