"""MkDocs hook: links from a page to repository files outside ``docs/`` become plain text, and
the docs tests' fence markers (```` ```python gpu ````, ```` ```python norun ````) render as code.

Pages such as ``backends.md`` link to source files (``../packages/.../base.py``) so that they
read well on a code host. The site has no copy of those files, so the hook replaces each such
link by its text. Only links whose target exists in the repository are rewritten: a link to a
missing file stays as it is, and the strict build reports it.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from pathlib import Path

_API_MARKER = "<!-- public-api -->"

# The marker after a fence's language (tests/docs/test_tutorial_code.py runs blocks by it) is a
# bare word to pymdownx.superfences, which refuses the fence and leaves a paragraph; the hook
# turns a `gpu` marker into the block's title and drops a `norun` one before Markdown runs.
# tests/docs/test_code_fences.py renders every page this way and checks every fence is code.
_MARKED_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})python[ \t]+(?P<marker>gpu|norun)[ \t]*$",
    re.MULTILINE)
_MARKER_TITLES = {"gpu": ' title="needs a CUDA GPU (genesis-cuda)"', "norun": ""}

_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")


def _api_names_module(docs_dir: Path):
    path = docs_dir / "api_names.py"
    spec = importlib.util.spec_from_file_location("genesis_docs_api_names", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _defined_at(obj) -> str | None:
    """``module.qualname`` of ``obj`` when griffe can collect it there, else None.

    Griffe cannot collect from ``genesis/__init__.py`` (it reads ``genesis`` as a namespace),
    nor objects that are not attributes of their module.
    """
    if obj.__module__ == "genesis":
        return None
    module = sys.modules.get(obj.__module__)
    found = module
    for part in obj.__qualname__.split("."):
        found = getattr(found, part, None)
    return f"{obj.__module__}.{obj.__qualname__}" if found is obj else None


def _docstring_markdown(doc: str) -> str:
    """A Google-style docstring as Markdown: sections in bold, ``Args:`` entries as a list."""
    doc = doc.replace("``", "`")
    out, section = [], None
    for line in doc.splitlines():
        header = re.fullmatch(r"([A-Z][A-Za-z ]*):", line.strip())
        if header and not line.startswith(" "):
            section = header.group(1)
            out += ["", f"**{section}:**", ""]
            continue
        entry = re.fullmatch(r" {4}(\*{0,2}\w+): (.*)", line)
        if section == "Args" and entry:
            out.append(f"- `{entry.group(1)}`: {entry.group(2)}")
        else:
            out.append(line.strip())
    return "\n".join(out) + "\n"


def _plain_entry(heading: str, name: str, obj) -> str:
    """Markdown for an object griffe cannot reach: made at run time from a table (the
    elementwise ops of ``genesis.op_declarations``), it is not an attribute of its module."""
    try:
        signature = f"{name}{inspect.signature(obj)}"
    except (TypeError, ValueError):
        signature = name
    title = f"## `{heading}` {{ #{heading} data-toc-label='{name}' }}"
    body = _docstring_markdown(inspect.getdoc(obj) or "")
    return f"{title}\n\n```python\n{signature}\n```\n\n{body}"


def _api_block(module_name: str, objects: list[tuple[str, object]]) -> str:
    """Markdown for ``objects``: a mkdocstrings block each, collected where it is defined.

    ``genesis`` is a pkgutil-style namespace package, which griffe reads as a namespace (no
    ``__init__`` members), so each name is rendered from its defining module and headed with
    its public name (``genesis.clip`` shows ``clamp``'s docstring under ``clip``).
    """
    blocks = []
    for name, obj in objects:
        heading = f"{module_name}.{name}"
        path = _defined_at(obj)
        if path is None:
            blocks.append(_plain_entry(heading, name, obj))
            continue
        blocks.append(
            f"::: {path}\n"
            "    options:\n"
            "      force_inspection: true\n"
            f'      heading: "{heading}"\n'
            f'      toc_label: "{name}"\n'
        )
    return "\n".join(blocks)


def code_fence_markers(markdown: str) -> str:
    """``markdown`` with each ```` ```python gpu ````/```` ```python norun ```` fence opening
    rewritten as a plain ```` ```python ```` fence (a ``gpu`` block gets a title saying so)."""
    return _MARKED_FENCE.sub(
        lambda m: f"{m['indent']}{m['fence']}python{_MARKER_TITLES[m['marker']]}", markdown)


def on_page_markdown(markdown, page, config, files):
    """Fill an API page's marker; make links to repository files outside ``docs/`` plain text.

    An API page (listed in ``api_names.API_MODULES``) holds the marker ``<!-- public-api -->``,
    replaced here by a mkdocstrings block of its module's public names. The docs tests' fence
    markers are made plain fences (``code_fence_markers``).
    """
    markdown = code_fence_markers(markdown)
    docs_dir = Path(config["docs_dir"]).resolve()
    repo_root = docs_dir.parent
    page_dir = (docs_dir / page.file.src_path).parent
    if _API_MARKER in markdown:
        api = _api_names_module(docs_dir)
        module_name = api.API_MODULES[page.file.src_path]
        objects = api.documented_objects(module_name)
        markdown = markdown.replace(_API_MARKER, _api_block(module_name, objects))

    def replace(match: re.Match) -> str:
        target = match.group(2)
        if "://" in target or target.startswith("mailto:"):
            return match.group(0)
        resolved = (page_dir / target).resolve()
        inside_docs = resolved == docs_dir or docs_dir in resolved.parents
        if inside_docs or repo_root not in resolved.parents or not resolved.exists():
            return match.group(0)
        return match.group(1)

    return _LINK.sub(replace, markdown)
