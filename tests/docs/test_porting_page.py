"""``docs/porting.md`` stays true: its table of torch spellings genesis accepts names only
API that exists, its table of torch API not (yet) provided names only API that does not, and
its Python blocks run.

Each table row starts with a torch name in backticks (``torch.nn.LSTM``); the test replaces
``torch`` by ``genesis`` and looks the name up: importing the longest importable module
prefix, then reading attributes. When a missing API is added, the failure says which row to
move.
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import genesis
from genesis.backends.registry import BackendUnavailableError

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "porting.md"
_ROW = re.compile(r"^\| `(torch(?:\.[A-Za-z_][A-Za-z0-9_]*)+)` \|", re.MULTILINE)
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def table_names(markdown: str, marker: str) -> list[str]:
    """The torch names of the table between ``<!-- marker -->`` and ``<!-- /marker -->``."""
    start, end = f"<!-- {marker} -->", f"<!-- /{marker} -->"
    assert markdown.count(start) == 1 and markdown.count(end) == 1, f"{marker} markers"
    table = markdown.split(start, 1)[1].split(end, 1)[0]
    return _ROW.findall(table)


def genesis_has(torch_name: str) -> bool:
    """Whether the genesis counterpart of ``torch_name`` (``torch.`` -> ``genesis.``) exists."""
    parts = ["genesis", *torch_name.split(".")[1:]]
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
            break
        except ImportError:
            continue
    try:
        for name in parts[cut:]:
            obj = getattr(obj, name)
    except (AttributeError, ImportError, BackendUnavailableError):
        return False
    return True


PAGE_TEXT = PAGE.read_text()
PROVIDED = table_names(PAGE_TEXT, "provided-apis")
MISSING = table_names(PAGE_TEXT, "missing-apis")


def test_the_lookup_tells_present_from_absent():
    assert genesis_has("torch.nn.Linear") and genesis_has("torch.Tensor.view")
    assert genesis_has("torch.backends.cudnn.benchmark")
    assert not genesis_has("torch.nn.NoSuchLayer") and not genesis_has("torch.no_such.module")
    assert table_names("<!-- t -->\n| `torch.a.b` | x |\n| text | y |\n<!-- /t -->", "t") == \
        ["torch.a.b"]


def test_tables_are_filled_and_rows_are_unique():
    assert len(PROVIDED) >= 20 and len(MISSING) >= 20
    rows = PROVIDED + MISSING
    assert len(rows) == len(set(rows)), [n for n in rows if rows.count(n) > 1]


def test_every_provided_torch_spelling_exists():
    absent = [name for name in PROVIDED if not genesis_has(name)]
    assert not absent, f"docs/porting.md says genesis provides these, but it does not: {absent}"


def test_every_missing_api_is_really_missing():
    present = [name for name in MISSING if genesis_has(name)]
    assert not present, ("now provided by genesis: move these rows of docs/porting.md from "
                         f"'Not (yet) provided' to the table above (or drop them): {present}")


def test_the_page_is_in_the_site_navigation():
    assert "porting.md" in (ROOT / "mkdocs.yml").read_text()


def test_the_page_code_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "porting_page", "genesis": genesis}
    gpu = genesis.cuda.is_available()
    ran = 0
    for match in _FENCE.finditer(PAGE_TEXT):
        info = " ".join(match.group(1).split())
        if info == "python" or (gpu and info == "python gpu"):
            exec(compile(match.group(2), str(PAGE), "exec"), namespace)  # noqa: S102
            ran += 1
    assert ran >= 2
    assert os.path.exists(tmp_path / "linear.safetensors")

