"""``CUDABackend``: genesis's backend contract on CUDA, found through the entry point
``cuda = "genesis_cuda.backend:CUDABackend"`` of the ``genesis.backends`` group.

The host-side methods (geometry, allocation, transfers, generators, streams) are written
here; every kernel method delegates to a function of the same name and signature (minus
``self``) in one of the ``genesis_cuda.kernels`` modules. A kernel is looked up on its
first call and then bound on the instance, so later calls go straight to the kernel
function with no wrapper in between.

Constructing the backend touches no GPU: CUDA is initialised when the first CUDA array is
made. ``is_available()`` and ``device_count()`` never raise (False / 0 without a GPU,
driver or cuda-python).
"""

from __future__ import annotations

import importlib

from genesis.backends.base import Backend
from genesis.dtypes import float64
from genesis_cuda import array as _array
from genesis_cuda import device as _device
from genesis_cuda import generator as _generator
from genesis_cuda import memory as _memory
from genesis_cuda import transfer as _transfer
from genesis_cuda import triton_hooks  # noqa: F401 - registers the device-init hook

# Contract method -> kernel modules to look in, in order (the first that defines it wins).
_ROUTES: dict[str, tuple[str, ...]] = {
    "unary": ("elementwise",), "binary": ("elementwise",), "clamp": ("elementwise",),
    "where": ("elementwise", "indexing"), "fill_": ("elementwise",),
    "copy_": ("elementwise",), "cast": ("elementwise",), "contiguous": ("elementwise",),
    "unary_kernel": ("elementwise",), "binary_kernel": ("elementwise",),
    "sum": ("reduction",), "prod": ("reduction",), "amax": ("reduction",),
    "amin": ("reduction",), "argmax": ("reduction", "sorting"),
    "argmin": ("reduction", "sorting"), "all": ("reduction",), "any": ("reduction",),
    "cumsum": ("reduction", "layout", "sorting"),
    "matmul": ("matmul",), "linear": ("matmul",),
    "gather": ("indexing",), "scatter": ("indexing",), "index_select": ("indexing",),
    "index_add": ("indexing",), "index": ("indexing",), "index_put_": ("indexing",),
    "nonzero": ("indexing",),
    "sort": ("sorting",), "topk": ("sorting",),
    "cat": ("layout",), "flip": ("layout",), "tril": ("layout",), "triu": ("layout",),
    "arange": ("layout",),
    "uniform_": ("random",), "normal_": ("random",), "random_": ("random",),
    "randperm": ("random", "sorting"),
    "softmax": ("softmax",), "softmax_backward": ("softmax",),
    "layer_norm": ("norms",), "layer_norm_backward": ("norms",),
    "rms_norm": ("norms",), "rms_norm_backward": ("norms",),
    # fused LLM-training kernels (issue 9)
    "cross_entropy": ("cross_entropy",), "cross_entropy_backward": ("cross_entropy",),
    "adam_step": ("optim",), "sgd_step": ("optim",), "multi_tensor_norm": ("multi_tensor",),
    "multi_tensor_scale_": ("multi_tensor",), "amp_unscale_": ("multi_tensor",),
    "swiglu": ("swiglu",), "swiglu_backward": ("swiglu",), "add_rms_norm": ("add_rms_norm",),
    "rotary": ("rotary",),
}
# Fused kernels the contract lets a backend leave out (base.Backend composes them).
_OPTIONAL = frozenset({"softmax", "softmax_backward", "layer_norm", "layer_norm_backward",
                       "rms_norm", "rms_norm_backward", "unary_kernel", "binary_kernel",
                       "linear", "cross_entropy", "cross_entropy_backward",
                       "adam_step", "sgd_step", "multi_tensor_norm",
                       "multi_tensor_scale_", "amp_unscale_", "swiglu", "swiglu_backward",
                       "add_rms_norm", "rotary"})


def find_kernel(name: str):
    """The kernel function ``name`` from the first ``genesis_cuda.kernels`` module that
    defines it, or ``None``."""
    for module in _ROUTES[name]:
        full = f"genesis_cuda.kernels.{module}"
        try:
            mod = importlib.import_module(full)
        except ModuleNotFoundError as exc:
            if exc.name in (full, "genesis_cuda.kernels"):
                continue  # that kernel file is not written (yet)
            raise
        fn = getattr(mod, name, None)
        if fn is not None:
            return fn
    return None


class CUDABackend(Backend):
    """NVIDIA GPUs through cuda-python (memory, streams) and Triton (kernels)."""

    name = "cuda"

    def __init__(self) -> None:
        self._kernels: dict = {}  # kernels looked up per call (see layer_norm)

    def _bind(self, name: str):
        """Find kernel ``name``, bind it on this instance (shadowing the method), return it."""
        fn = find_kernel(name)
        if fn is None:
            if name in _OPTIONAL:
                fn = getattr(super(), name)  # the contract's composite default
            else:
                where = ", ".join(f"genesis_cuda/kernels/{m}.py" for m in _ROUTES[name])
                raise NotImplementedError(
                    f"the CUDA backend has no '{name}' kernel (looked in {where})")
        self.__dict__[name] = fn
        return fn

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
        from genesis_cuda import api

        return api

    def memory_stats(self, index) -> dict:
        return _memory.memory_stats(index)

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
        return _array.CudaArray(shape, strides, offset, a.dtype, a.storage, a.device)

    def reinterpret(self, a, dtype):
        if dtype.itemsize != a.dtype.itemsize:
            raise TypeError(f"cannot reinterpret {a.dtype} as {dtype}: element sizes differ "
                            f"({a.dtype.itemsize} vs {dtype.itemsize} bytes)")
        return _array.CudaArray(a.shape, a.strides, a.offset, dtype, a.storage, a.device)

    # -------------------------------------------------------------- creation
    def empty(self, shape, dtype, index):
        return _array.empty(shape, dtype, _device._current_device if index is None else index)

    def full(self, shape, value, dtype, index):
        out = self.empty(shape, dtype, index)
        if out.storage.ptr:  # nothing to fill in an empty array
            self.fill_(out, value)
        return out

    def fill_(self, a, value):
        """Not in the contract: fill ``a`` in place (``kernels.elementwise.fill_``)."""
        return self._bind("fill_")(a, value)

    def arange(self, start, end, step, dtype, index):
        index = _device._current_device if index is None else index
        return self._bind("arange")(start, end, step, dtype, index)

    def from_numpy(self, data, index):
        return _transfer.from_numpy(data, _device._current_device if index is None else index)

    def to_numpy(self, a):
        return _transfer.to_numpy(a)

    def from_dlpack(self, capsule_or_obj, index):
        from genesis_cuda import dlpack

        return dlpack.from_dlpack(capsule_or_obj, index)

    def to_dlpack(self, a, stream=None):
        from genesis_cuda import dlpack

        return dlpack.to_dlpack(a, stream)

    def dlpack_device(self, a):
        return (2, a.device)  # kDLCUDA

    # ------------------------------------------------------ copies and casts
    _copy_kernel = None  # kernels.elementwise.copy_, found on first use

    def copy_(self, dst, src):
        if dst.device != src.device:
            return _transfer.copy_across_devices(dst, src)
        kernel = self._copy_kernel
        if kernel is None:
            kernel = self._copy_kernel = find_kernel("copy_")
            if kernel is None:
                raise NotImplementedError("the CUDA backend has no 'copy_' kernel "
                                          "(looked in genesis_cuda/kernels/elementwise.py)")
        return kernel(dst, src)

    def contiguous(self, a):
        if _array.is_contiguous(a):
            return a
        return self._bind("contiguous")(a)

    def cast(self, a, dtype):
        if a.dtype is dtype:
            return a
        return self._bind("cast")(a, dtype)

    def item(self, a):
        return _transfer.item(a)

    # ------------------------------------------------------------ elementwise
    def unary(self, op, a, out=None):
        return self._bind("unary")(op, a, out)

    def binary(self, op, a, b, out=None):
        return self._bind("binary")(op, a, b, out)

    def unary_kernel(self, op):
        factory = find_kernel("unary_kernel")
        if factory is not None:
            return factory(op)
        unary = self.__dict__.get("unary") or self._bind("unary")
        return lambda a, out=None: unary(op, a, out)

    def binary_kernel(self, op):
        factory = find_kernel("binary_kernel")
        if factory is not None:
            return factory(op)
        binary = self.__dict__.get("binary") or self._bind("binary")
        return lambda a, b, out=None: binary(op, a, b, out)

    def where(self, cond, a, b):
        return self._bind("where")(cond, a, b)

    def clamp(self, a, lo, hi, out=None):
        return self._bind("clamp")(a, lo, hi, out)

    # -------------------------------------------------------------- reductions
    def sum(self, a, dims, keepdim, dtype):
        return self._bind("sum")(a, dims, keepdim, dtype)

    def prod(self, a, dims, keepdim, dtype):
        return self._bind("prod")(a, dims, keepdim, dtype)

    def amax(self, a, dims, keepdim):
        return self._bind("amax")(a, dims, keepdim)

    def amin(self, a, dims, keepdim):
        return self._bind("amin")(a, dims, keepdim)

    def argmax(self, a, dim, keepdim):
        return self._bind("argmax")(a, dim, keepdim)

    def argmin(self, a, dim, keepdim):
        return self._bind("argmin")(a, dim, keepdim)

    def all(self, a, dims, keepdim):
        return self._bind("all")(a, dims, keepdim)

    def any(self, a, dims, keepdim):
        return self._bind("any")(a, dims, keepdim)

    def cumsum(self, a, dim, dtype):
        return self._bind("cumsum")(a, dim, dtype)

    # ------------------------------------------------------------------ linalg
    def matmul(self, a, b):
        return self._bind("matmul")(a, b)

    def linear(self, x, weight, bias):
        return self._bind("linear")(x, weight, bias)

    # ---------------------------------------------------------------- indexing
    def gather(self, a, dim, index):
        return self._bind("gather")(a, dim, index)

    def scatter(self, a, dim, index, src, reduce):
        return self._bind("scatter")(a, dim, index, src, reduce)

    def index_select(self, a, dim, index):
        return self._bind("index_select")(a, dim, index)

    def index_add(self, a, dim, index, src):
        return self._bind("index_add")(a, dim, index, src)

    def index(self, a, indices):
        return self._bind("index")(a, indices)

    def index_put_(self, a, indices, values, accumulate):
        return self._bind("index_put_")(a, indices, values, accumulate)

    def nonzero(self, a):
        return self._bind("nonzero")(a)

    def sort(self, a, dim, descending, stable):
        return self._bind("sort")(a, dim, descending, stable)

    def topk(self, a, k, dim, largest, sorted):
        return self._bind("topk")(a, k, dim, largest, sorted)

    # ----------------------------------------------------------------- layout
    def cat(self, arrays, dim):
        return self._bind("cat")(arrays, dim)

    def flip(self, a, dims):
        return self._bind("flip")(a, dims)

    def tril(self, a, k):
        return self._bind("tril")(a, k)

    def triu(self, a, k):
        return self._bind("triu")(a, k)

    # ------------------------------------------------------------------ random
    def new_generator(self, index):
        index = _device._current_device if index is None else index
        return _generator.PhiloxGenerator(index, _generator.initial_seed())

    def default_generator(self, index):
        return _generator.default_generator(_device._current_device if index is None else index)

    def manual_seed_generator(self, gen, seed):
        gen.manual_seed(seed)

    def get_generator_state(self, gen):
        return gen.get_state()

    def set_generator_state(self, gen, state):
        gen.set_state(state)

    def uniform_(self, a, low, high, gen):
        return self._bind("uniform_")(a, low, high, gen)

    def normal_(self, a, mean, std, gen):
        return self._bind("normal_")(a, mean, std, gen)

    def random_(self, a, low, high, gen):
        return self._bind("random_")(a, low, high, gen)

    def randperm(self, n, dtype, index, gen):
        index = _device._current_device if index is None else index
        return self._bind("randperm")(n, dtype, index, gen)

    # ----------------------------------------------- optional fused kernels
    def softmax(self, x, dim, log):
        return self._bind("softmax")(x, dim, log)

    def softmax_backward(self, y, grad, dim, log):
        return self._bind("softmax_backward")(y, grad, dim, log)

    # The norm kernels accumulate in float32; float64 inputs take the contract's composite,
    # which accumulates in float64 (so these four are looked up per call, not bound).
    def layer_norm(self, x, weight, bias, eps):
        if x.dtype is float64:
            return super().layer_norm(x, weight, bias, eps)
        return self._kernel("layer_norm")(x, weight, bias, eps)

    def layer_norm_backward(self, grad, x, weight, mean, rstd):
        if x.dtype is float64:
            return super().layer_norm_backward(grad, x, weight, mean, rstd)
        return self._kernel("layer_norm_backward")(grad, x, weight, mean, rstd)

    def rms_norm(self, x, weight, eps):
        if x.dtype is float64:
            return super().rms_norm(x, weight, eps)
        return self._kernel("rms_norm")(x, weight, eps)

    def rms_norm_backward(self, grad, x, weight, rstd):
        if x.dtype is float64:
            return super().rms_norm_backward(grad, x, weight, rstd)
        return self._kernel("rms_norm_backward")(grad, x, weight, rstd)

    # fused LLM-training kernels (issue 9)
    def cross_entropy(self, logits, target, ignore_index, label_smoothing):
        return self._bind("cross_entropy")(logits, target, ignore_index, label_smoothing)

    def cross_entropy_backward(self, grad, logits, target, lse, ignore_index, label_smoothing):
        return self._bind("cross_entropy_backward")(grad, logits, target, lse, ignore_index,
                                                    label_smoothing)

    def adam_step(self, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, step, lr,
                  beta1, beta2, eps, weight_decay, decoupled, maximize):
        return self._bind("adam_step")(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
                                       step, lr, beta1, beta2, eps, weight_decay, decoupled,
                                       maximize)

    def sgd_step(self, params, grads, momentum_buffers, lr, momentum, dampening, weight_decay,
                 nesterov, maximize):
        return self._bind("sgd_step")(params, grads, momentum_buffers, lr, momentum, dampening,
                                      weight_decay, nesterov, maximize)

    def multi_tensor_norm(self, arrays, norm_type):
        return self._bind("multi_tensor_norm")(arrays, norm_type)

    def multi_tensor_scale_(self, arrays, scale):
        return self._bind("multi_tensor_scale_")(arrays, scale)

    def amp_unscale_(self, arrays, inv_scale, found_inf):
        return self._bind("amp_unscale_")(arrays, inv_scale, found_inf)

    def swiglu(self, gate, up):
        return self._bind("swiglu")(gate, up)

    def swiglu_backward(self, grad, gate, up):
        return self._bind("swiglu_backward")(grad, gate, up)

    def add_rms_norm(self, x, residual, weight, eps):
        return self._bind("add_rms_norm")(x, residual, weight, eps)

    def rotary(self, q, k, cos, sin, inverse):
        return self._bind("rotary")(q, k, cos, sin, inverse)

    def _kernel(self, name: str):
        """Kernel ``name``, found once and cached without shadowing the method."""
        fn = self._kernels.get(name)
        if fn is None:
            fn = self._kernels[name] = find_kernel(name) or getattr(Backend, name).__get__(self)
        return fn
