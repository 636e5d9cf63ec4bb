"""Reductions: the declared ones (sum, prod, amax/amin, all/any, argmax/argmin: a row each in
``genesis.op_declarations``) made into Functions and public functions, and the composites
built on them: mean, var/std, max/min along a dim, logsumexp, count_nonzero, norm; plus
cumsum."""

from __future__ import annotations

import math
from collections import namedtuple

from genesis import creation
from genesis import dtypes as D
from genesis import op_declarations as decl
from genesis.autocast import is_autocast_enabled
from genesis.autograd.function import _NO_GRAD_CTX, Function, Node
from genesis.autograd.grad_mode import is_grad_enabled
from genesis.ops.common import KernelTable, argument_picker, normalize_dim, normalize_dims, wrap
from genesis.ops.elementwise import where
from genesis.ops.views import Expand
from genesis.tensor import Tensor, interned_size, new_tensor

values_indices = namedtuple("values_indices", ["values", "indices"])


def _unreduce(g: Tensor, in_shape: tuple, dims: tuple, keepdim: bool) -> Tensor:
    """Broadcast a reduced gradient back to the input's shape."""
    if not keepdim and len(dims) == len(in_shape):  # a full reduction: g is 0-d
        if not in_shape:
            return g
        return Expand.apply(g, in_shape)  # (expand(), its checks known)
    if not keepdim:
        shape = list(g.shape)
        for d in dims:
            shape.insert(d, 1)
        g = g.reshape(shape)
    return g.expand(in_shape)


_SCALAR = interned_size(())
_ALL_DIMS = [()]  # ndim -> (0, 1, ..., ndim - 1)


def _all_dims(ndim: int) -> tuple:
    while len(_ALL_DIMS) <= ndim:
        _ALL_DIMS.append(tuple(range(len(_ALL_DIMS))))
    return _ALL_DIMS[ndim]


def _sum_dtype(dtype: D.DType) -> D.DType:
    return D.int64 if dtype.category < 2 else dtype


# ------------------------------------------------------ the declared reductions
class _Reduce(Function):
    """``y = name(x, dims, keepdim)`` for one declared reduction (``decl``); made by
    ``_reduction_function``."""

    op_name = None  # (the base of the declared reductions, not an op itself)
    decl: decl.Reduction
    grad: tuple  # (formula, picker of its arguments from (g, x, y, dims)): see argument_picker
    kernels: KernelTable  # backend -> its kernel of this reduction
    save_x = save_y = False
    # the row's fields the forward reads, as plain class attributes
    sum_like = refuse_empty = False

    @classmethod
    def forward(cls, ctx, x, dims, keepdim, dtype):
        if cls.refuse_empty and x.numel() == 0 and (not dims or 0 in [x.shape[d] for d in dims]):
            raise RuntimeError(
                f"{cls.op_name}(): Expected reduction dim to be specified for input.numel() "
                "== 0. Specify the reduction dim with the 'dim' argument.")
        backend = x._backend
        kernel = cls.kernels.table.get(backend) or cls.kernels.fetch(backend)
        if cls.sum_like:  # dtype None: decided here, after autocast may have cast x
            dtype = dtype or _sum_dtype(x.dtype)
            data = kernel(x._data, dims, keepdim, dtype)
        else:
            dtype = x.dtype
            data = kernel(x._data, dims, keepdim)
        if keepdim or len(dims) != len(x.shape):
            y = wrap(data, x.device)
        else:  # every dim: a 0-d result, nothing to read back
            y = new_tensor(data, x.device, backend, _SCALAR, dtype)
        if ctx is not _NO_GRAD_CTX:  # (recording)
            cls.save(ctx, x, y, dims, keepdim)
        return y

    @classmethod
    def save(cls, ctx: Node, x, y, dims, keepdim) -> None:
        """Keep what backward reads (x or y only where the gradient formula reads it)."""
        ctx.save_for_backward(x if cls.save_x else None, y if cls.save_y else None)
        ctx.in_shape, ctx.in_dtype, ctx.dims, ctx.keepdim = x.shape, x.dtype, dims, keepdim

    @classmethod
    def backward(cls, ctx, g):
        x, y = ctx.saved_tensors
        shape, dims, keepdim = ctx.in_shape, ctx.dims, ctx.keepdim
        g = _unreduce(g, shape, dims, keepdim)
        if y is not None:
            y = _unreduce(y, shape, dims, keepdim)
        formula, pick = cls.grad
        gx = formula(*pick((g, x, y, dims)))
        return (gx if gx.dtype is ctx.in_dtype else gx.to(ctx.in_dtype)), None, None, None


class _LogicalReduce(Function):
    """all/any along ``dims`` (not differentiable); made by ``_reduction_function``."""

    op_name = None  # (the base of all/any, not an op itself)
    differentiable = False
    kernels: KernelTable

    @classmethod
    def forward(cls, ctx, x, dims, keepdim):
        kernel = cls.kernels.table.get(x._backend) or cls.kernels.fetch(x._backend)
        out = wrap(kernel(x._data, dims, keepdim), x.device)
        # torch keeps uint8 for uint8 inputs (a legacy rule); every other dtype gives bool
        return out.to(D.uint8) if x.dtype is D.uint8 and out.dtype is not D.uint8 else out


class _IndexReduce(Function):
    """argmax/argmin along ``dim``, or over the flattened input when ``dim`` is None (not
    differentiable); made by ``_reduction_function``."""

    op_name = None  # (the base of argmax/argmin, not an op itself)
    differentiable = False
    kernels: KernelTable

    @classmethod
    def forward(cls, ctx, x, dim, keepdim):
        if x.numel() == 0:
            raise RuntimeError(f"{cls.op_name}(): Expected reduction dim to be specified for "
                               "input.numel() == 0.")
        if x.ndim == 0:  # backends get no dim for 0-d arrays: the answer is index 0
            normalize_dim(0 if dim is None else dim, 0)
            return creation.zeros((), dtype=D.int64, device=x.device)
        kernel = cls.kernels.table.get(x._backend) or cls.kernels.fetch(x._backend)
        if dim is None:
            flat = x.reshape(-1)
            out = wrap(kernel(flat._data, 0, False), x.device)
            return out.reshape((1,) * x.ndim) if keepdim else out
        return wrap(kernel(x._data, normalize_dim(dim, x.ndim), keepdim), x.device)


_RESULT = {  # by ``Reduction.result``: what the docstrings say of the result
    "sum": "the input's dtype (int64 for integer and bool inputs), or ``dtype``",
    "keep": "the input's dtype",
    "logical": "bool (uint8 for a uint8 input, as torch)",
    "index": "int64: positions along ``dim`` (in the flattened tensor when ``dim`` is None)",
}
_ARGS = {
    "sum": "input: the input tensor.\ndim: an int or a tuple of ints to reduce; all dims "
           "when None.\nkeepdim: whether the reduced dims stay, with size 1.\n"
           "dtype: the dtype to compute and return in.",
    "keep": "input: the input tensor.\ndim: an int or a tuple of ints to reduce; all dims "
            "when empty.\nkeepdim: whether the reduced dims stay, with size 1.",
    "logical": "input: the input tensor.\ndim: an int or a tuple of ints to reduce; all dims "
               "when None.\nkeepdim: whether the reduced dims stay, with size 1.",
    "index": "input: the input tensor.\ndim: the dim to search; the flattened tensor when "
             "None.\nkeepdim: whether the reduced dim stays, with size 1.",
}


def _reduction_doc(op: decl.Reduction) -> str:
    """The docstring of a declared reduction's public function, from its row."""
    grad = "differentiable" if op.differentiable else "not differentiable"
    autocast = " Under ``genesis.autocast`` it computes in float32." if op.autocast else ""
    args = "\n".join(f"    {line}" for line in _ARGS[op.result].splitlines())
    return (f"The ``{op.name}`` reduction of ``input`` (as ``torch.{op.name}``).\n\n"
            f"The op is {grad}.{autocast}\n\nArgs:\n{args}\n\nReturns:\n"
            f"    A new tensor with ``dim`` reduced; its dtype is {_RESULT[op.result]}.\n")


def _reduction_class(op: decl.Reduction) -> type:
    """The Function of one declared reduction, filled from its row (``Sum``, ``Argmax`` ...;
    the registry knows it as ``op.name``)."""
    fields = {"op_name": op.name, "decl": op, "autocast": op.autocast, "__module__": __name__,
              "kernels": KernelTable(lambda backend: getattr(backend, op.name)),
              "__doc__": f"Autograd Function of ``{op.name}`` (declared in op_declarations)."}
    if op.result == "logical":
        return type(op.name.capitalize(), (_LogicalReduce,), fields)
    if op.result == "index":
        return type(op.name.capitalize(), (_IndexReduce,), fields)
    code = op.grad.__code__
    reads = op.reads()
    return type(op.name.capitalize(), (_Reduce,), {
        **fields, "save_x": "x" in reads, "save_y": "y" in reads,
        "grad": (op.grad, argument_picker(("g", "x", "y", "dims"),
                                          code.co_varnames[:code.co_argcount])),
        "sum_like": op.result == "sum", "refuse_empty": op.refuse_empty})


def _reduction_function(op: decl.Reduction):
    """The public function of a declared reduction: its Function's ``apply``, named."""
    cls = _reduction_class(op)
    apply = cls.apply
    if op.result == "sum":
        def fn(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
            dims = _all_dims(len(input.shape)) if dim is None else \
                normalize_dims(dim, input.ndim)
            return apply(input, dims, keepdim, dtype)
    elif op.result == "keep":
        def fn(input: Tensor, dim=(), keepdim: bool = False) -> Tensor:
            return apply(input, normalize_dims(dim, input.ndim), keepdim, None)
    elif op.result == "logical":
        def fn(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
            return apply(input, normalize_dims(dim, input.ndim), keepdim)
    else:
        def fn(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
            return apply(input, dim, keepdim)

    fn.__name__ = fn.__qualname__ = op.name
    fn.__doc__ = _reduction_doc(op)
    fn.function = cls
    return fn


# name -> public function, for every declared reduction
FUNCTIONS = {op.name: _reduction_function(op) for op in decl.REDUCTIONS}
sum, prod = FUNCTIONS["sum"], FUNCTIONS["prod"]  # noqa: A001 - torch's names
amax, amin = FUNCTIONS["amax"], FUNCTIONS["amin"]
all, any = FUNCTIONS["all"], FUNCTIONS["any"]  # noqa: A001
argmax, argmin = FUNCTIONS["argmax"], FUNCTIONS["argmin"]
Sum = sum.function  # mean's accumulation, and the host-overhead benchmark


def _back_to_half(out: Tensor, dtype, device) -> Tensor:
    """A float32-accumulated result in the half ``dtype`` again, unless autocast is on (it
    wants float32 out of these ops)."""
    return out if is_autocast_enabled(device.type) else out.to(dtype)


def mean(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Arithmetic mean over ``dim`` (floating inputs, or pass ``dtype``).

    Args:
        input: the input tensor.
        dim: an int or a tuple of ints to reduce; all dims when None.
        keepdim: whether the reduced dims stay, with size 1.
        dtype: the dtype to compute and return in.

    Returns:
        A new tensor with ``dim`` reduced.
    """
    if not (dtype or input.dtype).is_floating_point:
        raise RuntimeError(
            "mean(): could not infer output dtype. Input dtype must be either a floating point "
            f"or complex dtype. Got: {input.dtype}")
    dims = normalize_dims(dim, input.ndim)
    n = math.prod(input.shape[d] for d in dims)
    out_dtype = dtype or input.dtype
    if out_dtype in (D.float16, D.bfloat16):  # accumulate in float32 (a half sum overflows)
        out = Sum.apply(input, dims, keepdim, D.float32) / (n if n else float("nan"))
        return _back_to_half(out, out_dtype, input.device)
    return Sum.apply(input, dims, keepdim, dtype) / (n if n else float("nan"))


def var(input: Tensor, dim=None, unbiased=None, keepdim: bool = False, *,
        correction=None) -> Tensor:
    """Variance over ``dim`` with Bessel's ``correction`` (default 1).

    Args:
        input: the input tensor.
        dim: an int or a tuple of ints to reduce; all dims when None.
        unbiased: torch's older name for ``correction`` (True: 1, False: 0).
        keepdim: whether the reduced dims stay, with size 1.
        correction: the difference from the element count in the divisor (default 1).

    Returns:
        A new tensor with ``dim`` reduced.
    """
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    if isinstance(unbiased, bool) is False and unbiased is not None:
        raise TypeError("var(): unbiased must be a bool")
    if input.dtype in (D.float16, D.bfloat16):  # accumulate in float32, as torch does
        return var(input.to(D.float32), dim, unbiased, keepdim,
                   correction=correction).to(input.dtype)
    dims = normalize_dims(dim, input.ndim)
    n = math.prod(input.shape[d] for d in dims)
    centered = input - mean(input, dims, keepdim=True)
    # (not max(): this module's max shadows the builtin)
    return sum(centered * centered, dims, keepdim) / (n - correction if n > correction else 0)


def std(input: Tensor, dim=None, unbiased=None, keepdim: bool = False, *,
        correction=None) -> Tensor:
    """Standard deviation: ``sqrt(var(...))``.

    Args:
        input: the input tensor.
        dim: an int or a tuple of ints to reduce; all dims when None.
        unbiased: torch's older name for ``correction`` (True: 1, False: 0).
        keepdim: whether the reduced dims stay, with size 1.
        correction: the difference from the element count in the divisor (default 1).

    Returns:
        A new tensor with ``dim`` reduced.
    """
    return var(input, dim, unbiased, keepdim, correction=correction).sqrt()


def var_mean(input: Tensor, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """The variance and the mean of ``input`` over ``dim``, as a pair.

    Args:
        input: a floating-point tensor.
        dim: an int or tuple of ints to reduce; all dims when None.
        unbiased: torch's older name for ``correction`` (True: 1, False: 0).
        keepdim: whether the reduced dims stay, with size 1.
        correction: the difference from the element count in the divisor (default 1).

    Returns:
        ``(var(input, ...), mean(input, ...))``.
    """
    return (var(input, dim, unbiased, keepdim, correction=correction),
            mean(input, dim, keepdim))


def std_mean(input: Tensor, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """The standard deviation and the mean of ``input`` over ``dim``, as a pair.

    Args:
        input: a floating-point tensor.
        dim: an int or tuple of ints to reduce; all dims when None.
        unbiased: torch's older name for ``correction`` (True: 1, False: 0).
        keepdim: whether the reduced dims stay, with size 1.
        correction: the difference from the element count in the divisor (default 1).

    Returns:
        ``(std(input, ...), mean(input, ...))``.
    """
    return (std(input, dim, unbiased, keepdim, correction=correction),
            mean(input, dim, keepdim))


class _ExtremeDim(Function):
    """max/min along one dim with indices; the gradient goes to the returned index."""

    largest = True

    @classmethod
    def forward(cls, ctx, x, dim, keepdim):
        if x.ndim and x.shape[dim] == 0:
            raise IndexError(f"max(): Expected reduction dim {dim} to have non-zero size.")
        b = x._backend
        if x.ndim == 0:  # backends get no dim for 0-d arrays: the answer is index 0
            ctx.in_shape, ctx.dim, ctx.keepdim = x.shape, dim, keepdim
            idx = creation.zeros((), dtype=D.int64, device=x.device)
            ctx.mark_non_differentiable(idx)
            ctx.save_for_backward(idx)
            return x.clone(), idx
        idx = wrap((b.argmax if cls.largest else b.argmin)(x._data, dim, True), x.device)
        values = wrap(b.gather(x._data, dim, idx._data), x.device)
        if not keepdim and x.ndim:
            values, idx = values.squeeze(dim), idx.squeeze(dim)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(idx)
        ctx.in_shape, ctx.dim, ctx.keepdim = x.shape, dim, keepdim
        return values, idx

    @classmethod
    def backward(cls, ctx, g, _g_idx):
        (idx,) = ctx.saved_tensors
        if not ctx.keepdim and len(ctx.in_shape):
            g, idx = g.unsqueeze(ctx.dim), idx.unsqueeze(ctx.dim)
        gx = creation.zeros(ctx.in_shape, dtype=g.dtype, device=g.device)
        return gx.scatter(ctx.dim, idx, g) if len(ctx.in_shape) else g, None, None


class MaxDim(_ExtremeDim):
    largest = True


class MinDim(_ExtremeDim):
    largest = False


def max(input: Tensor, dim=None, keepdim: bool = False):  # noqa: A001
    """Maximum of all elements; with ``dim``, ``(values, indices)``; with a tensor,
    the elementwise maximum.

    Args:
        input: the input tensor.
        dim: the dim to reduce, or a tensor (then the elementwise maximum).
        keepdim: whether the reduced dims stay, with size 1.

    Returns:
        A 0-d tensor; with ``dim``, a named pair ``(values, indices)``; with a tensor, a new tensor.
    """
    if isinstance(dim, Tensor):
        return input.maximum(dim)
    if dim is None:
        return amax(input)
    return values_indices(*MaxDim.apply(input, normalize_dim(dim, input.ndim), keepdim))


def min(input: Tensor, dim=None, keepdim: bool = False):  # noqa: A001
    """Minimum of all elements; with ``dim``, ``(values, indices)``; with a tensor,
    the elementwise minimum.

    Args:
        input: the input tensor.
        dim: the dim to reduce, or a tensor (then the elementwise minimum).
        keepdim: whether the reduced dims stay, with size 1.

    Returns:
        A 0-d tensor; with ``dim``, a named pair ``(values, indices)``; with a tensor, a new tensor.
    """
    if isinstance(dim, Tensor):
        return input.minimum(dim)
    if dim is None:
        return amin(input)
    return values_indices(*MinDim.apply(input, normalize_dim(dim, input.ndim), keepdim))


def logsumexp(input: Tensor, dim, keepdim: bool = False) -> Tensor:
    """``log(sum(exp(input)))`` over ``dim``, computed stably.

    Args:
        input: the input tensor.
        dim: an int or a tuple of ints to reduce.
        keepdim: whether the reduced dims stay, with size 1.

    Returns:
        A new tensor with ``dim`` reduced.
    """
    dims = normalize_dims(dim, input.ndim)
    if not input.dtype.is_floating_point:
        input = input.to(D.get_default_dtype())
    m = amax(input.detach(), dims, keepdim=True)
    m = where(m.isinf(), 0.0, m)
    out = (input - m).exp().sum(dims, keepdim=True).log() + m
    return out if keepdim else out.squeeze(dims) if dims else out


def count_nonzero(input: Tensor, dim=None) -> Tensor:
    """The number of non-zero elements of ``input`` over ``dim``.

    Args:
        input: a tensor of any dtype.
        dim: an int or tuple of ints to count over; all dims when None.

    Returns:
        An int64 tensor with ``dim`` removed (0-d when counting over every dim).
    """
    return sum(input != 0, dim)


class Cumsum(Function):
    autocast = "fp32"

    @staticmethod
    def forward(ctx, x, dim, dtype):
        ctx.dim, ctx.in_dtype = dim, x.dtype
        dtype = dtype or _sum_dtype(x.dtype)
        return wrap(x._backend.cumsum(x._data, dim, dtype), x.device)

    @staticmethod
    def backward(ctx, g):
        if not g.ndim:
            return g, None, None
        gx = g.flip(ctx.dim).cumsum(ctx.dim).flip(ctx.dim)
        return (gx if gx.dtype is ctx.in_dtype else gx.to(ctx.in_dtype)), None, None


def cumsum(input: Tensor, dim: int, *, dtype=None) -> Tensor:
    """Inclusive prefix sums along ``dim``.

    Args:
        input: the input tensor.
        dim: the dim to sum along.
        dtype: the result's dtype; int64 for integer inputs when None.

    Returns:
        A new tensor of ``input``'s shape.
    """
    return Cumsum.apply(input, normalize_dim(dim, input.ndim), dtype)


class Norm2(Function):
    """Euclidean norm over dims; its gradient at zero is zero, as in torch."""

    autocast = "fp32"

    @staticmethod
    def forward(ctx, x, dims, keepdim):
        sq = x * x
        out = sum(sq, dims, keepdim=True).sqrt()
        ctx.save_for_backward(x, out)
        ctx.dims, ctx.keepdim = dims, keepdim
        return out if keepdim else out.reshape([n for i, n in enumerate(out.shape)
                                                if i not in dims])

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        if is_grad_enabled():  # create_graph: out must be a function of x for 2nd derivatives
            out = sum(x * x, ctx.dims, keepdim=True).sqrt()
        g = _unreduce(g, x.shape, ctx.dims, ctx.keepdim)
        scale = where(out == 0, 0.0, 1.0 / where(out == 0, 1.0, out))
        return g * x * scale, None, None


def norm(input: Tensor, p="fro", dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """Vector p-norm over ``dim`` (all elements when None): 2/'fro', 1, inf, -inf, 0, any p.

    Args:
        input: the input tensor.
        p: the order: ``'fro'``/2, 1, ``inf``, ``-inf``, 0 or any number.
        dim: an int or a tuple of ints to reduce; all dims when None.
        keepdim: whether the reduced dims stay, with size 1.
        dtype: the dtype to compute and return in.

    Returns:
        A new tensor with ``dim`` reduced.
    """
    if dtype is not None:
        input = input.to(dtype)
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"norm(): input dtype should be floating point, got {input.dtype}")
    if input.dtype in (D.float16, D.bfloat16):  # accumulate in float32, as torch does
        return _back_to_half(norm(input.to(D.float32), p, dim, keepdim), input.dtype,
                             input.device)
    dims = normalize_dims(dim, input.ndim)
    if p in ("fro", 2, 2.0):
        return Norm2.apply(input, dims, keepdim)
    a = input.abs()
    if p == math.inf:
        return amax(a, dims, keepdim)
    if p == -math.inf:
        return amin(a, dims, keepdim)
    if p == 0:  # a count, but still in the graph (zero gradient), as in torch
        return sum(where(a != 0, 1.0, a * 0), dims, keepdim)
    if p == 1:
        return sum(a, dims, keepdim)
    return sum(a ** p, dims, keepdim) ** (1.0 / p)
