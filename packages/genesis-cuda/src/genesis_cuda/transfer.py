"""Copies between the host and devices, and between devices.

Host to device goes on the current stream. Small copies from pageable numpy memory are
staged through a pinned buffer so they are truly asynchronous (a copy from pageable memory
makes the driver wait for the stream first); large ones go straight from the numpy buffer,
where the driver's own staging runs at the same speed. Device to host waits for the stream
(the caller needs the values). Between devices, ``cuMemcpyPeerAsync`` runs on the
destination's current stream, ordered after the source stream's work with an event.
"""

from __future__ import annotations

import ctypes

import numpy as np

from genesis import dtypes as D
from genesis_cuda import array as _array
from genesis_cuda import capture, driver, kernel_errors, kernels, streams  # kernels: lazy
from genesis_cuda import device as _device

_TO_NUMPY = {
    D.bool_: np.dtype(np.bool_), D.uint8: np.dtype(np.uint8), D.int8: np.dtype(np.int8),
    D.int16: np.dtype(np.int16), D.int32: np.dtype(np.int32), D.int64: np.dtype(np.int64),
    D.float16: np.dtype(np.float16), D.float32: np.dtype(np.float32),
    D.float64: np.dtype(np.float64),
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}

PINNED_STAGING_MAX = 1 << 20  # stage host->device copies up to 1 MiB through pinned memory


def genesis_dtype_of_numpy(dt: np.dtype):
    """The genesis dtype of a numpy dtype (``ml_dtypes.bfloat16`` is bfloat16)."""
    g = _FROM_NUMPY.get(np.dtype(dt))
    if g is None:
        if np.dtype(dt).name == "bfloat16":
            return D.bfloat16
        raise TypeError(f"numpy dtype {np.dtype(dt)} has no genesis CUDA equivalent; "
                        f"supported: {sorted(str(d) for d in _FROM_NUMPY)}")
    return g


class _PinnedStager:
    """A ring of pinned host buffers for small host->device copies.

    Each buffer is reused only after the event recorded behind its last copy completed.
    """

    def __init__(self, slots: int = 8, size: int = PINNED_STAGING_MAX):
        self.size = size
        self.slots = slots
        self.buffers: list = []  # (host ptr, numpy view, event or None)
        self.next = 0

    def _grow(self, cu):
        ptr = driver.check(cu.cuMemHostAlloc(self.size, 0), "cuMemHostAlloc")
        view = np.ctypeslib.as_array((ctypes.c_uint8 * self.size).from_address(int(ptr)))
        event = driver.check(cu.cuEventCreate(
            int(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)), "cuEventCreate")
        self.buffers.append([int(ptr), view, event, False])

    def copy(self, cu, dst_ptr: int, src: np.ndarray, stream: int) -> None:
        if len(self.buffers) < self.slots:
            self._grow(cu)
            slot = self.buffers[-1]
        else:
            slot = self.buffers[self.next]
            self.next = (self.next + 1) % self.slots
            if slot[3]:  # wait until its previous copy has read it
                driver.check(cu.cuEventSynchronize(slot[2]), "cuEventSynchronize")
        nbytes = src.nbytes
        slot[1][:nbytes] = src.reshape(-1).view(np.uint8)
        driver.check(cu.cuMemcpyHtoDAsync(dst_ptr, slot[0], nbytes, stream),
                     "cuMemcpyHtoDAsync")
        driver.check(cu.cuEventRecord(slot[2], stream), "cuEventRecord")
        slot[3] = True


_stagers: dict[int, _PinnedStager] = {}


def from_numpy(data, index: int) -> _array.CudaArray:
    """Copy a numpy array (any strides) to a new contiguous array on device ``index``.

    During CUDA graph capture the copy is recorded into the graph from a pinned buffer the
    graph keeps: every replay writes the values ``data`` had at capture time (and, like any
    tensor made during capture, the array holds them only once the graph has run).
    """
    host = np.ascontiguousarray(data)
    if host.ndim != np.ndim(data):  # ascontiguousarray turns 0-d into 1-d
        host = host.reshape(np.shape(data))
    out = _array.empty(host.shape, genesis_dtype_of_numpy(host.dtype), index)
    nbytes = host.nbytes
    if nbytes:
        cu = driver.driver()
        stream = streams.current_handle(index)
        with driver.using_device(index):
            if capture.is_capturing(index):
                _copy_in_capture(cu, out.storage.ptr, host, stream, index)
            elif nbytes <= PINNED_STAGING_MAX:
                stager = _stagers.get(index)
                if stager is None:
                    stager = _stagers[index] = _PinnedStager()
                stager.copy(cu, out.storage.ptr, host, stream)
            else:
                driver.check(cu.cuMemcpyHtoDAsync(out.storage.ptr, host.ctypes.data, nbytes,
                                                  stream), "cuMemcpyHtoDAsync")
    return out


def _copy_in_capture(cu, dst_ptr: int, host: np.ndarray, stream: int, index: int) -> None:
    """Record a host->device copy into the graph being captured, from a pinned buffer that
    the graph owns (freed with it) and that nothing else writes: a constant of the graph."""
    nbytes = host.nbytes
    with capture.relaxed_mode():  # cuMemHostAlloc is no stream operation
        ptr = int(driver.check(cu.cuMemHostAlloc(nbytes, 0), "cuMemHostAlloc"))
    capture._capturing[index].keep_host_buffer(ptr)
    ctypes.memmove(ptr, host.ctypes.data, nbytes)
    driver.check(cu.cuMemcpyHtoDAsync(dst_ptr, ptr, nbytes, stream), "cuMemcpyHtoDAsync")


def _contiguous(a: _array.CudaArray) -> _array.CudaArray:
    if _array.is_contiguous(a):
        return a
    if a.device == _device._current_device:
        return kernels.elementwise.contiguous(a)
    with _device.device(a.device):  # kernels launch in the current device's context
        return kernels.elementwise.contiguous(a)


def to_numpy(a: _array.CudaArray) -> np.ndarray:
    """A new numpy array with ``a``'s values (waits for ``a``'s stream)."""
    capture.check_not_capturing("copy a tensor to the host (numpy(), tolist(), cpu())",
                                a.device)
    np_dtype = _TO_NUMPY.get(a.dtype)
    if np_dtype is None:
        raise TypeError(f"{a.dtype} has no numpy equivalent; cast to float32 first")
    src = _contiguous(a)
    out = np.empty(a.shape, np_dtype)
    if out.nbytes:
        _device_to_host(out.ctypes.data, src.data_ptr(), out.nbytes, a.device)
    return out


def _device_to_host(host_ptr: int, dev_ptr: int, nbytes: int, index: int) -> None:
    cu = driver.driver()
    stream = streams.current_handle(index)
    with driver.using_device(index):
        driver.check(cu.cuMemcpyDtoHAsync(host_ptr, dev_ptr, nbytes, stream), "cuMemcpyDtoHAsync")
        driver.check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize")
    kernel_errors.raise_pending(index)


def item(a: _array.CudaArray):
    """The value of a one-element array as a Python scalar."""
    capture.check_not_capturing("read a tensor's value on the host (item(), float(), "
                                "bool(), int())", a.device)
    n = _array.numel(a)
    if n != 1:
        raise ValueError(f"item() needs an array with one element, got shape {a.shape}")
    if a.dtype is D.bfloat16:  # numpy has no bfloat16: widen the 16 bits by hand
        raw = np.empty(1, np.uint16)
        _device_to_host(raw.ctypes.data, a.data_ptr(), 2, a.device)
        return float((raw.astype(np.uint32) << 16).view(np.float32)[0])
    out = np.empty(1, _TO_NUMPY[a.dtype])
    _device_to_host(out.ctypes.data, a.data_ptr(), out.nbytes, a.device)
    return out[0].item()


def copy_across_devices(dst: _array.CudaArray, src: _array.CudaArray) -> _array.CudaArray:
    """``dst[...] = src`` where they live on different devices (casting if dtypes differ)."""
    same_dtype = dst.dtype is src.dtype
    src_c = _contiguous(src)
    direct = same_dtype and _array.is_contiguous(dst)
    target = dst if direct else _array.empty(src.shape, src.dtype, dst.device)
    nbytes = _array.numel(src) * src.dtype.itemsize
    if nbytes:
        cu = driver.driver()
        src_stream = streams.current_stream(src.device)
        dst_stream = streams.current_stream(dst.device)
        dst_stream.wait_stream(src_stream)  # the copy reads src after its producers ran
        with driver.using_device(dst.device):
            driver.check(cu.cuMemcpyPeerAsync(
                target.data_ptr(), driver.context(dst.device), src_c.data_ptr(),
                driver.context(src.device), nbytes, dst_stream.handle), "cuMemcpyPeerAsync")
        # src's memory must not be reused on its own stream before the copy has read it.
        src_stream.wait_stream(dst_stream)
    if not direct:
        with _device.device(dst.device):
            kernels.elementwise.copy_(dst, target)
    return dst
