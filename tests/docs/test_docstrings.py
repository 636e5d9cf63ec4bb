"""Every public name of the documented modules has a docstring the API reference can use.

The public names are those of ``docs/api_names.py`` (``__all__``, or the public attributes
of modules without one), the same names the API pages render. For each public function or
class (other public values, such as the dtypes, are instances documented by their class):

1. **Summary**: its own ``__doc__`` (not inherited) is non-empty and its first line is a
   summary of at most 100 characters.
2. **Args**: a function with parameters (other than ``self``/``cls`` and private ones whose
   names start with ``_``, such as torch's ``_stacklevel``) has a Google-style ``Args:``
   section describing every such parameter, and nothing else: each entry (a line at the
   section's first indentation) is ``name:``, ``name (type):`` or, for parameters that share
   a description, ``name1, name2:``; ``*args``/``**kwargs`` may keep their stars. An entry
   naming something that is not a parameter fails too (a renamed argument whose docstring
   was not updated).
3. **Returns**: a function has a ``Returns:`` or ``Yields:`` section, unless its return
   annotation is ``None``.

Classes need only rule 1 (their constructor arguments are described on the class or in
``__init__``, which mkdocstrings merges).
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_SUMMARY = 100


def _api_names():
    spec = importlib.util.spec_from_file_location("api_names", ROOT / "docs" / "api_names.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


API = _api_names()
MODULES = sorted(set(API.API_MODULES.values()))


def _objects():
    for module_name in MODULES:
        for name, obj in API.documented_objects(module_name):
            yield f"{module_name}.{name}", obj


def _section(doc: str, title: str) -> str | None:
    """The indented body of the Google-style section ``title`` in ``doc``, or None."""
    match = re.search(rf"^{title}:\s*$\n((?:^(?:[ \t]+.*)?\n?)*)", doc, re.MULTILINE)
    return match.group(1) if match else None


_ENTRY = re.compile(r"(\**\w+(?:\s*,\s*\**\w+)*)\s*(?:\([^)]*\))?:(?:\s|$)")


def _entry_names(section: str) -> set[str]:
    """The parameter names of an ``Args:`` body's entries (lines at its first indentation)."""
    lines = [line for line in section.splitlines() if line.strip()]
    if not lines:
        return set()
    indent = min(len(line) - len(line.lstrip()) for line in lines)
    names = set()
    for line in lines:
        if len(line) - len(line.lstrip()) == indent:
            match = _ENTRY.match(line.strip())
            if match:
                names.update(n.strip().lstrip("*") for n in match.group(1).split(","))
    return names


def _parameters(obj) -> list[inspect.Parameter]:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    return [p for p in signature.parameters.values()
            if p.name not in ("self", "cls") and not p.name.startswith("_")]


def summary_problems(obj) -> list[str]:
    doc = obj.__doc__
    if not doc or not doc.strip():
        return ["no docstring"]
    summary = inspect.cleandoc(doc).splitlines()[0].strip()
    if not summary:
        return ["the first line is empty (no summary line)"]
    if len(summary) > MAX_SUMMARY:
        return [f"summary line longer than {MAX_SUMMARY} characters"]
    return []


def section_problems(obj) -> list[str]:
    """Rules 2 and 3 for a function (classes have none)."""
    if inspect.isclass(obj):
        return []
    doc = inspect.cleandoc(obj.__doc__ or "")
    problems = []
    params = _parameters(obj)
    if params:
        args = _section(doc, "Args")
        if args is None:
            problems.append("no Args: section")
        else:
            described = _entry_names(args)
            names = {p.name for p in params}
            problems += [f"Args: does not describe {p.name!r}" for p in params
                         if p.name not in described]
            problems += [f"Args: describes {n!r}, which is not a parameter"
                         for n in sorted(described - names) if not n.startswith("_")]
    try:
        returns_none = inspect.signature(obj).return_annotation in (None, "None")
    except (TypeError, ValueError):
        returns_none = False
    if not returns_none and _section(doc, "Returns") is None and _section(doc, "Yields") is None:
        problems.append("no Returns: (or Yields:) section")
    return problems


OBJECTS = dict(_objects())


@pytest.mark.parametrize("qualified", sorted(OBJECTS))
def test_has_summary(qualified):
    problems = summary_problems(OBJECTS[qualified])
    assert not problems, f"{qualified}: {'; '.join(problems)}"


@pytest.mark.parametrize(
    "qualified", sorted(q for q, o in OBJECTS.items() if not inspect.isclass(o)))
def test_has_args_and_returns(qualified):
    problems = section_problems(OBJECTS[qualified])
    assert not problems, f"{qualified}: {'; '.join(problems)}"


def test_the_checks_can_fail():
    def bare(x, y=1):
        pass

    def documented(x, *rest) -> int:
        """Add things.

        Args:
            x (int): the first.
            *rest: the others.

        Returns:
            The sum.
        """

    assert summary_problems(bare) == ["no docstring"]
    bare.__doc__ = "\n  Text after an empty first line."
    assert summary_problems(bare) == []  # cleandoc drops leading blank lines
    bare.__doc__ = "Summary.\n\nArgs:\n    x: the value,\n        y: not an entry.\n"
    assert section_problems(bare) == [
        "Args: does not describe 'y'",
        "no Returns: (or Yields:) section",
    ]
    bare.__doc__ = "Summary.\n\nArgs:\n    x, y: values.\n    z: gone.\n\nReturns:\n    None.\n"
    assert section_problems(bare) == ["Args: describes 'z', which is not a parameter"]
    assert section_problems(documented) == []
    assert summary_problems(documented) == []
