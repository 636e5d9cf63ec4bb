"""Import one of the repository's tool scripts (``tools/bench/*.py``, ``tools/device/*.py``)
as a module, for the tests of ``tests/tools``: the scripts are not in a package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_tool(path: str, name: str):
    """The script at ``path`` (from the repository root), run as the module ``name``.

    Args:
        path: e.g. ``"tools/bench/overhead.py"``.
        name: the module's name; it is put in ``sys.modules`` (dataclasses look their
            module up there).

    Returns:
        The module.

    Example:
        >>> bench = load_tool("tools/bench/host_step.py", "bench_host_step")
        >>> bench.main(["--steps", "2"])
    """
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
