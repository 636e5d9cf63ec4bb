"""``genesis.device``: where a tensor lives, and the backend that serves it."""

from __future__ import annotations

import threading

from genesis.backends.registry import get_backend


class device:  # noqa: N801 - named like torch.device
    """A device such as ``genesis.device('cpu')`` or ``genesis.device('cuda:1')``.

    Devices are interned: ``device('cuda:0') is device('cuda', 0)``. The backend behind a
    device is loaded lazily, on first use of ``.backend``.

    ``device(type_or_spec, index=None)``: ``type_or_spec`` is ``'cpu'``, ``'cuda'``,
    ``'cuda:1'`` or another device; ``index`` is the device ordinal. Without one (``'cuda'``)
    tensors go to the backend's current device, and a tensor's ``.device`` always names the
    ordinal.
    """

    __slots__ = ("type", "index", "_backend")
    _interned: dict[tuple[str, int | None], device] = {}

    def __new__(cls, type_or_spec: str | device, index: int | None = None) -> device:
        if isinstance(type_or_spec, device):
            if index is not None:
                raise ValueError("device(device, index) is not allowed; pass a type string")
            return type_or_spec
        if not isinstance(type_or_spec, str):
            raise TypeError(f"device() expects a string like 'cuda:0', got {type_or_spec!r}")
        dev_type, _, idx_text = type_or_spec.partition(":")
        if idx_text:
            if index is not None:
                raise ValueError(f"device {type_or_spec!r} already has an index; got {index}")
            if not idx_text.isdigit():
                raise ValueError(f"invalid device string {type_or_spec!r}")
            index = int(idx_text)
        if not dev_type or not dev_type.isidentifier():
            raise ValueError(f"invalid device string {type_or_spec!r}")
        if index is not None and index < 0:
            raise ValueError(f"device index must be >= 0, got {index}")
        if dev_type == "cpu":
            index = None  # there is one CPU device, as in torch
        key = (dev_type, index)
        dev = cls._interned.get(key)
        if dev is None:
            dev = object.__new__(cls)
            dev.type, dev.index, dev._backend = dev_type, index, None
            cls._interned[key] = dev
        return dev

    @property
    def backend(self):
        """The backend serving this device type (loaded on first use)."""
        if self._backend is None:
            self._backend = get_backend(self.type)
        return self._backend

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            other = device(other)
        return self is other

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __reduce__(self):
        return (device, (str(self),))


class _DefaultDevice(threading.local):
    """Where factories put tensors when given no device (per thread, as torch's)."""

    spec = None  # None: the CPU; else what set_default_device was given ('cuda', a device)


_default = _DefaultDevice()


def set_default_device(device) -> None:
    """Make factories (``zeros``, ``tensor``, ``randn``, ``arange`` ...) create tensors on
    ``device`` when called without one, as torch's does (in this thread).

    ``*_like`` functions keep their input's device and ``from_numpy`` stays on the CPU.
    A device type without an index (``'cuda'``) means the current device of that type at
    each call.

    Args:
        device: a device, a string such as ``'cuda'`` or ``'cuda:1'``, or None for the CPU.

    Raises:
        BackendUnavailableError: no installed backend serves the device type.

    Example:
        >>> genesis.set_default_device("cuda")
        >>> genesis.zeros(3).device
        device(type='cuda', index=0)
    """
    if device is None:
        _default.spec = None
        return
    dev = as_device(device)
    dev.backend  # noqa: B018 - a device type no backend serves fails here, not at first use
    _default.spec = dev


def get_default_device() -> device:
    """The device factories use when given none (``set_default_device``; the CPU at first).

    Returns:
        A device with its index (``'cuda'`` reads as the current CUDA device).
    """
    return placement(None)


def default_device_or_none() -> device | None:
    """The device set by ``set_default_device``, or None when none is set (the CPU)."""
    spec = _default.spec
    return None if spec is None else placement(spec)


def as_device(spec) -> device:
    """Turn ``None`` (CPU), a string, an int (CUDA ordinal) or a device into a device."""
    if spec is None:
        return CPU
    if isinstance(spec, device):
        return spec
    if isinstance(spec, int):
        return device("cuda", spec)
    return device(spec)


def placement(spec) -> device:
    """The concrete device new tensors for ``spec`` go to (``'cuda'`` -> the current GPU;
    None -> the default device, see ``set_default_device``)."""
    if spec is None:
        spec = _default.spec
    dev = as_device(spec)
    if dev.index is None and dev.type != "cpu":
        dev = device(dev.type, dev.backend.current_device())
    return dev


CPU = device("cpu")
