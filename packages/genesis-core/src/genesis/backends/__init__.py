"""Backend plugins: the contract (``Backend``) and discovery through entry points; and
torch's ``torch.backends`` switches (``genesis.backends.cuda``, ``genesis.backends.cudnn``)."""

from genesis.backends import cuda, cudnn
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
    "ENTRY_POINT_GROUP", "Backend", "BackendUnavailableError", "available", "cuda", "cudnn",
    "get_backend", "installed", "is_loaded", "register",
]
