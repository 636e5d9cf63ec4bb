"""``genesis.utils``: helpers that are not part of the tensor core (``genesis.utils.data``,
``genesis.utils.checkpoint``).

Shipped by genesis-nn. The package path is extended pkgutil-style so another distribution
could add its own ``genesis.utils.<name>`` sub-packages next to these.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)


def __getattr__(name: str):
    # `genesis.utils.data` after `import genesis`, as `torch.utils.data` after `import torch`
    if name in ("data", "checkpoint"):
        import importlib

        return importlib.import_module(f"genesis.utils.{name}")
    raise AttributeError(f"module 'genesis.utils' has no attribute {name!r}")
