"""``CudaArray``: the CUDA backend's array, a strided view of allocator-owned memory.

A ``CudaArray`` is what genesis's CUDA tensors hold. It is deliberately small: geometry in
elements, a genesis dtype, a ``Storage`` (the allocator's block, freed when the last view
of it dies) and the device ordinal. Triton kernels take it directly: Triton reads
``data_ptr()`` and ``str(dtype)`` (``"genesis.float32"`` ends in the type name).
"""

from __future__ import annotations

import math

from genesis_cuda import memory as _memory

_allocators = _memory._allocators  # the same dict object: one lookup on the hot path


class _NullStorage:
    """The storage of arrays with no elements: nothing is allocated (``ptr`` is 0)."""

    __slots__ = ("device",)
    ptr = 0
    size = 0

    def __init__(self, device: int):
        self.device = device

    def data_ptr(self) -> int:
        return 0

    def record_stream(self, stream) -> None:
        return None


class CudaArray:
    """A strided view of CUDA memory, made by ``new_array`` (or ``empty``).

    Attributes:
        shape: tuple of ints.
        strides: tuple of ints, in elements (0 and overlapping strides are allowed).
        offset: index of the first element into ``storage``, in elements.
        dtype: a genesis ``DType``.
        storage: the allocator block (``.ptr``, ``.size`` in bytes) shared by all views.
        device: the device ordinal.
    """

    # (__weakref__: a cache of values derived from an array, such as genesis.models'
    # stacked q/k/v copy, tells a new array at a freed one's address from the old one)
    __slots__ = ("shape", "strides", "offset", "dtype", "storage", "device", "__weakref__")
    # (no __init__: new_array sets the fields. A Python __init__ runs in a second interpreter
    # frame entered from C, about 600 machine instructions more per array, and every op
    # makes one: its output or its view)

    def data_ptr(self) -> int:
        """Device address of the first element."""
        return self.storage.ptr + self.offset * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return numel(self)

    def is_contiguous(self) -> bool:
        return is_contiguous(self)

    def __repr__(self) -> str:
        return (f"CudaArray(shape={self.shape}, strides={self.strides}, offset={self.offset}, "
                f"dtype={self.dtype}, device=cuda:{self.device}, ptr=0x{self.data_ptr():x})")


def new_array(shape: tuple, strides: tuple, offset: int, dtype, storage, device: int) -> CudaArray:
    """A ``CudaArray`` of these fields: ``shape`` and ``strides`` (tuples, in elements),
    ``offset`` (elements into ``storage``), a genesis ``dtype``, the allocator's ``storage``
    and the device ordinal.

    Example: ``new_array((2, 3), (3, 1), 0, genesis.float32, storage, 0)``.
    """
    a = CudaArray()
    a.shape = shape
    a.strides = strides
    a.offset = offset
    a.dtype = dtype
    a.storage = storage
    a.device = device
    return a


# shape -> (contiguous strides, numel); shapes repeat constantly in training loops.
_geometry: dict[tuple, tuple[tuple, int]] = {}


def _compute_geometry(shape: tuple) -> tuple[tuple, int]:
    strides = []
    n = 1
    for size in reversed(shape):
        strides.append(n)
        n *= max(size, 1)  # as torch: a zero-size dim does not zero the strides outside it
    geo = (tuple(reversed(strides)), math.prod(shape))
    if len(_geometry) > 8192:  # bound the cache for programs with ever-changing shapes
        _geometry.clear()
    _geometry[shape] = geo
    return geo


def geometry(shape: tuple) -> tuple[tuple, int]:
    """(C-contiguous strides in elements, element count) of ``shape`` (a tuple; cached)."""
    return _geometry.get(shape) or _compute_geometry(shape)


def contiguous_strides(shape) -> tuple:
    """C-contiguous strides (in elements) of ``shape`` (any sequence of ints)."""
    shape = tuple(shape)
    return (_geometry.get(shape) or _compute_geometry(shape))[0]


def empty(shape: tuple, dtype, device: int = 0) -> CudaArray:
    """A new contiguous, uninitialised array from the caching allocator.

    Allocated on the device's current stream. Example: ``empty((2, 3), genesis.float32, 0)``.
    """
    geo = _geometry.get(shape)
    if geo is None:
        geo = _compute_geometry(tuple(shape))
        shape = tuple(shape)
    n = geo[1]
    alloc = _allocators.get(device)
    if alloc is None:
        alloc = _memory.allocator(device)  # first CUDA array on this device: lazy init
    if n:
        storage = alloc.malloc(n * dtype.itemsize)
    else:
        storage = _NullStorage(device)
    return new_array(shape, geo[0], 0, dtype, storage, device)


def numel(a: CudaArray) -> int:
    """Number of elements of ``a``."""
    return math.prod(a.shape)


def is_contiguous(a: CudaArray) -> bool:
    """Whether ``a`` is C-contiguous (size-1 dims may have any stride, as in torch)."""
    geo = _geometry.get(a.shape)
    if geo is not None and a.strides == geo[0]:  # the common case: one lookup
        return True
    expected = 1
    for size, stride in zip(reversed(a.shape), reversed(a.strides)):
        if size != 1 and stride != expected:
            return 0 in a.shape  # no elements: any strides describe the same (empty) data
        expected *= size
    return True


def as_strided(a: CudaArray, shape, strides, offset: int) -> CudaArray:
    """A view of ``a``'s storage with the given geometry (shares memory)."""
    return new_array(tuple(shape), tuple(strides), offset, a.dtype, a.storage, a.device)


def record_stream(a: CudaArray, stream) -> None:
    """Mark ``a``'s memory as used on ``stream``: it is not reused before that work ends."""
    a.storage.record_stream(stream)
