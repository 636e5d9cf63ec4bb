"""The process-wide seed of the default generators, held at the contract layer.

``genesis.manual_seed`` (``genesis/random.py``) sets it; a backend reads it when it creates a
device's default generator (``Backend.default_generator``), so a generator made after the
seeding starts from the same seed as the ones it reseeded. It lives here, below both, so a
backend never imports the public ``genesis.random`` module above the contract.
"""

from __future__ import annotations

import time

_seed = int(time.time_ns() % (2**63))  # non-deterministic until genesis.manual_seed


def initial_seed() -> int:
    """The seed the default generators were last seeded with.

    Returns:
        An int in ``[0, 2**64)``.
    """
    return _seed


def set_initial_seed(seed: int) -> int:
    """Make ``seed`` (reduced modulo 2**64) the default generators' seed; returns it.

    Args:
        seed: an int.

    Returns:
        The stored seed.
    """
    global _seed
    _seed = int(seed) % (2**64)
    return _seed
