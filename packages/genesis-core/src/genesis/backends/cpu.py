"""The CPU backend: genesis's contract implemented on PyTorch's CPU kernels.

Arrays are ``torch.Tensor`` objects on the CPU. Genesis never lets torch see autograd:
every array here has ``requires_grad=False``; gradients are genesis's own.
"""

from __future__ import annotations

import operator

import numpy as np
import torch

from genesis import dtypes as D
from genesis.backends.base import Backend
from genesis.backends.seed import initial_seed

_TO_TORCH = {
    D.bool_: torch.bool, D.uint8: torch.uint8, D.int8: torch.int8, D.int16: torch.int16,
    D.int32: torch.int32, D.int64: torch.int64, D.float16: torch.float16,
    D.bfloat16: torch.bfloat16, D.float32: torch.float32, D.float64: torch.float64,
}
_FROM_TORCH = {v: k for k, v in _TO_TORCH.items()}

# torch has no out= for these; they are written through copy_ when out is given.
_NO_OUT_UNARY = {
    "relu": torch.relu, "isnan": torch.isnan, "isinf": torch.isinf, "isfinite": torch.isfinite,
    "silu": torch.nn.functional.silu,  # (torch has no torch.silu)
}
# Every declared kernel is the torch function of the same name.
_UNARY = {op: getattr(torch, op) for op in Backend.UNARY_OPS if op not in _NO_OUT_UNARY}
_BINARY = {op: getattr(torch, op) for op in Backend.BINARY_OPS}
_NEEDS_TENSOR_B = {"maximum", "minimum", "atan2"}  # torch rejects a Python scalar there
# x86's integer division traps on MIN / -1 for 32- and 64-bit operands (int8 and int16 are
# widened first): torch's kernels would kill the process with SIGFPE there.
_TRAPPING_DIVISIONS = {"floor_divide", "remainder"}
_TRAPPING_INTS = (torch.int32, torch.int64)

# torch's CPU flash attention (forward and backward), where this torch has it with masks
_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_FLASH_BACKWARD = getattr(torch.ops.aten,
                          "_scaled_dot_product_flash_attention_for_cpu_backward", None)
if _FLASH is None or _FLASH_BACKWARD is None \
        or "attn_mask" not in str(_FLASH_BACKWARD.default._schema):
    _FLASH = _FLASH_BACKWARD = None


def to_torch_dtype(dtype: D.DType) -> torch.dtype:
    """The torch dtype matching a genesis dtype."""
    return _TO_TORCH[dtype]


class CPUBackend(Backend):
    """Runs every kernel with torch on the host."""

    name = "cpu"

    def __init__(self) -> None:
        self._default_gen: torch.Generator | None = None

    # device
    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def synchronize(self, index) -> None:
        return None

    def set_num_threads(self, n: int) -> None:
        torch.set_num_threads(n)

    def get_num_threads(self) -> int:
        return torch.get_num_threads()

    # array basics
    def dtype_of(self, a):
        return _FROM_TORCH[a.dtype]

    def device_index_of(self, a):
        return None

    def strides_of(self, a):
        return a.stride()

    def storage_offset_of(self, a):
        return a.storage_offset()

    def data_ptr(self, a):
        return a.data_ptr()

    # A view's whole host cost is a few hundred nanoseconds: these are torch's as_strided
    # itself, not a method around it (a Python frame, or torch's slower-parsing method form
    # ``a.as_strided(...)``, is a large part of that cost). Given no offset, torch keeps
    # ``a``'s own: that is ``view``.
    as_strided = staticmethod(torch.as_strided)
    view = staticmethod(torch.as_strided)

    def reinterpret(self, a, dtype):
        return a.view(_TO_TORCH[dtype])

    # creation
    def empty(self, shape, dtype, index):
        return torch.empty(shape, dtype=_TO_TORCH[dtype])

    def full(self, shape, value, dtype, index):
        return torch.full(shape, value, dtype=_TO_TORCH[dtype])

    def arange(self, start, end, step, dtype, index):
        return torch.arange(start, end, step, dtype=_TO_TORCH[dtype])

    def from_numpy(self, data, index):
        if not data.flags.writeable:
            data = data.copy()  # torch cannot wrap read-only memory
        return torch.from_numpy(data)

    def to_numpy(self, a):
        return a.numpy()

    def from_dlpack(self, obj, index):
        return torch.from_dlpack(obj)

    def to_dlpack(self, a, stream=None):
        return a.__dlpack__()

    def dlpack_device(self, a):
        return a.__dlpack_device__()

    # copies and casts
    def copy_(self, dst, src):
        return dst.copy_(src)

    def contiguous(self, a):
        return a.contiguous()

    def cast(self, a, dtype):
        return a.to(_TO_TORCH[dtype])

    def item(self, a):
        return a.item()

    # elementwise
    def unary(self, op, a, out=None):
        kernel = self.unary_kernel(op)
        return kernel(a) if out is None else kernel(a, out=out)

    def binary(self, op, a, b, out=None):
        kernel = self.binary_kernel(op)
        return kernel(a, b) if out is None else kernel(a, b, out=out)

    # The kernels are torch's functions themselves where torch takes the contract's call
    # (``out`` by keyword only): a Python wrapper would add a frame to every tiny op.
    def unary_kernel(self, op):
        fn = _UNARY.get(op)
        if fn is not None:
            return fn
        fn = _NO_OUT_UNARY[op]

        def kernel(a, out=None):
            result = fn(a)
            return result if out is None else out.copy_(result)

        return kernel

    def binary_kernel(self, op):
        fn = _BINARY[op]
        if op in _TRAPPING_DIVISIONS:
            return _without_overflow_trap(op, fn)
        if op in _NEEDS_TENSOR_B:
            def kernel(a, b, out=None):
                if not isinstance(b, torch.Tensor):
                    b = torch.tensor(b, dtype=a.dtype)
                return fn(a, b) if out is None else fn(a, b, out=out)

            return kernel
        return fn

    def inplace_kernel(self, op):
        method = getattr(torch.Tensor, op + "_", None)  # torch's own x.add_(y): no out= to parse
        if method is None or op in _NEEDS_TENSOR_B or op in _TRAPPING_DIVISIONS:
            return super().inplace_kernel(op)
        return method

    def where(self, cond, a, b):
        if not isinstance(a, torch.Tensor):
            a = torch.tensor(a, dtype=b.dtype)
        if not isinstance(b, torch.Tensor):
            b = torch.tensor(b, dtype=a.dtype)
        return torch.where(cond, a, b)

    def clamp(self, a, lo, hi, out=None):
        return torch.clamp(a, lo, hi, out=out)

    # reductions
    def sum(self, a, dims, keepdim, dtype):
        if not dims:
            return a.to(_TO_TORCH[dtype], copy=True)
        t = _TO_TORCH[dtype]
        if t is a.dtype:  # torch's cheapest calls: its argument parsing is the cost here
            return torch.sum(a) if not keepdim and len(dims) == a.dim() else \
                torch.sum(a, dims, keepdim)
        return torch.sum(a, dims, keepdim=keepdim, dtype=t)

    def prod(self, a, dims, keepdim, dtype):
        t = _TO_TORCH[dtype]
        out = a.to(t, copy=True)
        for d in sorted(dims, reverse=True):  # torch.prod takes one dim at a time
            out = torch.prod(out, d, keepdim=keepdim, dtype=t)  # (ints would widen to int64)
        return out

    def amax(self, a, dims, keepdim):
        return torch.amax(a, dims, keepdim=keepdim) if dims else a.clone()

    def amin(self, a, dims, keepdim):
        return torch.amin(a, dims, keepdim=keepdim) if dims else a.clone()

    def argmax(self, a, dim, keepdim):
        return torch.argmax(a, dim, keepdim=keepdim)

    def argmin(self, a, dim, keepdim):
        return torch.argmin(a, dim, keepdim=keepdim)

    def all(self, a, dims, keepdim):
        if not dims:  # 0-d: torch keeps uint8 as uint8 (0/1), like its reductions
            return (a != 0).to(torch.uint8 if a.dtype is torch.uint8 else torch.bool)
        return torch.all(a, dim=dims, keepdim=keepdim)

    def any(self, a, dims, keepdim):
        if not dims:  # 0-d: torch keeps uint8 as uint8 (0/1), like its reductions
            return (a != 0).to(torch.uint8 if a.dtype is torch.uint8 else torch.bool)
        return torch.any(a, dim=dims, keepdim=keepdim)

    def cumsum(self, a, dim, dtype):
        return torch.cumsum(a, dim, dtype=_TO_TORCH[dtype])

    # linalg
    # torch's matmul itself, not a method around it (a Python frame is 3 % of a 4x4 product's
    # host time); ``operator.matmul`` is ``a @ b``, torch's cheapest call of it
    matmul = staticmethod(operator.matmul)

    def linear(self, x, weight, bias):
        return torch.nn.functional.linear(x, weight, bias)

    # indexing
    def gather(self, a, dim, index):
        return torch.gather(a, dim, index)

    def scatter(self, a, dim, index, src, reduce):
        if reduce == "add":
            if not isinstance(src, torch.Tensor):
                src = torch.full(index.shape, src, dtype=a.dtype)
            return torch.scatter_add(a, dim, index, src)
        return torch.scatter(a, dim, index, src)

    def index_select(self, a, dim, index):
        return torch.index_select(a, dim, index)

    def index_add(self, a, dim, index, src):
        return torch.index_add(a, dim, index, src)

    def index_add_(self, a, dim, index, src):
        return a.index_add_(dim, index, src)

    def index(self, a, indices):
        return a[tuple(slice(None) if i is None else i for i in indices)]

    def index_put_(self, a, indices, values, accumulate):
        if accumulate:  # genesis passes no None entries here (see the contract)
            return a.index_put_(tuple(indices), values, accumulate=True)
        a[tuple(slice(None) if i is None else i for i in indices)] = values
        return a

    def nonzero(self, a):
        return torch.nonzero(a)

    def sort(self, a, dim, descending, stable):
        values, indices = torch.sort(a, dim=dim, descending=descending, stable=stable)
        return values, indices

    def topk(self, a, k, dim, largest, sorted):
        values, indices = torch.topk(a, k, dim=dim, largest=largest, sorted=sorted)
        return values, indices

    # layout
    def cat(self, arrays, dim):
        return torch.cat(list(arrays), dim)

    def flip(self, a, dims):
        return torch.flip(a, dims)

    def tril(self, a, k):
        return torch.tril(a, k)

    def triu(self, a, k):
        return torch.triu(a, k)

    # random
    def new_generator(self, index):
        return torch.Generator()

    def default_generator(self, index):
        if self._default_gen is None:
            self._default_gen = torch.Generator()
            self._default_gen.manual_seed(initial_seed())
        return self._default_gen

    def manual_seed_generator(self, gen, seed):
        gen.manual_seed(seed)

    def get_generator_state(self, gen):
        return gen.get_state().numpy().copy()

    def set_generator_state(self, gen, state):
        gen.set_state(torch.from_numpy(np.ascontiguousarray(state, dtype=np.uint8)))

    def uniform_(self, a, low, high, gen):
        return a.uniform_(low, high, generator=gen)

    def normal_(self, a, mean, std, gen):
        return a.normal_(mean, std, generator=gen)

    def random_(self, a, low, high, gen):
        return a.random_(low, high, generator=gen)

    def randperm(self, n, dtype, index, gen):
        return torch.randperm(n, dtype=_TO_TORCH[dtype], generator=gen)


# ------------------------------------------------------------- fused kernels, by op name
# torch has these on the CPU; every other fused op runs its composite (genesis.fused_op).
def _softmax(x, dim, log):
    if x.dtype in (torch.float16, torch.bfloat16):
        fn = torch.log_softmax if log else torch.softmax
        return fn(x, dim, dtype=torch.float32).to(x.dtype)
    return torch.log_softmax(x, dim) if log else torch.softmax(x, dim)


def _attention(q, k, v, mask, dropout_p, is_causal, scale, gen):
    # torch's flash kernel: no dropout, one head size for q, k and v, and no empty operand
    # (it divides by zero on one)
    if _FLASH is None or dropout_p > 0.0 or v.shape[-1] != q.shape[-1] \
            or not q.numel() or not k.numel():
        return NotImplemented
    out, lse = _FLASH(q, k, v, 0.0, is_causal, attn_mask=_additive_mask(mask, q.dtype),
                      scale=scale)
    return out, lse, None


def _attention_backward(grad, q, k, v, out, lse, mask, dropout_p, is_causal, scale, rng):
    return _FLASH_BACKWARD(grad, q, k, v, out, lse, 0.0, is_causal,
                           attn_mask=_additive_mask(mask, q.dtype), scale=scale)


CPUBackend.register_kernel("softmax", _softmax)
CPUBackend.register_kernel("scaled_dot_product_attention", _attention)
CPUBackend.register_kernel("scaled_dot_product_attention_backward", _attention_backward)


def _without_overflow_trap(op, fn):
    """torch's ``floor_divide``/``remainder`` kernel ``fn`` with a divisor of -1 kept out of
    the hardware division for int32/int64 (see ``_TRAPPING_INTS``): the quotient by -1 is
    the negation, wrapping MIN to MIN as any other integer overflow; the remainder is 0.
    ``a`` and ``b`` have one shape here (genesis broadcasts first)."""
    by_minus_one = torch.neg if op == "floor_divide" else torch.zeros_like

    def kernel(a, b, out=None):
        if a.dtype in _TRAPPING_INTS:
            if isinstance(b, torch.Tensor):
                minus_one = b == -1
                if minus_one.any():
                    result = torch.where(minus_one, by_minus_one(a),
                                         fn(a, b.masked_fill(minus_one, 1)))
                    return result if out is None else out.copy_(result)
            elif b == -1:
                result = by_minus_one(a)
                return result if out is None else out.copy_(result)
        return fn(a, b) if out is None else fn(a, b, out=out)

    return kernel


def _additive_mask(mask, dtype):
    """The contract's mask (bool, True = may attend; or float, added) as the float mask of
    ``dtype`` that torch's flash kernel takes. Only the stored values are converted: a mask
    broadcast to (B, Hq, L, S) keeps its zero strides."""
    if mask is None or mask.dtype is dtype:
        return mask
    stored = mask[tuple(slice(0, 1) if step == 0 else slice(None) for step in mask.stride())]
    if stored.dtype is torch.bool:
        stored = torch.zeros(stored.shape, dtype=dtype).masked_fill_(~stored, float("-inf"))
    return stored.to(dtype).expand(mask.shape)
