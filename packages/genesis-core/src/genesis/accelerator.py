"""``genesis.accelerator``: the installed accelerator, named as torch's ``torch.accelerator``.

The accelerator is the device type of the installed backend plugin other than the CPU
(``cuda`` with genesis-cuda; with several plugins, ``cuda`` first, then by name), as torch's
is the device type it was built for. Where there is none, every query says so and
``synchronize`` raises, as torch's does.

Example:
    >>> device = (genesis.accelerator.current_accelerator()
    ...           if genesis.accelerator.is_available() else genesis.device("cpu"))
"""

from __future__ import annotations

from genesis.backends import registry
from genesis.device import device as Device

__all__ = ["current_accelerator", "current_device_index", "device_count", "is_available",
           "synchronize"]


def _accelerator_type() -> str | None:
    """The accelerator's device type (its plugin is installed; it may not load), or None."""
    types = [name for name in registry.installed() if name != "cpu"]
    if not types:
        return None
    return "cuda" if "cuda" in types else types[0]


def _backend_or_none():
    name = _accelerator_type()
    if name is None:
        return None
    try:
        return registry.get_backend(name)
    except registry.BackendUnavailableError:
        return None


def current_accelerator(check_available: bool = False) -> Device | None:
    """The accelerator's device type as a device without an index, or None.

    Args:
        check_available: also require that it is usable now (``is_available()``).

    Returns:
        ``genesis.device('cuda')`` (for example), or None when there is no accelerator
        (or, with ``check_available``, none usable).

    Example:
        >>> genesis.accelerator.current_accelerator()
        device(type='cuda')
    """
    name = _accelerator_type()
    if name is None or (check_available and not is_available()):
        return None
    return Device(name)


def is_available() -> bool:
    """Whether the accelerator's plugin loads and sees at least one device.

    Returns:
        A Python bool (never raises).
    """
    backend = _backend_or_none()
    return bool(backend is not None and backend.is_available())


def device_count() -> int:
    """The number of accelerator devices (0 without one).

    Returns:
        An int (never raises).
    """
    backend = _backend_or_none()
    return backend.device_count() if backend is not None and backend.is_available() else 0


def _usable_backend(what: str):
    backend = _backend_or_none()
    if backend is None or not backend.is_available():
        raise RuntimeError(f"genesis.accelerator.{what}: no accelerator device is available "
                           f"(installed device types: {', '.join(registry.installed())})")
    return backend


def current_device_index() -> int:
    """The index of the accelerator device that new tensors go to by default.

    Returns:
        An int.

    Raises:
        RuntimeError: there is no usable accelerator.
    """
    return _usable_backend("current_device_index()").current_device()


def synchronize(device=None, /) -> None:
    """Wait for all work queued on an accelerator device to finish.

    Args:
        device: the device (a device, ``'cuda:1'``, or an index); the current one when None.

    Raises:
        RuntimeError: there is no usable accelerator, or ``device`` is not one of its.

    Example:
        >>> genesis.accelerator.synchronize()
    """
    backend = _usable_backend("synchronize()")
    if device is None or isinstance(device, int):
        index = device
    else:
        dev = Device(device) if isinstance(device, str) else device
        if not isinstance(dev, Device) or dev.type != _accelerator_type():
            raise RuntimeError(f"genesis.accelerator.synchronize: {device!r} is not a device of "
                               f"the accelerator ({_accelerator_type()})")
        index = dev.index
    backend.synchronize(index if index is not None else backend.current_device())
