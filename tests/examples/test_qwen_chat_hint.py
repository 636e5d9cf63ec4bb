"""The main demo's closing hint is a command that works in the README's setup.

``genesis-chat`` is installed inside the hatch environment only, so the demo must print the
``hatch run demo:chat`` form, and the README must give the same command. (That the demo prints
``chat_command`` last is checked by ``tests/llm/test_apps_demo.py``, which runs it.)
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "qwen_arithmetic.py"

pytest.importorskip("transformers")  # the example imports genesis.models


def _example():
    spec = importlib.util.spec_from_file_location("genesis_example_qwen_hint", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_chat_hint_uses_hatch_and_matches_readme():
    command = _example().chat_command(Path("runs/qwen_arithmetic/model"))
    assert command.startswith("python3 -m hatch run demo:chat ")
    assert "genesis-chat" not in command
    assert f"`{command}`" in (ROOT / "README.md").read_text()
    hatch = tomllib.loads((ROOT / "hatch.toml").read_text())
    assert hatch["envs"]["demo"]["scripts"]["chat"].startswith("genesis-chat ")

