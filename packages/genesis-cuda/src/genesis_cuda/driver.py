"""cuda-python driver access: lazy initialisation, error checking, primary contexts.

Everything that talks to the CUDA driver goes through this module. Importing it touches
nothing: ``cuda.bindings.driver`` is imported, and ``cuInit`` called, on the first call of
``init()`` (or of ``device_count()``). Each device uses its *primary* context, the one the
CUDA runtime, Triton and torch also use, so memory and streams are shared with them.
"""

from __future__ import annotations

import threading

_cu = None  # the cuda.bindings.driver module, once imported
_init_error: str | None = None  # why init failed (no driver, no cuda-python ...), if it did
_count: int | None = None
_contexts: dict[int, object] = {}  # device ordinal -> retained primary CUcontext
_lock = threading.Lock()
_tls = threading.local()  # .device: ordinal whose context is current on this thread
# Called by ``driver()`` before it hands the module out, while some thread defers its kernel
# launches (``kernels.launch_queue`` sets it): that thread's queued launches reach the
# device before any other work of that thread does.
before_device_call = None


class CudaDriverError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the CUresult."""


def _import_driver():
    global _cu, _init_error, _count
    if _cu is not None or _init_error is not None:
        return _cu
    try:
        from cuda.bindings import driver as cu
    except Exception as exc:  # not installed, or an incompatible build
        _init_error = f"cuda-python is not importable ({type(exc).__name__}: {exc})"
        _count = 0
        return None
    try:
        (err,) = cu.cuInit(0)
    except Exception as exc:  # cuda-python raises when libcuda.so itself is missing
        _init_error = f"the NVIDIA driver library could not be loaded ({exc})"
        _count = 0
        return None
    if err != cu.CUresult.CUDA_SUCCESS:
        _init_error = f"cuInit failed with {error_name(err, cu)}"
        _count = 0
        return None
    _cu = cu
    return cu


def error_name(err, cu=None) -> str:
    """The symbolic name of a ``CUresult`` (e.g. ``CUDA_ERROR_OUT_OF_MEMORY``)."""
    cu = cu or _cu
    try:
        name = err.name
    except AttributeError:
        name = None
    if not name and cu is not None:
        res, raw = cu.cuGetErrorName(err)
        name = raw.decode() if res == cu.CUresult.CUDA_SUCCESS and raw else None
    return name or f"CUresult({int(err)})"


def check(result, what: str = "CUDA driver call"):
    """Unpack a cuda-python ``(CUresult, *values)`` tuple, raising on failure.

    Returns ``None``, the single value, or a tuple of values.
    """
    err = result[0]
    if err != 0:  # CUresult is an IntEnum: CUDA_SUCCESS == 0
        raise CudaDriverError(f"{what} failed: {error_name(err)}")
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def driver():
    """The ``cuda.bindings.driver`` module, initialised; raises a clear error without one."""
    if before_device_call is not None:
        before_device_call()
    cu = _cu or _import_driver()
    if cu is None:
        raise RuntimeError(f"CUDA is not available: {_init_error}")
    return cu


def unavailable_reason() -> str | None:
    """Why CUDA cannot be used (``None`` when it can), after trying to initialise."""
    _import_driver()
    if _init_error is None and device_count() == 0:
        return "the CUDA driver reports no devices"
    return _init_error


def device_count() -> int:
    """Number of CUDA devices; 0 without cuda-python, a driver or a GPU. Never raises."""
    global _count
    if _count is None:
        cu = _import_driver()
        if cu is None:
            return 0
        try:
            err, n = cu.cuDeviceGetCount()
            _count = int(n) if err == cu.CUresult.CUDA_SUCCESS else 0
        except Exception:
            _count = 0
    return _count


def check_device(index: int) -> int:
    """Validate a device ordinal, returning it."""
    n = device_count()
    if not 0 <= index < n:
        reason = unavailable_reason() if n == 0 else None
        raise RuntimeError(
            f"invalid CUDA device index {index}: {n} device(s) visible"
            + (f" ({reason})" if reason else ""))
    return index


def context(index: int):
    """The retained primary context of device ``index`` (retained on first request)."""
    ctx = _contexts.get(index)
    if ctx is None:
        with _lock:
            ctx = _contexts.get(index)
            if ctx is None:
                cu = driver()
                check_device(index)
                dev = check(cu.cuDeviceGet(index), "cuDeviceGet")
                ctx = check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
                _contexts[index] = ctx
    return ctx


def activate(index: int) -> None:
    """Make device ``index``'s primary context current on this thread (cheap when it is)."""
    if getattr(_tls, "device", None) != index:
        check(driver().cuCtxSetCurrent(context(index)), "cuCtxSetCurrent")
        _tls.device = index


def active_device() -> int | None:
    """The device whose context this thread made current through ``activate``."""
    return getattr(_tls, "device", None)


class using_device:  # noqa: N801 - used like a function: ``with using_device(i): ...``
    """Context manager: make device ``index`` current, restoring the previous one after."""

    __slots__ = ("index", "prev")

    def __init__(self, index: int):
        self.index = index
        self.prev = None

    def __enter__(self):
        self.prev = active_device()
        activate(self.index)
        return self

    def __exit__(self, *exc):
        if self.prev is not None and self.prev != self.index:
            activate(self.prev)
        return False
