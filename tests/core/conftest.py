"""Fixtures of the core suite: the ``device`` every table-driven test runs on.

The op table (``op_table.py``) lives next to this file; it is put on ``sys.path`` here so
test modules import it by name under ``--import-mode=importlib`` (no ``__init__.py``).
"""

from __future__ import annotations

import os
import sys

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


_TOY_SRC = os.path.join(_HERE, os.pardir, "backends", "toy_plugin", "src")


def _register_toy_backend() -> None:
    """The contract tests' toy backend (device 'toy'): CPU kernels behind wrapped arrays, so
    an op that builds a helper tensor on the CPU, or hands a CPU array to another device's
    kernels, fails on it — the device-agnosticism check that runs without a GPU."""
    from genesis.backends import registry

    if registry.is_loaded("toy"):
        return
    if _TOY_SRC not in sys.path:
        sys.path.insert(0, _TOY_SRC)
    from genesis_toy.backend import ToyBackend

    registry.register("toy", ToyBackend())


@pytest.fixture(params=["cpu", "toy:0", pytest.param("cuda:0", marks=pytest.mark.cuda)])
def device(request) -> str:
    """'cpu' and 'toy:0' (a CPU-delegating plugin device) always; 'cuda:0' too (marked
    ``cuda``: skipped without a GPU)."""
    if request.param.startswith("toy"):
        _register_toy_backend()
    return request.param


@pytest.fixture(autouse=True)
def _restore_global_state():
    """Tests may flip grad mode or the default dtype; never let that leak."""
    import genesis

    dtype, grad = genesis.get_default_dtype(), genesis.is_grad_enabled()
    yield
    genesis.set_default_dtype(dtype)
    genesis.set_grad_enabled(grad)
