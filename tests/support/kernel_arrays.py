"""Getting data into and out of genesis_cuda's Triton kernels, for the kernel tests.

Two ways, one per family of tests:

- ``to_dev`` / ``to_torch``: a real ``CudaArray`` (copied in through ``transfer``) with a
  torch tensor's values *and* geometry, and back to a contiguous CPU torch tensor. Needs a
  GPU (``test_kernels_{indexing,layout,matmul,random,sorting}.py``).
- ``dev`` / ``host`` (with ``wrap``, ``make``, ``check``): a CudaArray-like ``View`` of a
  torch tensor's own storage (no copy, any stride pattern), and back. Outputs come from
  genesis's allocator. Also runs under the Triton interpreter on the CPU
  (``TRITON_INTERPRET=1``): importing this module then installs the converter the kernels'
  launcher needs, makes kernel outputs torch-backed views and gives device 0 an error word
  in a CPU tensor (``test_kernels_{elementwise,norms,reduction,index_bounds}.py``).
"""

from __future__ import annotations

import os

import torch

from genesis import dtypes as D

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEV = "cpu" if INTERPRET else "cuda"

TORCH = {D.bool_: torch.bool, D.uint8: torch.uint8, D.int8: torch.int8, D.int16: torch.int16,
         D.int32: torch.int32, D.int64: torch.int64, D.float16: torch.float16,
         D.bfloat16: torch.bfloat16, D.float32: torch.float32, D.float64: torch.float64}
GENESIS = {v: k for k, v in TORCH.items()}


# ------------------------------------------------------------------ real CudaArrays
def to_dev(t: torch.Tensor):
    """A CudaArray with ``t``'s values *and* geometry (strides, storage offset)."""
    import genesis_cuda.backend  # noqa: F401 - device init installs Triton's stream hooks
    from genesis_cuda import array, transfer

    flat = t.detach().new_empty(0).set_(t.untyped_storage()).cpu()
    raw = flat.view(torch.int16) if t.dtype is torch.bfloat16 else flat
    base = transfer.from_numpy(raw.numpy(), 0)
    return array.new_array(tuple(t.shape), tuple(t.stride()), t.storage_offset(),
                           GENESIS[t.dtype], base.storage, base.device)


def to_torch(a) -> torch.Tensor:
    """``a``'s values as a contiguous CPU torch tensor."""
    from genesis_cuda import array, transfer
    from genesis_cuda.kernels.layout import clone

    c = clone(a)
    if a.dtype is D.bfloat16:
        c = array.new_array(c.shape, c.strides, 0, D.int16, c.storage, c.device)
        return torch.from_numpy(transfer.to_numpy(c)).view(torch.bfloat16)
    return torch.from_numpy(transfer.to_numpy(c))


# ------------------------------------------------------------------ views of torch storage
class _Storage:
    __slots__ = ("ptr", "flat")


class View:
    """A CudaArray-like view of a torch tensor's storage (what the kernels read)."""

    __slots__ = ("shape", "strides", "offset", "dtype", "storage", "device")

    def data_ptr(self):
        return self.storage.ptr + self.offset * self.dtype.itemsize


# Every wrapped storage, to map kernel-internal views back to tensors under the interpreter.
_storages: list = []


def wrap(t: torch.Tensor) -> View:
    st = _Storage()
    st.flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage())
    st.ptr = st.flat.data_ptr()
    if INTERPRET:
        _storages.append(st)
    v = View()
    v.shape, v.strides, v.offset = tuple(t.shape), tuple(t.stride()), t.storage_offset()
    v.dtype, v.storage, v.device = GENESIS[t.dtype], st, 0
    return v


def _shim_empty(shape, dtype, device):
    return wrap(torch.empty(shape, dtype=TORCH[dtype], device=DEV))


def _interpret_arg(a):
    if hasattr(a, "storage") and hasattr(a.storage, "flat"):  # a View
        return a.storage.flat[a.offset:]
    addr = a.data_ptr()  # a kernel-internal view: find the storage holding it
    for st in reversed(_storages):
        size = st.flat.numel() * st.flat.element_size()
        if st.ptr <= addr < st.ptr + max(size, 1):
            return st.flat[(addr - st.ptr) // st.flat.element_size():]
    raise AssertionError("address outside every wrapped storage")


class HostErrorWord(View):
    """The indexing kernels' error word (``genesis_cuda.kernel_errors``) in a CPU tensor: the
    interpreter's stand-in for device 0's ``DeviceWord``."""

    __slots__ = ()

    def read(self):
        return tuple(int(v) for v in self.storage.flat[:3])

    def clear(self):
        self.storage.flat.zero_()


def _host_error_word() -> HostErrorWord:
    v = wrap(torch.zeros(4, dtype=torch.int64, device=DEV))
    w = HostErrorWord()
    w.shape, w.strides, w.offset, w.dtype, w.storage, w.device = (
        v.shape, v.strides, v.offset, v.dtype, v.storage, v.device)
    return w


if INTERPRET:
    from genesis_cuda import kernel_errors
    from genesis_cuda.kernels import _launch

    _launch.interpret_arg = _interpret_arg
    _launch.empty = _shim_empty
    kernel_errors._words[0] = _host_error_word()


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def dev(t: torch.Tensor) -> View:
    sync()
    return wrap(t)


def host(a) -> torch.Tensor:
    """A torch tensor with ``a``'s values (copied through the copy kernel if not a View)."""
    from genesis_cuda.kernels.elementwise import copy_

    sync()
    if isinstance(a, torch.Tensor):
        return a
    if isinstance(a, View):
        return a.storage.flat.as_strided(a.shape, a.strides, a.offset).clone()
    out = torch.empty(a.shape, dtype=TORCH[a.dtype], device=DEV)
    copy_(wrap(out), a)
    sync()
    return out


def make(shape, dtype, low=None, high=None, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    td = TORCH[dtype]
    if dtype is D.bool_:
        t = torch.rand(shape, generator=g) > 0.5
    elif dtype.is_floating_point:
        t = torch.randn(shape, generator=g, dtype=torch.float64) * 2
        if low is not None:
            t = t.abs() + low
        t = t.to(td)
    else:
        lo = -50 if low is None else low
        if dtype is D.uint8:
            lo = max(lo, 0)
        hi = 50 if high is None else high
        t = torch.randint(lo, hi, shape, generator=g).to(td)
    return t.to(DEV)


def check(got, ref):
    got = host(got)
    assert got.dtype == ref.dtype, (got.dtype, ref.dtype)
    assert tuple(got.shape) == tuple(ref.shape)
    torch.testing.assert_close(got, ref, equal_nan=True)
