"""Finding and loading backends through the ``genesis.backends`` entry-point group.

Nothing here runs at ``import genesis``: entry points are read on the first request for a
device type that is not loaded yet, and a plugin's module is imported only then.
"""

from __future__ import annotations

from importlib import metadata

from genesis.backends.base import Backend

ENTRY_POINT_GROUP = "genesis.backends"

# Packages that provide well-known device types, for the "not installed" message.
KNOWN_PLUGINS = {"cuda": "genesis-cuda"}

_loaded: dict[str, Backend] = {}
_entry_points: dict[str, metadata.EntryPoint] | None = None


class BackendUnavailableError(RuntimeError):
    """A device type has no installed backend, or its plugin failed to load."""


def _discover() -> dict[str, metadata.EntryPoint]:
    global _entry_points
    if _entry_points is None:
        _entry_points = {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    return _entry_points


def refresh() -> None:
    """Forget the entry-point scan (after installing a plugin into a running process)."""
    global _entry_points
    _entry_points = None


def installed() -> list[str]:
    """Names of every device type with a registered backend plugin (none are loaded)."""
    return sorted(set(_discover()) | set(_loaded))


def available() -> list[str]:
    """Device types whose backend loads and reports at least one usable device.

    Loads each installed plugin (never at ``import genesis``, only when asked).
    """
    names = []
    for name in installed():
        try:
            backend = get_backend(name)
        except BackendUnavailableError:
            continue
        if backend.is_available():
            names.append(name)
    return names


def is_loaded(name: str) -> bool:
    """Whether the backend for ``name`` has been imported already."""
    return name in _loaded


def loaded_backends() -> list[Backend]:
    """Backends imported so far."""
    return list(_loaded.values())


def register(name: str, backend: Backend) -> None:
    """Register a backend instance directly (for tests and embedding; plugins use the
    entry-point group)."""
    if not isinstance(backend, Backend):
        raise TypeError(f"register({name!r}, ...) needs a genesis.backends.Backend, "
                        f"got {type(backend).__name__}")
    _loaded[name] = backend


def get_backend(name: str) -> Backend:
    """The backend serving device type ``name``, loading its plugin on first use.

    Raises:
        BackendUnavailableError: no plugin provides ``name``, or the plugin failed to load
            (the message names the distribution and the underlying error).
    """
    backend = _loaded.get(name)
    if backend is not None:
        return backend
    ep = _discover().get(name)
    if ep is None:
        hint = KNOWN_PLUGINS.get(name)
        have = ", ".join(installed()) or "none"
        if hint:
            raise BackendUnavailableError(
                f"no genesis backend for device type '{name}' is installed; install it with "
                f"`pip install {hint}` (installed backends: {have})")
        # not a device type anyone ships: say so first (a typo like 'gpu' or a dtype name
        # is far likelier than a missing third-party plugin)
        raise BackendUnavailableError(
            f"'{name}' is not a valid device type: no installed genesis backend provides it "
            f"(installed backends: {have}). A plugin adds a device type by registering it "
            f"under the '{ENTRY_POINT_GROUP}' entry-point group")
    dist = ep.dist.name if ep.dist is not None else "an unknown distribution"
    try:
        backend_cls = ep.load()
        backend = backend_cls()
    except Exception as exc:  # a plugin may fail in any way; report which and why
        raise BackendUnavailableError(
            f"the genesis backend '{name}' from distribution '{dist}' failed to load "
            f"({ep.value}): {type(exc).__name__}: {exc}") from exc
    if not isinstance(backend, Backend):
        raise BackendUnavailableError(
            f"entry point '{name}' of distribution '{dist}' gave {type(backend).__name__}, "
            "which is not a genesis.backends.Backend")
    register(name, backend)
    return backend
