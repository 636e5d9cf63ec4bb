"""Backend plugins: the contract (``Backend``) and discovery through entry points."""

from genesis.backends.base import Backend
from genesis.backends.registry import (
    ENTRY_POINT_GROUP,
    BackendUnavailableError,
    available,
    get_backend,
    installed,
    is_loaded,
    register,
)

__all__ = [
    "ENTRY_POINT_GROUP", "Backend", "BackendUnavailableError", "available", "get_backend",
    "installed", "is_loaded", "register",
]
