"""The tutorials' code runs: the ``python`` blocks of each ``docs/tutorials/*.md`` page are
executed in order, in one namespace per page (as a reader would paste them).

Marker convention (the fence's info string, documented in ``docs/tutorials/index.md``):

* `` ```python `` — runs everywhere, on the CPU, and must pass;
* `` ```python gpu `` — needs a CUDA GPU: runs (after the page's CPU blocks before it) where
  ``genesis.cuda.is_available()``, and is skipped elsewhere, so CI runs the CPU blocks and the
  GPU machine runs them all;
* `` ```python norun `` — never run: needs what no test machine has (downloaded model weights,
  a process launched by torchrun); keep these few and say so on the page;
* any other language (``bash``, ``toml``, ``text``) is not run.

Each page runs in a fresh temporary working directory, so files a tutorial writes go there,
and the environment variables a page sets (the multi-GPU page sets torchrun's) are restored
after it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import genesis

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def python_blocks(markdown: str, gpu: bool) -> list[tuple[int, str]]:
    """``(line number, code)`` of each block to run: ``python``, and ``python gpu`` if ``gpu``."""
    runnable = {"python", "python gpu"} if gpu else {"python"}
    blocks = []
    for match in _FENCE.finditer(markdown):
        if " ".join(match.group(1).split()) in runnable:
            line = markdown.count("\n", 0, match.start()) + 2
            blocks.append((line, match.group(2)))
    return blocks


def test_marker_convention():
    page = ("```python\na = 1\n```\n\n```python gpu\nb = 2\n```\n\n"
            "```python norun\nc = 3\n```\n\n```bash\nls\n```\n")
    assert python_blocks(page, gpu=False) == [(2, "a = 1\n")]
    assert python_blocks(page, gpu=True) == [(2, "a = 1\n"), (6, "b = 2\n")]


@pytest.mark.parametrize("page", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    environ = dict(os.environ)
    namespace = {"__name__": f"tutorial_{page.stem.replace('-', '_')}"}
    try:
        for line, code in python_blocks(page.read_text(), gpu=genesis.cuda.is_available()):
            # each block runs from a real file, as a reader's script would: Triton's @jit
            # reads its kernel's source back through inspect, which needs one
            script = tmp_path / f"{page.stem}_line{line}.py"
            script.write_text(code)
            compiled = compile(code, str(script), "exec")
            exec(compiled, namespace)  # noqa: S102  (the point of the test)
    finally:
        os.environ.clear()
        os.environ.update(environ)
