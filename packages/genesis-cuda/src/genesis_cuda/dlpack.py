"""DLPack exchange of CUDA arrays (zero-copy, with torch, cupy, jax ...), through ctypes.

Export builds a ``DLManagedTensor`` that keeps the array alive until the consumer calls its
deleter; import reads one and keeps the producer's memory alive until the genesis array
dies. Streams follow the protocol: the consumer names the stream it will use, the producer
makes that stream wait for its own current stream.
"""

from __future__ import annotations

import ctypes

from genesis import dtypes as D
from genesis_cuda import array as _array
from genesis_cuda import driver, streams

KDL_CUDA = 2
_CODES = {D.bool_: (6, 8), D.uint8: (1, 8), D.int8: (0, 8), D.int16: (0, 16),
          D.int32: (0, 32), D.int64: (0, 64), D.float16: (2, 16), D.bfloat16: (4, 16),
          D.float32: (2, 32), D.float64: (2, 64)}
_FROM_CODES = {v: k for k, v in _CODES.items()}
_FROM_CODES[(1, 1)] = D.bool_  # some producers say "1-bit unsigned" for bool


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", _Deleter)]

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
# The capsule destructor gets a raw PyObject*: separate prototypes taking void*.
_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))

# Exported tensors still owned by a consumer: address of the DLManagedTensor -> what keeps
# its memory and shape arrays alive.
_exported: dict[int, tuple] = {}


def _delete(managed) -> None:
    _exported.pop(ctypes.addressof(managed.contents), None)


_DELETER = _Deleter(_delete)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule) -> None:
    # An unconsumed capsule still owns its tensor; a consumed one was renamed.
    if _is_valid_raw(capsule, b"dltensor"):
        _exported.pop(_get_pointer_raw(capsule, b"dltensor"), None)


def _sync_for_consumer(a: _array.CudaArray, stream) -> None:
    """Make the consumer's ``stream`` wait for the work queued on ours."""
    if stream is None or stream == -1:
        return
    ours = streams.current_stream(a.device)
    theirs = 0 if stream in (1, 2) and ours.handle == 0 else int(stream)
    if theirs == ours.handle:
        return
    event = ours.record_event()
    cu = driver.driver()
    with driver.using_device(a.device):
        driver.check(cu.cuStreamWaitEvent(theirs, event._raw, 0), "cuStreamWaitEvent")


def to_dlpack(a: _array.CudaArray, stream=None):
    """A ``"dltensor"`` capsule viewing ``a``'s memory (shares it, keeps it alive)."""
    code_bits = _CODES[a.dtype]
    _sync_for_consumer(a, stream)
    ndim = len(a.shape)
    shape = (ctypes.c_int64 * max(ndim, 1))(*a.shape)
    strides = (ctypes.c_int64 * max(ndim, 1))(*a.strides)
    managed = DLManagedTensor()
    t = managed.dl_tensor
    t.data = a.data_ptr() or None
    t.device = DLDevice(KDL_CUDA, a.device)
    t.ndim = ndim
    t.dtype = DLDataType(code_bits[0], code_bits[1], 1)
    t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    managed.deleter = _DELETER
    address = ctypes.addressof(managed)
    _exported[address] = (managed, shape, strides, a)
    return _api.PyCapsule_New(address, b"dltensor",
                              ctypes.cast(_capsule_destructor, ctypes.c_void_p))


class _ImportedStorage:
    """Memory owned by another library; its DLPack deleter runs when genesis is done."""

    __slots__ = ("ptr", "size", "device", "_managed", "_owner")

    def __init__(self, ptr, size, device, managed, owner):
        self.ptr = ptr
        self.size = size
        self.device = device
        self._managed = managed
        self._owner = owner  # the capsule's source object, kept alive too

    def data_ptr(self) -> int:
        return self.ptr

    def record_stream(self, stream) -> None:
        return None  # the producer's allocator owns reuse of this memory

    def __del__(self):
        managed = self._managed
        if managed is not None:
            self._managed = None
            try:
                if managed.contents.deleter:
                    managed.contents.deleter(managed)
            except Exception:
                pass


def from_dlpack(obj, index=None) -> _array.CudaArray:
    """A genesis array viewing a DLPack CUDA tensor (an object with ``__dlpack__`` or a
    capsule); no copy."""
    owner = None
    if hasattr(obj, "__dlpack__"):
        device_type, device_id = obj.__dlpack_device__()
        if int(device_type) != KDL_CUDA:
            raise TypeError(f"from_dlpack on CUDA needs a CUDA tensor, got DLPack device "
                            f"type {int(device_type)}")
        handle = streams.current_handle(int(device_id))
        capsule = obj.__dlpack__(stream=handle if handle else 1)
        owner = obj
    else:
        capsule = obj
    address = _api.PyCapsule_GetPointer(capsule, b"dltensor")
    if not address:
        raise TypeError("from_dlpack needs an unconsumed 'dltensor' capsule")
    managed = ctypes.cast(address, ctypes.POINTER(DLManagedTensor))
    t = managed.contents.dl_tensor
    if t.device.device_type != KDL_CUDA:
        raise TypeError(f"DLPack tensor is on device type {t.device.device_type}, not CUDA")
    key = (t.dtype.code, t.dtype.bits)
    dtype = _FROM_CODES.get(key)
    if dtype is None or t.dtype.lanes != 1:
        raise TypeError(f"DLPack dtype (code={key[0]}, bits={key[1]}, lanes={t.dtype.lanes}) "
                        "has no genesis equivalent")
    ndim = t.ndim
    shape = tuple(t.shape[i] for i in range(ndim))
    if t.strides:
        strides = tuple(t.strides[i] for i in range(ndim))
    else:
        strides = _array.contiguous_strides(shape)
    if t.byte_offset % dtype.itemsize:
        raise TypeError("DLPack byte_offset is not a multiple of the element size")
    ptr = (t.data or 0) + t.byte_offset
    extent = 1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides)) if all(shape) else 0
    _api.PyCapsule_SetName(capsule, b"used_dltensor")  # we own it now
    storage = _ImportedStorage(ptr, extent * dtype.itemsize, int(t.device.device_id), managed,
                               owner)
    return _array.new_array(shape, strides, 0, dtype, storage, int(t.device.device_id))
