"""The documentation site builds in strict mode (any MkDocs warning fails), as ``hatch run
docs:build`` does. Skipped when MkDocs, Material or mkdocstrings is not installed (the ``test``
environment of hatch.toml installs them, so CI runs it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("mkdocs")
pytest.importorskip("material")
pytest.importorskip("mkdocstrings_handlers.python")


def test_mkdocs_build_strict(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for page in ("index.html", "api/genesis/index.html", "tutorials/cnn/index.html"):
        assert (tmp_path / page).is_file(), f"{page} was not built"
    # The hook renders every public name under its public heading, through mkdocstrings or
    # (for the table-made elementwise ops) as plain Markdown; a dropped name would vanish.
    functional = (tmp_path / "api/functional/index.html").read_text()
    assert "genesis.nn.functional.scaled_dot_product_attention" in functional
    assert 'id="genesis.abs"' in (tmp_path / "api/genesis/index.html").read_text()
