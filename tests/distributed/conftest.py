"""Fixtures of the distributed tests."""

from __future__ import annotations

import datetime

import pytest
from torch import distributed as tdist

import genesis.distributed as dist


@pytest.fixture
def world_of_one():
    """A world of one process on Gloo, through an in-memory store (what a script run
    without torchrun gets), released afterwards; yields ``genesis.distributed``."""
    dist.init_process_group("gloo", store=tdist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=10))
    yield dist
    dist.destroy_process_group()
    assert not dist.is_initialized()
