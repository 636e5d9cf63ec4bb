"""The public names of each documented module: one rule for the API pages and their test.

A module's public names are its ``__all__`` when it has one; otherwise every attribute not
starting with ``_`` except modules and objects brought in from outside genesis (``extend_path``
from pkgutil, ``annotations`` from ``__future__``). The hook (``docs/hooks.py``) renders these
names on the API pages, and ``tests/docs/test_docstrings.py`` checks their docstrings.
"""

from __future__ import annotations

import importlib
import inspect

# Each API page: (page under docs/, module).
API_MODULES = {
    "api/genesis.md": "genesis",
    "api/nn.md": "genesis.nn",
    "api/functional.md": "genesis.nn.functional",
    "api/optim.md": "genesis.optim",
    "api/distributions.md": "genesis.distributions",
    "api/checkpoint.md": "genesis.utils.checkpoint",
    "api/amp.md": "genesis.amp",
    "api/models.md": "genesis.models",
    "api/distributed.md": "genesis.distributed",
    "api/fsdp.md": "genesis.distributed.fsdp",
    "api/cuda.md": "genesis.cuda",
    "api/dispatch.md": "genesis.dispatch",
    "api/compile.md": "genesis.compiler",
}

_OWN_PACKAGES = ("genesis", "genesis_cuda")


def _is_own(obj) -> bool:
    module = getattr(obj, "__module__", None)
    if module is None:  # instances (dtypes, generators): their class says where they are from
        module = type(obj).__module__
    return module.split(".")[0] in _OWN_PACKAGES


def public_names(module_name: str) -> list[str]:
    """The sorted public names of ``module_name`` by the rule in this module's docstring."""
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is not None:
        return sorted(names)
    return sorted(
        name
        for name, obj in vars(module).items()
        if not name.startswith("_") and not inspect.ismodule(obj) and _is_own(obj)
    )


def documented_objects(module_name: str) -> list[tuple[str, object]]:
    """``(name, object)`` for the public functions and classes of ``module_name``.

    Other public values (dtypes such as ``genesis.float32``, ``default_generator``) are
    instances: their docstring is their class's, checked where the class is public.
    """
    module = importlib.import_module(module_name)
    pairs = [(name, getattr(module, name)) for name in public_names(module_name)]
    return [(n, o) for n, o in pairs if inspect.isclass(o) or inspect.isroutine(o)]
