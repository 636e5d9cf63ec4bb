"""docs/backends.md against the class it documents: ``genesis.backends.base.Backend``.

The page lists the contract in two sections, the required core and the optional kernels, one
table row per method with its parameters. These tests read those rows back and compare them
with the abstract and the concrete methods of ``Backend``, so the page cannot drift from the
code; and they check that the toy plugin, which the op table runs on, implements only the core.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import pytest

from genesis.backends.base import OPTIONAL, REQUIRED, Backend

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "backends.md"
TOY_SRC = Path(__file__).resolve().parent / "toy_plugin" / "src"
ROW = re.compile(r"^\| `([a-z_]+)\(([^)]*)\)`", re.MULTILINE)


def _section(text: str, heading: str) -> str:
    """The text under the ``## heading`` up to the next level-2 heading."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def _documented(heading: str) -> dict[str, tuple[str, ...]]:
    """method name -> parameter names, from the table rows of one section."""
    rows = {}
    for name, params in ROW.findall(_section(DOC.read_text(), heading)):
        assert name not in rows, f"docs/backends.md lists {name} twice under {heading!r}"
        rows[name] = tuple(p.strip() for p in params.split(",") if p.strip())
    return rows


def _parameters(name: str) -> tuple[str, ...]:
    method = vars(Backend)[name]
    params = list(inspect.signature(getattr(method, "__func__", method)).parameters)
    return tuple(params[1:])  # without self (or cls)


@pytest.mark.parametrize(("heading", "expected"), [
    ("The required core", REQUIRED), ("Optional kernels and their composite defaults", OPTIONAL)])
def test_doc_lists_each_method_with_its_parameters(heading, expected):
    documented = _documented(heading)
    missing = sorted(set(expected) - set(documented))
    extra = sorted(set(documented) - set(expected))
    assert not missing and not extra, (
        f"docs/backends.md section {heading!r} vs base.py: missing {missing}, not in this part "
        f"of the contract {extra}")
    for name, params in documented.items():
        assert params == _parameters(name), (
            f"docs/backends.md documents {name}({', '.join(params)}); base.py declares "
            f"{name}({', '.join(_parameters(name))})")


def test_doc_counts_match_the_class():
    text = DOC.read_text()
    assert f"these {len(REQUIRED)} methods" in _section(text, "The required core")
    assert f"These {len(OPTIONAL)} methods" in _section(
        text, "Optional kernels and their composite defaults")


def test_required_core_stays_small_and_every_method_is_documented():
    assert len(REQUIRED) <= 30, f"the required core grew to {len(REQUIRED)}: {REQUIRED}"
    for name in REQUIRED + OPTIONAL:
        assert inspect.getdoc(getattr(Backend, name)), f"Backend.{name} has no docstring"
    for name in REQUIRED:
        assert not inspect.getdoc(getattr(Backend, name)).startswith("*Optional.*"), name


def test_toy_plugin_implements_only_the_required_core(monkeypatch):
    monkeypatch.syspath_prepend(str(TOY_SRC))
    sys.modules.pop("genesis_toy.backend", None)
    from genesis_toy.backend import ToyBackend

    overridden = {name for name in OPTIONAL if inspect.getattr_static(ToyBackend, name) is not
                  inspect.getattr_static(Backend, name)}
    # memory_stats only reports numbers; every kernel of the optional part runs the composite
    assert overridden <= {"memory_stats"}, sorted(overridden)
    assert ToyBackend._kernels == {}, "the toy backend registers no fused kernels"
    assert not ToyBackend.__abstractmethods__
