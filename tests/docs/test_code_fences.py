"""Every fenced code block of the docs renders as code on the site.

pymdownx.superfences (the site's fence renderer) silently refuses a fence whose info string it
cannot parse, such as the docs tests' ```` ```python gpu ```` marker, and the strict build
passes with the block shown as a paragraph. Each page under ``docs/`` is rendered here as the
site renders it (``docs/hooks.py``'s fence rewriting, then Markdown with mkdocs.yml's
extensions), and every fence must come out as a ``<pre>`` block holding its code.
"""

from __future__ import annotations

import html
import importlib.util
import re
from pathlib import Path

import pytest

pytest.importorskip("mkdocs")
pytest.importorskip("pymdownx")

import markdown  # noqa: E402  (a dependency of mkdocs)
from mkdocs.config import load_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
_OPENING = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")
_PRE = re.compile(r"<pre[^>]*>(.*?)</pre>", re.DOTALL)
_TAG = re.compile(r"<[^>]+>")


def _hooks():
    spec = importlib.util.spec_from_file_location("genesis_docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOOKS = _hooks()


@pytest.fixture(scope="module")
def renderer():
    config = load_config(str(ROOT / "mkdocs.yml"))
    return markdown.Markdown(extensions=config["markdown_extensions"],
                             extension_configs=config["mdx_configs"])


def fences(source: str) -> list[tuple[int, str, str]]:
    """``(line, info string, first code line)`` of each fenced block of ``source``."""
    found, lines, i = [], source.splitlines(), 0
    while i < len(lines):
        match = _OPENING.match(lines[i])
        if not match:
            i += 1
            continue
        fence, indent = match["fence"], match["indent"]
        body, j = [], i + 1
        while j < len(lines) and not re.match(rf"^{indent}{re.escape(fence[0])}"
                                             rf"{{{len(fence)},}}\s*$", lines[j]):
            body.append(lines[j])
            j += 1
        first = next((line.strip() for line in body if line.strip()), "")
        found.append((i + 1, match["info"].strip(), first))
        i = j + 1
    return found


def unrendered(source: str, md: markdown.Markdown) -> list[str]:
    """The fences of ``source`` that do not render as a ``<pre>`` block holding their code."""
    md.reset()
    page = md.convert(HOOKS.code_fence_markers(source))
    blocks = [html.unescape(_TAG.sub("", block)) for block in _PRE.findall(page)]
    problems = []
    for line, info, first in fences(source):
        if not any(first in block for block in blocks):
            problems.append(f"line {line}: ```{info} does not render as code")
    return problems


def test_the_check_catches_a_fence_that_renders_as_a_paragraph(renderer):
    page = "```python\nfine = 1\n```\n\n```python gpu\ngpu_block = 2\n```\n\n" \
           "```python something\nbad = 3\n```\n"
    assert unrendered(page, renderer) == ["line 9: ```python something does not render as code"]
    renderer.reset()  # without the hook, the gpu marker breaks its fence too
    assert "<p><code>python gpu" in renderer.convert("```python gpu\nx = 1\n```\n")


def test_gpu_fences_get_a_title(renderer):
    renderer.reset()
    rendered = renderer.convert(HOOKS.code_fence_markers("```python gpu\nx = 1\n```\n"))
    assert "needs a CUDA GPU" in rendered and "<pre" in rendered


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_every_fence_renders_as_code(page, renderer):
    assert unrendered(page.read_text(), renderer) == []
