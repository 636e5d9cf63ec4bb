"""``CUDABackend``: genesis's backend contract on CUDA, found through the entry point
``cuda = "genesis_cuda.backend:CUDABackend"`` of the ``genesis.backends`` group.

The host side (geometry, allocation, transfers, generators, streams) is written here in a few
lines each; every kernel is one call into a ``genesis_cuda.kernels`` family of the same name
and signature (``kernels.reduction.sum(a, dims, keepdim, dtype)``). The families are imported
on first use, so that constructing the backend touches no GPU and imports no Triton: CUDA is
initialised when the first CUDA array is made. ``is_available()`` and ``device_count()``
never raise (False / 0 without a GPU, driver or cuda-python).

Of the contract's optional methods, ``reinterpret`` and the DLPack and memory methods are
host-side and written here; ``compile_graph`` (``genesis.compile``'s hook) hands the traced
graph to ``genesis_cuda.compiler``. The kernels of the fused ops (softmax, the norms, attention,
cross-entropy, SwiGLU, rotary, the optimizer steps ...) are not methods: they are registered
by op name from ``genesis_cuda.fused_kernels`` at the end of this module.
"""

from __future__ import annotations

import os
from contextlib import nullcontext

from genesis.backends.base import Backend
from genesis_cuda import array, fused_kernels, generator, kernels, memory, transfer
from genesis_cuda import device as _device
from genesis_cuda import triton_hooks as _triton_hooks  # noqa: F401 - its device-init hook
from genesis_cuda.kernels import launch_queue  # (no Triton: the trace's launch queue)


def _index(index) -> int:
    """The ordinal ``index`` names (``None``: the current device)."""
    return _device._current_device if index is None else index


class CUDABackend(Backend):
    """NVIDIA GPUs through cuda-python (memory, streams) and Triton (kernels)."""

    name = "cuda"

    # ------------------------------------------------------------------ device
    def is_available(self) -> bool:
        return _device.is_available()

    def device_count(self) -> int:
        return _device.device_count()

    def current_device(self):
        return _device._current_device

    def synchronize(self, index) -> None:
        _device.synchronize(index)

    def public_api(self):
        from genesis_cuda import api  # the public module imports the whole runtime

        return api

    def memory_stats(self, index) -> dict:
        return memory.memory_stats(index)

    # ----------------------------------------------------------- array basics
    def dtype_of(self, a):
        return a.dtype

    def device_index_of(self, a):
        return a.device

    def strides_of(self, a):
        return a.strides

    def storage_offset_of(self, a):
        return a.offset

    def data_ptr(self, a):
        return a.data_ptr()

    def as_strided(self, a, shape, strides, offset):
        return array.new_array(shape, strides, offset, a.dtype, a.storage, a.device)

    def view(self, a, shape, strides):
        # (the contract's default calls storage_offset_of and as_strided: two Python frames
        # more per view, a fifth of x.view(...)'s host time on this backend)
        return array.new_array(shape, strides, a.offset, a.dtype, a.storage, a.device)

    def reinterpret(self, a, dtype):
        if dtype.itemsize != a.dtype.itemsize:
            raise TypeError(f"cannot reinterpret {a.dtype} as {dtype}: element sizes differ "
                            f"({a.dtype.itemsize} vs {dtype.itemsize} bytes)")
        return array.new_array(a.shape, a.strides, a.offset, dtype, a.storage, a.device)

    # ------------------------------------------------------- creation, transfer
    def empty(self, shape, dtype, index):
        return array.empty(shape, dtype, _index(index))

    def full(self, shape, value, dtype, index):
        out = array.empty(shape, dtype, _index(index))
        return kernels.elementwise.fill_(out, value) if out.storage.ptr else out

    def arange(self, start, end, step, dtype, index):
        return kernels.layout.arange(start, end, step, dtype, _index(index))

    def from_numpy(self, data, index):
        return transfer.from_numpy(data, _index(index))

    def to_numpy(self, a):
        return transfer.to_numpy(a)

    def from_dlpack(self, capsule_or_obj, index):
        from genesis_cuda import dlpack  # ctypes structures, built only for DLPack users

        return dlpack.from_dlpack(capsule_or_obj, index)

    def to_dlpack(self, a, stream=None):
        from genesis_cuda import dlpack

        return dlpack.to_dlpack(a, stream)

    def dlpack_device(self, a):
        return (2, a.device)  # kDLCUDA

    def item(self, a):
        return transfer.item(a)

    # ------------------------------------------------------ copies and casts
    def copy_(self, dst, src):
        if dst.device != src.device:
            return transfer.copy_across_devices(dst, src)
        return kernels.elementwise.copy_(dst, src)

    def contiguous(self, a):
        return a if array.is_contiguous(a) else kernels.elementwise.contiguous(a)

    def cast(self, a, dtype):
        return a if a.dtype is dtype else kernels.elementwise.cast(a, dtype)

    # ------------------------------------------------------------ elementwise
    def unary(self, op, a, out=None):
        return kernels.elementwise.unary(op, a, out)

    def binary(self, op, a, b, out=None):
        return kernels.elementwise.binary(op, a, b, out)

    def unary_kernel(self, op):
        return kernels.elementwise.unary_kernel(op)

    def binary_kernel(self, op):
        return kernels.elementwise.binary_kernel(op)

    def where(self, cond, a, b):
        return kernels.elementwise.where(cond, a, b)

    def clamp(self, a, lo, hi, out=None):
        return kernels.elementwise.clamp(a, lo, hi, out)

    # -------------------------------------------------------------- reductions
    def sum(self, a, dims, keepdim, dtype):
        return kernels.reduction.sum(a, dims, keepdim, dtype)

    def prod(self, a, dims, keepdim, dtype):
        return kernels.reduction.prod(a, dims, keepdim, dtype)

    def amax(self, a, dims, keepdim):
        return kernels.reduction.amax(a, dims, keepdim)

    def amin(self, a, dims, keepdim):
        return kernels.reduction.amin(a, dims, keepdim)

    def argmax(self, a, dim, keepdim):
        return kernels.arg_reduction.argmax(a, dim, keepdim)

    def argmin(self, a, dim, keepdim):
        return kernels.arg_reduction.argmin(a, dim, keepdim)

    def all(self, a, dims, keepdim):
        return kernels.reduction.all(a, dims, keepdim)

    def any(self, a, dims, keepdim):
        return kernels.reduction.any(a, dims, keepdim)

    def cumsum(self, a, dim, dtype):
        return kernels.reduction.cumsum(a, dim, dtype)

    # ------------------------------------------------------------------ linalg
    def matmul(self, a, b):
        return kernels.matmul.matmul(a, b)

    def linear(self, x, weight, bias):
        return kernels.matmul.linear(x, weight, bias)

    # ---------------------------------------------------------------- indexing
    def index(self, a, indices):
        return kernels.indexing.index(a, indices)

    def index_put_(self, a, indices, values, accumulate):
        return kernels.indexing.index_put_(a, indices, values, accumulate)

    def gather(self, a, dim, index):
        return kernels.indexing.gather(a, dim, index)

    def scatter(self, a, dim, index, src, reduce):
        return kernels.indexing.scatter(a, dim, index, src, reduce)

    def index_select(self, a, dim, index):
        return kernels.indexing.index_select(a, dim, index)

    def index_add(self, a, dim, index, src):
        return kernels.indexing.index_add(a, dim, index, src)

    def index_add_(self, a, dim, index, src):
        return kernels.indexing.index_add_(a, dim, index, src)

    def nonzero(self, a):
        return kernels.indexing.nonzero(a)

    def sort(self, a, dim, descending, stable):
        return kernels.sorting.sort(a, dim, descending, stable)

    def topk(self, a, k, dim, largest, sorted):
        return kernels.sorting.topk(a, k, dim, largest, sorted)

    # ----------------------------------------------------------------- layout
    def cat(self, arrays, dim):
        return kernels.layout.cat(arrays, dim)

    def flip(self, a, dims):
        return kernels.layout.flip(a, dims)

    def tril(self, a, k):
        return kernels.layout.tril(a, k)

    def triu(self, a, k):
        return kernels.layout.triu(a, k)

    # ------------------------------------------------------------------ random
    def new_generator(self, index):
        return generator.PhiloxGenerator(_index(index), generator.initial_seed())

    def default_generator(self, index):
        return generator.default_generator(_index(index))

    def manual_seed_generator(self, gen, seed):
        gen.manual_seed(seed)

    def get_generator_state(self, gen):
        return gen.get_state()

    def set_generator_state(self, gen, state):
        gen.set_state(state)

    def uniform_(self, a, low, high, gen):
        return kernels.random.uniform_(a, low, high, gen)

    def normal_(self, a, mean, std, gen):
        return kernels.random.normal_(a, mean, std, gen)

    def random_(self, a, low, high, gen):
        return kernels.random.random_(a, low, high, gen)

    def randperm(self, n, dtype, index, gen):
        return kernels.random.randperm(n, dtype, _index(index), gen)

    # ---------------------------------------------------------------- compiler
    def compile_graph(self, graph, options):
        """genesis.compile's hook: the graph fused into generated Triton kernels and, by
        default, replayed as a CUDA graph (``genesis_cuda.compiler.backend_hook``)."""
        from genesis_cuda.compiler import backend_hook  # Triton and the compiler: on demand

        return backend_hook.compile_graph(graph, options)

    def tracing(self):
        """genesis.compile's trace: this thread's kernel launches are deferred, so the
        kernels the trace meets for the first time compile side by side, beside the
        compiler's own (``kernels.launch_queue``). Nothing before CUDA is in use, or under
        the Triton interpreter (which compiles nothing)."""
        if not _device.is_initialized() or os.environ.get("TRITON_INTERPRET") == "1":
            return nullcontext()
        from genesis_cuda.kernels import parallel_compile  # Triton: on demand

        return launch_queue.deferring(parallel_compile.collect, parallel_compile.compile_jobs)


for _name, _kernel in fused_kernels.KERNELS.items():  # the fused ops' kernels, by op name
    CUDABackend.register_kernel(_name, _kernel)
