"""Reductions built on the declared ones (``declared_reductions``: sum, prod, amax/amin,
all/any, argmax/argmin): mean, var/std, max/min along a dim, logsumexp, count_nonzero, norm;
plus cumsum."""

from __future__ import annotations

import math

from genesis import creation
from genesis import dtypes as D
from genesis.autocast import is_autocast_enabled
from genesis.autograd.function import Function
from genesis.autograd.grad_mode import is_grad_enabled
from genesis.ops.common import normalize_dim, normalize_dims, wrap
from genesis.ops.declared_reductions import (
    SUM_DTYPE,
    _unreduce,
    amax,
    amin,
    sum,
    values_indices,
)
from genesis.ops.elementwise import where
from genesis.tensor import Tensor

Sum = sum.function  # mean's accumulation


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
    if not input.dtype.is_floating_point:  # (torch's words: it names var, not mean)
        raise RuntimeError(f"std and var only support floating point and complex dtypes, got "
                           f"{input.dtype}")
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
        dtype = dtype or SUM_DTYPE[x.dtype]
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
