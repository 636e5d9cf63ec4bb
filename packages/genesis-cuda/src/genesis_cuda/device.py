"""Devices: the current device, lazy initialisation, names and properties.

Nothing here creates a CUDA context until ``lazy_init`` runs, which happens when the first
CUDA array is made (or a stream, event or synchronisation asks for it). Queries that only
need the driver (``device_count``, ``get_device_name``, ``get_device_properties``) never
create one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from genesis_cuda import capture, driver, kernel_errors

_current_device = 0  # process-wide (torch keeps one per thread; genesis runs one per process)
_initialized: set[int] = set()
_init_lock = threading.RLock()
# called once per device on its initialisation (error word, streams, Triton ...)
_init_hooks: list = [kernel_errors.init_device]


def device_count() -> int:
    """Number of visible CUDA devices (0 without a GPU, driver or cuda-python)."""
    return driver.device_count()


def is_available() -> bool:
    """Whether at least one CUDA device can be used."""
    return driver.device_count() > 0


def current_device() -> int:
    """Ordinal of the current CUDA device (where ``'cuda'`` without an index points)."""
    return _current_device


def _index(device) -> int:
    """Turn ``None`` (current), an int, ``'cuda:1'`` or a genesis device into an ordinal."""
    if device is None:
        return _current_device
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        _, _, idx = device.partition(":")
        return int(idx) if idx else _current_device
    index = getattr(device, "index", None)
    if getattr(device, "type", "cuda") != "cuda":
        raise ValueError(f"expected a CUDA device, got {device!r}")
    return _current_device if index is None else int(index)


def set_device(device) -> None:
    """Make ``device`` (an ordinal, ``'cuda:i'`` or a genesis device) the current device.

    Example:
        >>> genesis.cuda.set_device(1)   # one process per GPU, as with torch
    """
    global _current_device
    index = driver.check_device(_index(device))
    _current_device = index
    lazy_init(index)  # as torch: the context is made now, and made current
    driver.activate(index)


def on_init(hook) -> None:
    """Call ``hook(index)`` when a device is initialised (and now for those already are)."""
    _init_hooks.append(hook)
    for index in sorted(_initialized):
        hook(index)


def lazy_init(index: int | None = None) -> int:
    """Initialise device ``index`` (default: current) on first use; returns the ordinal.

    Retains the primary context, makes it current on this thread, and runs the init hooks
    (default stream, Triton's stream/allocator hooks).
    """
    if index is None:
        index = _current_device
    if index in _initialized:
        return index
    with _init_lock:
        if index in _initialized:
            return index
        driver.check_device(index)
        with driver.using_device(index):  # restores the caller's context afterwards
            for hook in _init_hooks:
                hook(index)
        _initialized.add(index)
        if index == _current_device or driver.active_device() is None:
            driver.activate(index)  # kernels launch in the current device's context
    return index


def is_initialized(index: int | None = None) -> bool:
    """Whether genesis has initialised (created the context of) ``index`` / any device."""
    return bool(_initialized) if index is None else index in _initialized


def synchronize(device=None) -> None:
    """Wait for all work on ``device`` (default: current) to finish."""
    index = _index(device)
    capture.check_not_capturing("synchronize the device (genesis.cuda.synchronize)", index)
    if index not in _initialized:
        return  # genesis queued nothing there: do not create a context just to wait
    cu = driver.driver()
    with driver.using_device(index):
        driver.check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
    kernel_errors.raise_pending(index, whole_device=True)


def _attr(cu, dev, name: str) -> int:
    attr = getattr(cu.CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_" + name)
    return int(driver.check(cu.cuDeviceGetAttribute(attr, dev), f"cuDeviceGetAttribute({name})"))


@dataclass(frozen=True)
class DeviceProperties:
    """What ``get_device_properties`` returns (fields named as torch's)."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    l2_cache_size: int
    max_threads_per_multi_processor: int
    warp_size: int
    regs_per_multiprocessor: int
    shared_memory_per_block_optin: int
    clock_rate_khz: int
    memory_clock_rate_khz: int
    memory_bus_width: int

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, "
                f"minor={self.minor}, total_memory={self.total_memory >> 20}MB, "
                f"multi_processor_count={self.multi_processor_count}, "
                f"L2_cache_size={self.l2_cache_size >> 20}MB)")


_props: dict[int, DeviceProperties] = {}


def get_device_properties(device=None) -> DeviceProperties:
    """Name, compute capability, memory and multiprocessor count of ``device``.

    Example:
        >>> genesis.cuda.get_device_properties(0).total_memory
    """
    index = driver.check_device(_index(device))
    props = _props.get(index)
    if props is None:
        cu = driver.driver()
        dev = driver.check(cu.cuDeviceGet(index), "cuDeviceGet")
        raw = driver.check(cu.cuDeviceGetName(256, dev), "cuDeviceGetName")
        name = bytes(raw).split(b"\0", 1)[0].decode()
        total = int(driver.check(cu.cuDeviceTotalMem(dev), "cuDeviceTotalMem"))
        props = DeviceProperties(
            name=name,
            major=_attr(cu, dev, "COMPUTE_CAPABILITY_MAJOR"),
            minor=_attr(cu, dev, "COMPUTE_CAPABILITY_MINOR"),
            total_memory=total,
            multi_processor_count=_attr(cu, dev, "MULTIPROCESSOR_COUNT"),
            l2_cache_size=_attr(cu, dev, "L2_CACHE_SIZE"),
            max_threads_per_multi_processor=_attr(cu, dev, "MAX_THREADS_PER_MULTIPROCESSOR"),
            warp_size=_attr(cu, dev, "WARP_SIZE"),
            regs_per_multiprocessor=_attr(cu, dev, "MAX_REGISTERS_PER_MULTIPROCESSOR"),
            shared_memory_per_block_optin=_attr(cu, dev, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            clock_rate_khz=_attr(cu, dev, "CLOCK_RATE"),
            memory_clock_rate_khz=_attr(cu, dev, "MEMORY_CLOCK_RATE"),
            memory_bus_width=_attr(cu, dev, "GLOBAL_MEMORY_BUS_WIDTH"),
        )
        _props[index] = props
    return props


def get_device_name(device=None) -> str:
    """The marketing name of ``device``, e.g. ``'NVIDIA H200'``."""
    return get_device_properties(device).name


def get_device_capability(device=None) -> tuple[int, int]:
    """``(major, minor)`` compute capability of ``device``."""
    props = get_device_properties(device)
    return props.major, props.minor


class device:  # noqa: N801 - named like torch.cuda.device
    """Context manager that changes the current device: ``with genesis.cuda.device(1): ...``."""

    def __init__(self, device):
        self.index = -1 if device is None else _index(device)
        self.prev = None

    def __enter__(self):
        self.prev = _current_device
        if self.index >= 0 and self.index != self.prev:
            set_device(self.index)
        return self

    def __exit__(self, *exc):
        if self.index >= 0 and self.index != self.prev:
            set_device(self.prev)
        return False
