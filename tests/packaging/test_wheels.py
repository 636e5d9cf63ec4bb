"""Every distribution builds, and only genesis-core ships `genesis/__init__.py`.

The sub-package distributions (genesis-nn, genesis-llm, genesis-distributed) add folders to the
`genesis` package; a second `genesis/__init__.py` would overwrite core's on install and break
the shared package.
"""

from __future__ import annotations

import zipfile

import pytest
from scratch_venv import PACKAGES, build_wheel

DISTS = ["genesis-core", "genesis-nn", "genesis-llm", "genesis-distributed", "genesis-cuda"]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheels")
    return {dist: build_wheel(PACKAGES / dist, out) for dist in DISTS}


def _names(wheel) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def _entry_points(wheel) -> str:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt")] or [None]
        return zf.read(name).decode() if name else ""


def test_only_core_ships_genesis_init(wheels):
    owners = [dist for dist, wheel in wheels.items() if "genesis/__init__.py" in _names(wheel)]
    assert owners == ["genesis-core"]


@pytest.mark.parametrize("dist", ["genesis-nn", "genesis-llm", "genesis-distributed"])
def test_subpackage_dists_ship_only_under_genesis(wheels, dist):
    payload = [n for n in _names(wheels[dist]) if ".dist-info/" not in n]
    stray = [n for n in payload if not n.startswith("genesis/")]
    assert not stray, f"{dist} ships files outside genesis/: {stray}"


def test_cuda_ships_genesis_cuda_only(wheels):
    payload = [n for n in _names(wheels["genesis-cuda"]) if ".dist-info/" not in n]
    assert all(n.startswith("genesis_cuda/") for n in payload), payload


def test_backend_entry_points(wheels):
    assert "[genesis.backends]" in _entry_points(wheels["genesis-core"])
    assert "cpu = genesis.backends.cpu:CPUBackend" in _entry_points(wheels["genesis-core"])
    assert "cuda = genesis_cuda.backend:CUDABackend" in _entry_points(wheels["genesis-cuda"])
