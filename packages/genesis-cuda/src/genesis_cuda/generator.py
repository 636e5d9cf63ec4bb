"""Philox random-number generator state: a seed and a counter offset per generator.

Philox is counter-based: a kernel turns ``(seed, offset + i)`` into random bits for element
``i`` without any state on the device. The generator is therefore two host integers; each
random kernel reserves the counters it will use with ``next_offset`` before launching, so
successive calls draw independent numbers and a run is reproducible from its seed.

Inside a CUDA graph the offset cannot be a host value (every replay would repeat the
captured numbers), so the random fill kernels read seed and offset from device memory
instead: ``CapturedPhilox`` is that memory for one generator and one graph. During the
capture each fill reserves its counters *relative* to the graph's start
(``CapturedPhilox.reserve``); before each replay ``advance`` reserves the graph's whole
span from the generator on the host and writes ``(seed, first counter)`` into the device
state with two stream-ordered memsets, so replay ``k`` draws the numbers an eager run's
``k``-th step would get from a generator advanced by the same amount.
"""

from __future__ import annotations

import numpy as np

from genesis import dtypes as D
from genesis.backends.seed import initial_seed
from genesis_cuda import array, capture, driver

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

        Raises ``GraphCaptureError`` during CUDA graph capture: a caller of this method
        passes the offset to its kernel as a host value, so a replay would repeat the
        captured numbers (the random fills use ``CapturedPhilox`` there instead).
        """
        capture.check_not_capturing(
            "draw random numbers in a fused kernel (SDPA's dropout_p ...): it takes the "
            "Philox offset as a host value, so every replay would repeat the captured "
            "numbers. Capture the model in eval() mode or with dropout_p=0 (random fills "
            "such as rand, randn and F.dropout can be captured)", self.device)
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


class CapturedPhilox:
    """The device-side seed and offset of ``gen`` for one captured CUDA graph.

    ``state`` is an int64 pair ``(seed, offset)`` on the device (allocated in the graph's
    pool, during its capture). Kernels captured with it compute counter ``offset + base +
    i`` where ``base`` comes from ``reserve`` at capture time.

    Example (``graphs.CUDAGraph`` does this):
        >>> cap = CapturedPhilox(gen)          # during capture
        >>> base = cap.reserve(numel)          # a random kernel's counters, relative
        >>> cap.advance(stream_handle)         # before every replay
    """

    __slots__ = ("gen", "state", "used")

    def __init__(self, gen: PhiloxGenerator):
        self.gen = gen
        self.state = array.empty((2,), D.int64, gen.device)
        self.used = 0

    def reserve(self, n: int) -> int:
        """Reserve ``n`` counters of each replay; returns their first, relative to the
        replay's start."""
        base = self.used
        self.used += int(n)
        return base

    def advance(self, stream: int) -> None:
        """Before a replay: take the graph's counters from the generator and write
        ``(seed, first counter)`` into ``state`` on ``stream`` (not during a capture)."""
        gen = self.gen
        offset = gen.offset
        gen.offset = (offset + self.used) & _MASK64
        cu = driver.driver()
        ptr = self.state.data_ptr()
        for i, word in enumerate((gen.seed & 0xFFFFFFFF, gen.seed >> 32,
                                  offset & 0xFFFFFFFF, offset >> 32)):
            driver.check(cu.cuMemsetD32Async(ptr + 4 * i, word, 1, stream),
                         "cuMemsetD32Async")
