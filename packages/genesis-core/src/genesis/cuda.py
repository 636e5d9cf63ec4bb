"""``genesis.cuda``: CUDA device queries, answered by the genesis-cuda plugin when installed.

``is_available()`` and ``device_count()`` work without the plugin (False / 0). Every other
name (``Stream``, ``memory_allocated``, ``synchronize`` ...) is forwarded to the plugin's
public API and raises a clear error when the plugin is missing.
"""

from __future__ import annotations

from genesis.backends import registry


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


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    api = registry.get_backend("cuda").public_api()  # raises the "install genesis-cuda" error
    try:
        return getattr(api, name)
    except AttributeError:
        raise AttributeError(f"genesis.cuda has no attribute {name!r}") from None
