"""Torch's legacy tensor types: ``genesis.FloatTensor``, ``LongTensor`` ... and
``Tensor.type()``.

Each legacy type is a CPU tensor constructor for one dtype, as in torch:
``genesis.LongTensor([1, 2])`` copies data, ``genesis.FloatTensor(2, 3)`` makes an
uninitialised (2, 3) tensor, ``genesis.FloatTensor()`` an empty one, and
``isinstance(x, genesis.FloatTensor)`` asks whether ``x`` is a float32 CPU tensor. New code
should use ``genesis.tensor``/``genesis.empty`` with ``dtype=``; these exist so that older
programs port by renaming.

``Tensor.type()`` names a tensor's type (``'genesis.FloatTensor'``, and
``'genesis.cuda.FloatTensor'`` on a GPU, where torch says ``'torch...'``);
``Tensor.type(dtype)`` converts.
"""

from __future__ import annotations

from genesis import creation
from genesis import dtypes as D
from genesis.device import CPU
from genesis.device import device as Device
from genesis.ops import conversion, views
from genesis.tensor import Size, Tensor

_NAMES = {
    D.float32: "FloatTensor", D.float64: "DoubleTensor", D.float16: "HalfTensor",
    D.bfloat16: "BFloat16Tensor", D.int64: "LongTensor", D.int32: "IntTensor",
    D.int16: "ShortTensor", D.int8: "CharTensor", D.uint8: "ByteTensor", D.bool_: "BoolTensor",
}
_BY_NAME = {name: dtype for dtype, name in _NAMES.items()}


class LegacyTensorType(type):
    """The class of ``genesis.FloatTensor`` and the other legacy types: calling one makes a
    CPU tensor of its dtype; ``isinstance`` checks the dtype and the device."""

    dtype: D.DType

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, Tensor) and obj.dtype is cls.dtype and obj.device is CPU

    def __call__(cls, *args, device=None) -> Tensor:
        if device is not None and Device(device) is not CPU:
            raise RuntimeError(f"genesis.{cls.__name__} makes CPU tensors, got device="
                               f"{device!r}; use genesis.tensor(data, dtype=genesis."
                               f"{cls.dtype.name}, device={str(device)!r})")
        if not args:
            return creation.empty(0, dtype=cls.dtype, device=CPU)
        if len(args) == 1 and isinstance(args[0], Tensor):
            return cls._alias(args[0])
        if all(isinstance(a, int) and not isinstance(a, bool) for a in args) or (
                len(args) == 1 and isinstance(args[0], Size)):
            shape = tuple(args[0]) if isinstance(args[0], Size) else args
            if any(n < 0 for n in shape):
                raise RuntimeError(f"genesis.{cls.__name__}: negative dimension in size "
                                   f"{list(shape)}")
            return creation.empty(shape, dtype=cls.dtype, device=CPU)
        if len(args) == 1 and not isinstance(args[0], (str, bytes)) \
                and hasattr(args[0], "__len__"):
            return creation.tensor(args[0], dtype=cls.dtype, device=CPU)
        kinds = ", ".join(type(a).__name__ for a in args)
        raise TypeError(f"genesis.{cls.__name__}() takes sizes (ints), a sequence of data or "
                        f"a tensor; got ({kinds})")

    def _alias(cls, t: Tensor) -> Tensor:
        """``genesis.FloatTensor(t)``: a tensor sharing ``t``'s memory (same dtype, CPU)."""
        if t.dtype is not cls.dtype or t.device is not CPU:
            raise TypeError(f"genesis.{cls.__name__}(tensor) needs a {cls.dtype.name} CPU "
                            f"tensor, got {t.dtype.name} on {t.device}; convert it with "
                            f".to(genesis.{cls.dtype.name})")
        return views.view(t, t.shape)


def _legacy_type(dtype: D.DType) -> LegacyTensorType:
    name = _NAMES[dtype]
    doc = (f"Legacy constructor of {dtype.name} CPU tensors, as ``torch.{name}``.\n\n"
           f"``genesis.{name}(data)`` copies data, ``genesis.{name}(*sizes)`` makes an "
           f"uninitialised tensor, ``genesis.{name}()`` an empty one; "
           f"``isinstance(x, genesis.{name})`` checks the dtype and the device.\n\n"
           f"Example:\n    >>> genesis.{name}([1, 0]).dtype\n    genesis.{dtype.name}\n")
    return LegacyTensorType(name, (), {"dtype": dtype, "__doc__": doc,
                                       "__module__": "genesis.legacy_types"})


FloatTensor = _legacy_type(D.float32)
DoubleTensor = _legacy_type(D.float64)
HalfTensor = _legacy_type(D.float16)
BFloat16Tensor = _legacy_type(D.bfloat16)
LongTensor = _legacy_type(D.int64)
IntTensor = _legacy_type(D.int32)
ShortTensor = _legacy_type(D.int16)
CharTensor = _legacy_type(D.int8)
ByteTensor = _legacy_type(D.uint8)
BoolTensor = _legacy_type(D.bool_)

LEGACY_TYPES = (FloatTensor, DoubleTensor, HalfTensor, BFloat16Tensor, LongTensor, IntTensor,
                ShortTensor, CharTensor, ByteTensor, BoolTensor)


def _type_name(t: Tensor) -> str:
    where = "" if t.device is CPU else f"{t.device.type}."
    return f"genesis.{where}{_NAMES[t.dtype]}"


def _parse_type_name(name: str) -> tuple[D.DType, str]:
    """``'genesis.cuda.LongTensor'`` -> (int64, 'cuda')."""
    parts = name.split(".")
    if len(parts) in (2, 3) and parts[0] == "genesis" and parts[-1] in _BY_NAME:
        return _BY_NAME[parts[-1]], "cpu" if len(parts) == 2 else parts[1]
    raise ValueError(f"invalid type: {name!r} (expected a dtype such as genesis.int64, or a "
                     "name such as 'genesis.LongTensor' or 'genesis.cuda.LongTensor')")


def tensor_type(self: Tensor, dtype=None, non_blocking: bool = False):
    """``self``'s type name, or ``self`` converted to another type (as ``torch.Tensor.type``).

    Args:
        dtype: None to ask the name; a dtype; a legacy type (``genesis.LongTensor``, a CPU
            type); or a name (``'genesis.LongTensor'``, ``'genesis.cuda.HalfTensor'``).
        non_blocking: accepted for PyTorch compatibility.

    Returns:
        With no ``dtype``, a string such as ``'genesis.FloatTensor'`` or
        ``'genesis.cuda.FloatTensor'``; otherwise ``self`` when it already has that type,
        else a converted copy.

    Example:
        >>> genesis.zeros(2).type()
        'genesis.FloatTensor'
        >>> genesis.zeros(2).type(genesis.int64).dtype
        genesis.int64
    """
    if dtype is None:
        return _type_name(self)
    if isinstance(dtype, D.DType):
        return conversion.to(self, dtype)
    if isinstance(dtype, LegacyTensorType):
        return conversion.to(self, CPU, dtype.dtype)
    if isinstance(dtype, str):
        target, device_type = _parse_type_name(dtype)
        device = self.device if self.device.type == device_type else device_type
        return conversion.to(self, device, target)
    raise TypeError(f"Tensor.type(): expected a dtype, a legacy type or a type name, got "
                    f"{type(dtype).__name__} {dtype!r}")


def pin_memory(self: Tensor, device=None) -> Tensor:
    """A copy of this CPU tensor (as ``torch.Tensor.pin_memory``; genesis does not pin).

    genesis does not allocate page-locked host memory for tensors: genesis-cuda stages small
    host-to-device copies through its own pinned buffers instead. The copy keeps torch's
    meaning (a new tensor, in the autograd graph), so code that pins then copies works.

    Args:
        device: accepted for PyTorch compatibility.

    Returns:
        A new CPU tensor with the same values (``is_pinned()`` is False).
    """
    if self.device is not CPU:
        raise RuntimeError(f"cannot pin a tensor on {self.device}: only CPU tensors can be "
                           "pinned")
    return conversion.clone(self)


def is_pinned(self: Tensor, device=None) -> bool:
    """Whether this tensor is in page-locked host memory: never in genesis (see
    ``pin_memory``).

    Args:
        device: accepted for PyTorch compatibility.

    Returns:
        False.
    """
    return False
