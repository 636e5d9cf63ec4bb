"""``genesis.cuda``: CUDA device queries, answered by the genesis-cuda plugin when installed.

``is_available()``, ``device_count()`` and ``is_bf16_supported()`` work without the plugin
(False / 0 / False). Every other name (``Stream``, ``memory_allocated``, ``synchronize`` ...)
is forwarded to the plugin's public API and raises a clear error when the plugin is missing.

``genesis.cuda.amp`` (torch's deprecated ``torch.cuda.amp.autocast`` and ``GradScaler``) is a
sub-module shipped by genesis-nn, which owns ``GradScaler``: this package's path is extended
pkgutil-style so that genesis-nn's ``genesis/cuda/amp.py`` is found, and the name is looked
up on first use, as ``genesis.nn`` is on ``genesis``.
"""

from __future__ import annotations

# genesis-nn adds `genesis/cuda/amp.py`, possibly from its own (editable) src folder.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from importlib import import_module as _import_module  # noqa: E402

from genesis.backends import registry  # noqa: E402

# Sub-modules of `genesis.cuda` that other distributions add, and the distribution to install.
_SUBMODULES = {"amp": "genesis-nn"}


class OutOfMemoryError(RuntimeError):
    """A CUDA allocation failed even after the allocator freed its cache and retried."""


def _backend_or_none():
    if "cuda" not in registry.installed():
        return None
    try:
        return registry.get_backend("cuda")
    except registry.BackendUnavailableError:
        return None


def is_available() -> bool:
    """True when the CUDA plugin is installed, loads, and sees at least one GPU.

    Returns:
        A Python bool (never raises).
    """
    backend = _backend_or_none()
    return bool(backend is not None and backend.is_available())


def device_count() -> int:
    """Number of visible CUDA devices (0 without the plugin or without a GPU).

    Returns:
        An int (never raises).
    """
    backend = _backend_or_none()
    return backend.device_count() if backend is not None else 0


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether the current CUDA device computes in bfloat16 (compute capability 8.0 or newer).

    genesis's CUDA kernels are Triton kernels, which need an Ampere or newer GPU for
    bfloat16; there is no emulated bfloat16, so ``including_emulation`` changes nothing.

    Args:
        including_emulation: accepted for PyTorch compatibility.

    Returns:
        A Python bool: False without the plugin or without a GPU (never raises).

    Example:
        >>> dtype = genesis.bfloat16 if genesis.cuda.is_bf16_supported() else genesis.float16
    """
    backend = _backend_or_none()
    if backend is None or not backend.is_available():
        return False
    major, _minor = backend.public_api().get_device_capability()
    return major >= 8


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _SUBMODULES:
        try:
            return _import_module(f"genesis.cuda.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"genesis.cuda.{name}":
                raise  # the module is there but one of its own imports failed
            raise AttributeError(
                f"module 'genesis.cuda' has no attribute {name!r}: genesis.cuda.{name} is "
                f"provided by the {_SUBMODULES[name]} distribution, which is not installed "
                f"(pip install {_SUBMODULES[name]})", name=name) from None
    api = registry.get_backend("cuda").public_api()  # raises the "install genesis-cuda" error
    try:
        return getattr(api, name)
    except AttributeError:
        raise AttributeError(f"genesis.cuda has no attribute {name!r}") from None
