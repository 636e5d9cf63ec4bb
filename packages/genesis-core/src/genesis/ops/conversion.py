"""Moving and converting tensors: ``to`` (dtype/device), ``clone`` and the dtype shorthands."""

from __future__ import annotations

from genesis import dtypes as D
from genesis.autograd.entries import constants_entry
from genesis.autograd.function import Function
from genesis.backends import registry
from genesis.backends.registry import BackendUnavailableError
from genesis.device import CPU, placement
from genesis.device import device as Device
from genesis.ops.common import wrap
from genesis.tensor import Tensor, new_tensor


class Cast(Function):
    kernel_forward = True

    @staticmethod
    def forward(ctx, x, dtype):
        ctx.in_dtype = x.dtype
        backend = x._backend
        return new_tensor(backend.cast(x._data, dtype), x.device, backend, x.shape, dtype)

    @staticmethod
    def backward(ctx, g):
        return (g.to(ctx.in_dtype) if ctx.in_dtype.is_floating_point else None), None


_cast = constants_entry(Cast, 1)  # (x, dtype): Cast.apply's steps for its arity


class ToDevice(Function):
    @staticmethod
    def forward(ctx, x, dev):
        ctx.src = x.device
        return wrap(_transfer(x, dev), dev)

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.src), None


def _transfer(x: Tensor, dev):
    """``x``'s array copied onto ``dev`` (same backend: its copy; else through the host)."""
    src_backend, dst_backend = x._backend, dev.backend
    if src_backend is dst_backend:
        out = dst_backend.empty(x.shape, x.dtype, dev.index)
        return dst_backend.copy_(out, x._data)
    host = x if x.dtype is not D.bfloat16 else Cast.apply(x, D.float32)
    arr = host._backend.to_numpy(host._backend.contiguous(host._data))
    data = dst_backend.from_numpy(arr.copy() if x.device is CPU else arr, dev.index)
    return dst_backend.cast(data, D.bfloat16) if x.dtype is D.bfloat16 else data


class Clone(Function):
    @staticmethod
    def forward(ctx, x):
        b = x._backend
        out = b.empty(x.shape, x.dtype, x.device.index)
        return wrap(b.copy_(out, x._data), x.device, None, x.shape, x.dtype)

    @staticmethod
    def backward(ctx, g):
        return g


def clone(input: Tensor, *, memory_format=None) -> Tensor:
    """A contiguous copy of ``input`` that stays in the graph.

    Args:
        input: the input tensor.
        memory_format: accepted for PyTorch compatibility (the copy is contiguous).

    Returns:
        A new contiguous tensor.
    """
    return Clone.apply(input)


def _parse_to_args(t: Tensor, args, kwargs):
    device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    for a in args:
        if isinstance(a, D.DType):
            dtype = a
        elif isinstance(a, Tensor):
            device, dtype = a.device, a.dtype
        elif isinstance(a, str):
            device = _device_or_dtype_string(a)
        elif isinstance(a, (Device, int)):
            device = a
        elif a is not None:
            raise TypeError(f"to() received an invalid argument {a!r}")
    return (None if device is None else placement(device)), dtype


def _device_or_dtype_string(spec: str):
    """The device a positional string of ``to()`` names; when it names none (``'float33'``,
    ``'gpu'``), say that it is neither a device nor a dtype rather than blame a plugin."""
    try:
        dev = placement(spec)
        dev.backend  # noqa: B018 - 'tpu:0' has an index: load its backend now, to check it
        return dev
    except (ValueError, BackendUnavailableError) as exc:
        device_type = spec.partition(":")[0]
        if device_type in registry.KNOWN_PLUGINS or device_type in registry.installed():
            raise  # a real device type: its plugin is missing or failed, the message says
        devices = ", ".join(registry.installed())
        try:
            name = D.dtype_from_name(spec).name
        except TypeError:
            raise RuntimeError(f"to(): {spec!r} is neither a valid device (installed device "
                               f"types: {devices}) nor a dtype (dtypes are genesis objects "
                               "such as genesis.float32)") from exc
        raise RuntimeError(f"to(): {spec!r} is not a device (installed device types: "
                           f"{devices}); for the dtype pass genesis.{name}, not a string") \
            from exc


def to(input: Tensor, *args, non_blocking: bool = False, copy: bool = False,
       **kwargs) -> Tensor:
    """``input`` on another device and/or with another dtype (itself if nothing changes).

    Args:
        input: the input tensor.
        *args: a device, a dtype, both, or a tensor whose device and dtype to take.
        non_blocking: accepted for PyTorch compatibility.
        copy: return a copy even when nothing changes.
        **kwargs: ``device=`` and ``dtype=``.

    Returns:
        ``input`` itself when nothing changes (and not ``copy``), else a new tensor.

    Example:
        >>> x.to('cuda', genesis.bfloat16)
    """
    if not kwargs and not copy and len(args) == 1 and type(args[0]) is D.DType:
        # the common call (autocast's casts, .float(), .to(dtype)): no argument parsing
        dtype = args[0]
        if dtype is input.dtype:
            return input
        return _cast(input, dtype)
    device, dtype = _parse_to_args(input, args, kwargs)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    out = input
    if device is not None and device is not input.device:
        out = ToDevice.apply(out, device)
        copy = False
    if dtype is not None and dtype is not out.dtype:
        out = _cast(out, dtype)
        copy = False
    if copy:
        out = clone(out)
    return out


def cpu(input: Tensor) -> Tensor:
    return to(input, CPU)


def cuda(input: Tensor, device=None) -> Tensor:
    return to(input, placement("cuda" if device is None else device))


def type_as(input: Tensor, other: Tensor) -> Tensor:
    """``input`` converted to the dtype of ``other``.

    Args:
        input: the tensor to convert.
        other: the tensor whose dtype is used.

    Returns:
        ``input`` itself when the dtypes match, otherwise a converted copy.
    """
    return to(input, other.dtype)


def _caster(dtype):
    def method(self: Tensor) -> Tensor:
        return to(self, dtype)

    method.__doc__ = f"``self.to({dtype})``."
    return method


DTYPE_SHORTHANDS = {
    "float": _caster(D.float32), "double": _caster(D.float64), "half": _caster(D.float16),
    "bfloat16": _caster(D.bfloat16), "long": _caster(D.int64), "int": _caster(D.int32),
    "short": _caster(D.int16), "char": _caster(D.int8), "byte": _caster(D.uint8),
    "bool": _caster(D.bool_),
}
