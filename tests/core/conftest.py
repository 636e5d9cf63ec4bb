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


@pytest.fixture(params=["cpu", pytest.param("cuda:0", marks=pytest.mark.cuda)])
def device(request) -> str:
    """'cpu' always; 'cuda:0' too (marked ``cuda``: skipped without a GPU)."""
    return request.param


@pytest.fixture(autouse=True)
def _restore_global_state():
    """Tests may flip grad mode or the default dtype; never let that leak."""
    import genesis

    dtype, grad = genesis.get_default_dtype(), genesis.is_grad_enabled()
    yield
    genesis.set_default_dtype(dtype)
    genesis.set_grad_enabled(grad)
