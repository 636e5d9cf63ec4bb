"""Philox random-number generator state: a seed and a counter offset per generator.

Philox is counter-based: a kernel turns ``(seed, offset + i)`` into random bits for element
``i`` without any state on the device. The generator is therefore two host integers; each
random kernel reserves the counters it will use with ``next_offset`` before launching, so
successive calls draw independent numbers and a run is reproducible from its seed.
"""

from __future__ import annotations

import numpy as np

from genesis.backends.seed import initial_seed
from genesis_cuda import capture

_MASK64 = (1 << 64) - 1
DEFAULT_SEED = 67280421310721  # torch's default seed, for a generator made without one


class PhiloxGenerator:
    """Random state of one CUDA device: Philox ``seed`` and counter ``offset``.

    Args:
        device: the device ordinal it serves.
        seed: initial seed (a 64-bit integer).

    Example (inside a random kernel's launcher):
        >>> offset = gen.next_offset(numel)   # counters [offset, offset + numel) are ours
        >>> _random(grid, out, numel, gen.seed, offset, ...)
    """

    __slots__ = ("device", "seed", "offset")

    def __init__(self, device: int = 0, seed: int = DEFAULT_SEED):
        self.device = device
        self.seed = seed & _MASK64
        self.offset = 0

    def manual_seed(self, seed: int) -> PhiloxGenerator:
        """Restart the stream at ``seed`` (the offset goes back to 0)."""
        self.seed = int(seed) & _MASK64
        self.offset = 0
        return self

    def next_offset(self, n: int) -> int:
        """Reserve ``n`` counter values; returns the first. The next call gets fresh ones.

        Raises ``GraphCaptureError`` during CUDA graph capture: the seed and offset are
        passed to kernels as host values, so a replay would repeat the captured numbers.
        """
        capture.check_not_capturing(
            "draw random numbers (rand, randn, dropout, SDPA's dropout_p, random_ ...): "
            "genesis passes the Philox offset to kernels as a host value, so every replay "
            "would repeat the captured numbers. A model with dropout can be captured in "
            "eval() mode or with p=0 (no random numbers are drawn then)", self.device)
        offset = self.offset
        self.offset = (offset + int(n)) & _MASK64
        return offset

    def get_state(self) -> np.ndarray:
        """The state as 16 uint8 values (seed then offset, little-endian uint64s)."""
        return np.array([self.seed, self.offset], dtype="<u8").view(np.uint8).copy()

    def set_state(self, state) -> None:
        """Restore a state from ``get_state``."""
        raw = np.ascontiguousarray(np.asarray(state), dtype=np.uint8).reshape(-1)
        if raw.size != 16:
            raise ValueError(f"a CUDA generator state is 16 uint8 values, got {raw.size}")
        seed, offset = raw.view("<u8")
        self.seed, self.offset = int(seed), int(offset)

    def __repr__(self) -> str:
        return f"PhiloxGenerator(device=cuda:{self.device}, seed={self.seed}, offset={self.offset})"


_defaults: dict[int, PhiloxGenerator] = {}


def default_generator(device: int) -> PhiloxGenerator:
    """The default generator of ``device`` (created, with genesis's seed, on first use)."""
    gen = _defaults.get(device)
    if gen is None:
        gen = _defaults[device] = PhiloxGenerator(device, initial_seed())
    return gen
