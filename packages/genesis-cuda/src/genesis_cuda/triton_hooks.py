"""Point Triton at genesis: its device, its current stream, its allocator.

Triton's CUDA driver asks torch for the current device and stream (``GPUDriver.__init__``
binds ``torch.cuda.current_device`` and torch's raw current stream). Genesis has its own
current device and streams, so those attributes of Triton's active driver are replaced
with genesis's. Kernels that need global scratch memory (TMA descriptors, split-k
workspaces) get it from ``triton.set_allocator``, which is set to genesis's caching
allocator. Installed once, when the first CUDA device is initialised.
"""

from __future__ import annotations

from genesis_cuda import device as _device
from genesis_cuda import memory, streams

_installed = False
install_error: str | None = None  # why the hooks could not be installed, if they could not


def _current_stream(device=None) -> int:
    return streams.current_handle(_device._current_device if device is None else device)


def _current_device() -> int:
    return _device._current_device


def _set_device(index) -> None:
    _device.set_device(index)


def _capability(device=None) -> tuple[int, int]:
    return _device.get_device_capability(device)


class _Aligned:
    """Scratch memory aligned beyond the allocator's 512 bytes (keeps its storage alive)."""

    __slots__ = ("storage", "ptr")

    def __init__(self, storage, alignment: int):
        self.storage = storage
        self.ptr = (storage.ptr + alignment - 1) // alignment * alignment

    def data_ptr(self) -> int:
        return self.ptr


def _scratch(size: int, alignment: int, stream) -> object:
    """Triton's allocator protocol: ``(size, alignment, stream) -> object with data_ptr()``.

    Chunks start at 512-byte boundaries, which covers the alignments Triton asks for.
    """
    alloc = memory.allocator(_device._current_device)
    handle = None if stream is None else int(stream)
    if alignment <= 512:
        return alloc.malloc(size, handle)
    return _Aligned(alloc.malloc(size + alignment, handle), alignment)


def install(index: int | None = None) -> None:
    """Install the hooks (idempotent; a device-init hook, so the argument is ignored)."""
    global _installed, install_error
    if _installed:
        return
    _installed = True
    try:
        import triton
        from triton.runtime import driver as triton_driver
    except Exception as exc:  # kernels will report it when they are used
        install_error = f"triton is not importable ({type(exc).__name__}: {exc})"
        return
    active = triton_driver.active  # a lazy proxy; setattr reaches the real driver object
    active.get_current_stream = _current_stream
    active.get_current_device = _current_device
    active.set_current_device = _set_device
    active.get_device_capability = _capability
    triton.set_allocator(_scratch)


_device.on_init(install)
