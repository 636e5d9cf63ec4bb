"""Streams and events: the queues kernels run on, and markers to order and time them.

Each device has a *current* stream; genesis kernels (and Triton launches, through the hook
in ``triton_hooks``) go to it. The default stream is CUDA's legacy default stream (handle
0), as in torch; streams made with ``Stream()`` are non-blocking, so work on them overlaps
with the default stream unless ordered with ``wait_stream``/``wait_event``.

Example:
    >>> s = genesis.cuda.Stream()
    >>> s.wait_stream(genesis.cuda.current_stream())
    >>> with genesis.cuda.stream(s):
    ...     y = x @ x            # runs on s
    >>> genesis.cuda.current_stream().wait_stream(s)
"""

from __future__ import annotations

from genesis_cuda import capture, driver, kernel_errors
from genesis_cuda import device as _device

# device ordinal -> its current Stream (process-wide, like the current device)
_current: dict[int, Stream] = {}
_default: dict[int, Stream] = {}
_listeners: list = []  # called with (index, handle) when a current stream changes

# New streams come from a pool per (device, priority), handed out round-robin and never
# destroyed, as torch does: a stream handle that the caching allocator remembers (memory
# used on that stream, freed later) or a communicator holds must stay valid for the whole
# process. Destroying a stream object's handle in __del__ let a later free record an event on
# a destroyed stream, which crashes the driver.
POOL_SIZE = 32
_pools: dict[tuple[int, int], list[int]] = {}
_next_in_pool: dict[tuple[int, int], int] = {}


def _pooled_stream(index: int, priority: int) -> int:
    """The next stream handle of device ``index``'s pool for ``priority``."""
    key = (index, priority)
    pool = _pools.get(key)
    if pool is None:
        _device.lazy_init(index)
        cu = driver.driver()
        pool = _pools[key] = []
        with driver.using_device(index):
            for _ in range(POOL_SIZE):
                raw = driver.check(cu.cuStreamCreateWithPriority(
                    cu.CUstream_flags.CU_STREAM_NON_BLOCKING, priority),
                    "cuStreamCreateWithPriority")
                pool.append(int(raw))
    i = _next_in_pool.get(key, 0)
    _next_in_pool[key] = (i + 1) % POOL_SIZE
    return pool[i]


class Stream:
    """A CUDA stream on ``device`` (default: current device).

    Args:
        device: device ordinal or ``'cuda:i'``; default the current device.
        priority: lower numbers are higher priority (0 is the default priority).

    The handle comes from a per-device pool of 32 streams that live as long as the process
    (as in torch), so two ``Stream`` objects may share one queue.

    Attributes:
        handle: the raw ``CUstream`` as an int (``cuda_stream`` is the torch name).
        device: the device ordinal.
    """

    __slots__ = ("handle", "device", "priority", "__weakref__")

    def __init__(self, device=None, priority: int = 0, *, _handle: int | None = None):
        index = _device._index(device)
        self.device = index
        self.priority = priority
        if _handle is not None:  # wrapping an existing stream (the default one, external)
            self.handle = int(_handle)
            return
        self.handle = _pooled_stream(index, priority)

    @classmethod
    def from_handle(cls, handle: int, device=None) -> Stream:
        """Wrap a stream created elsewhere (torch, cupy ...); genesis does not destroy it."""
        return cls(device, _handle=handle)

    @property
    def cuda_stream(self) -> int:
        """The raw stream handle (torch's name for it)."""
        return self.handle

    def record_event(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one if ``None``) on this stream and return it."""
        event = event if event is not None else Event()
        event.record(self)
        return event

    def wait_event(self, event: Event) -> None:
        """Make future work on this stream wait for ``event`` (the host does not wait)."""
        event.wait(self)

    def wait_stream(self, stream: Stream) -> None:
        """Make future work on this stream wait for all work queued so far on ``stream``."""
        if stream.handle != self.handle or stream.device != self.device:
            self.wait_event(stream.record_event())

    def query(self) -> bool:
        """True when all work queued on this stream has finished."""
        capture.check_not_capturing("query a stream (Stream.query)", self.device)
        cu = driver.driver()
        with driver.using_device(self.device):
            (err,) = cu.cuStreamQuery(self.handle)
        if err == cu.CUresult.CUDA_ERROR_NOT_READY:
            return False
        driver.check((err,), "cuStreamQuery")
        return True

    def synchronize(self) -> None:
        """Block the host until all work queued on this stream has finished."""
        capture.check_not_capturing("synchronize a stream (Stream.synchronize)", self.device)
        _device.lazy_init(self.device)
        cu = driver.driver()
        with driver.using_device(self.device):
            driver.check(cu.cuStreamSynchronize(self.handle), "cuStreamSynchronize")
        kernel_errors.raise_pending(self.device)

    def __eq__(self, other) -> bool:
        return (isinstance(other, Stream) and other.handle == self.handle
                and other.device == self.device)

    def __hash__(self) -> int:
        return hash((self.handle, self.device))

    def __repr__(self) -> str:
        return f"<genesis.cuda.Stream device=cuda:{self.device} cuda_stream=0x{self.handle:x}>"


class Event:
    """A marker in a stream: record it, wait on it, query it, time between two of them.

    Args:
        enable_timing: allow ``elapsed_time`` (costs a little; off by default, as torch).
        blocking: ``synchronize`` sleeps instead of spinning.

    Example:
        >>> start, end = genesis.cuda.Event(enable_timing=True), genesis.cuda.Event(True)
        >>> start.record(); y = x @ x; end.record(); end.synchronize()
        >>> start.elapsed_time(end)   # milliseconds
    """

    __slots__ = ("enable_timing", "blocking", "device", "_raw", "__weakref__")

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False):
        if interprocess:
            raise NotImplementedError("interprocess events are not supported by genesis-cuda")
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.device = None
        self._raw = None  # created on first record, on the recording stream's device

    def _create(self, index: int) -> None:
        cu = driver.driver()
        flags = 0 if self.enable_timing else int(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        if self.blocking:
            flags |= int(cu.CUevent_flags.CU_EVENT_BLOCKING_SYNC)
        with driver.using_device(index):
            self._raw = driver.check(cu.cuEventCreate(flags), "cuEventCreate")
        self.device = index

    def record(self, stream: Stream | None = None) -> None:
        """Record the event on ``stream`` (default: the current stream)."""
        if stream is None:
            stream = current_stream()
        if self._raw is None:
            self._create(stream.device)
        elif stream.device != self.device:
            raise ValueError(f"event was created on cuda:{self.device} and cannot be recorded "
                             f"on a stream of cuda:{stream.device}")
        cu = driver.driver()
        with driver.using_device(stream.device):
            driver.check(cu.cuEventRecord(self._raw, stream.handle), "cuEventRecord")

    def wait(self, stream: Stream | None = None) -> None:
        """Make ``stream`` (default: current) wait for this event; no-op if never recorded."""
        if self._raw is None:
            return
        if stream is None:
            stream = current_stream()
        cu = driver.driver()
        with driver.using_device(stream.device):
            driver.check(cu.cuStreamWaitEvent(stream.handle, self._raw, 0), "cuStreamWaitEvent")

    def query(self) -> bool:
        """True when the work recorded before this event has finished (or never recorded)."""
        capture.check_not_capturing("query an event (Event.query)", self.device)
        if self._raw is None:
            return True
        cu = driver.driver()
        (err,) = cu.cuEventQuery(self._raw)
        if err == cu.CUresult.CUDA_ERROR_NOT_READY:
            return False
        driver.check((err,), "cuEventQuery")
        return True

    def synchronize(self) -> None:
        """Block the host until the event has completed."""
        capture.check_not_capturing("synchronize an event (Event.synchronize)", self.device)
        if self._raw is not None:
            driver.check(driver.driver().cuEventSynchronize(self._raw), "cuEventSynchronize")

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds between this event and ``end`` (both recorded and completed)."""
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("elapsed_time needs both events made with enable_timing=True")
        if self._raw is None or end._raw is None:
            raise RuntimeError("elapsed_time needs both events to have been recorded")
        cu = driver.driver()
        return float(driver.check(cu.cuEventElapsedTime(self._raw, end._raw),
                                  "cuEventElapsedTime"))

    def __del__(self):
        if self._raw is not None and driver._cu is not None:
            try:
                driver._cu.cuEventDestroy(self._raw)
            except Exception:
                pass

    def __repr__(self) -> str:
        state = "unrecorded" if self._raw is None else f"cuda:{self.device}"
        return f"<genesis.cuda.Event {state} timing={self.enable_timing}>"


# --------------------------------------------------------------- current streams
def _init_device(index: int) -> None:
    """Init hook: the default stream becomes the device's current stream."""
    if index not in _default:
        _default[index] = Stream(index, _handle=0)
    _current.setdefault(index, _default[index])


_device.on_init(_init_device)


def default_stream(device=None) -> Stream:
    """The default (legacy, handle 0) stream of ``device``."""
    index = _device._index(device)
    s = _default.get(index)
    if s is None:
        s = _default[index] = Stream(index, _handle=0)
    return s


def current_stream(device=None) -> Stream:
    """The stream genesis queues work on for ``device`` (default: current device)."""
    index = _device._current_device if device is None else _device._index(device)
    s = _current.get(index)
    return s if s is not None else default_stream(index)


def current_handle(device: int) -> int:
    """The raw handle of ``device``'s current stream (the kernels' fast path)."""
    s = _current.get(device)
    return 0 if s is None else s.handle


def set_stream(stream: Stream) -> None:
    """Make ``stream`` the current stream of its device."""
    _device.lazy_init(stream.device)
    _current[stream.device] = stream
    for listener in _listeners:
        listener(stream.device, stream.handle)


def on_change(listener) -> None:
    """Call ``listener(index, handle)`` whenever a device's current stream changes."""
    _listeners.append(listener)


class stream:  # noqa: N801 - used like torch.cuda.stream
    """Context manager: run the enclosed genesis ops on ``s`` (``None`` changes nothing).

    Also makes ``s``'s device current for the duration, as torch does.
    """

    def __init__(self, s: Stream | None):
        self.s = s
        self.prev_stream = None
        self.prev_device = None

    def __enter__(self):
        s = self.s
        if s is None:
            return None
        self.prev_device = _device._current_device
        if s.device != self.prev_device:
            _device.set_device(s.device)
        self.prev_stream = current_stream(s.device)
        set_stream(s)
        return s

    def __exit__(self, *exc):
        if self.s is None:
            return False
        set_stream(self.prev_stream)
        if self.prev_device != self.s.device:
            _device.set_device(self.prev_device)
        return False
