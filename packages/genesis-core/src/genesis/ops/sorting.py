"""Sorting: sort, argsort, topk (values are differentiable through their indices)."""

from __future__ import annotations

from collections import namedtuple

from genesis import creation
from genesis import dtypes as D
from genesis.autograd.function import Function
from genesis.ops.common import normalize_dim, wrap
from genesis.tensor import Tensor

sort_result = namedtuple("sort", ["values", "indices"])
topk_result = namedtuple("topk", ["values", "indices"])
kthvalue_result = namedtuple("kthvalue", ["values", "indices"])


class _SelectAlongDim(Function):
    """Values picked along ``dim`` by an index the kernel computed; grads scatter back."""

    @staticmethod
    def forward(ctx, x, dim, pick):
        values, indices = pick(x)
        values, indices = wrap(values, x.device), wrap(indices, x.device)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.in_shape, ctx.dim = x.shape, dim
        return values, indices

    @staticmethod
    def backward(ctx, g, _g_indices):
        (indices,) = ctx.saved_tensors
        if not len(ctx.in_shape):
            return g, None, None
        gx = creation.zeros(ctx.in_shape, dtype=g.dtype, device=g.device)
        return gx.scatter(ctx.dim, indices, g), None, None


def sort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False):
    """Sort along ``dim``: ``(values, indices)``; NaN counts as the largest value.

    Args:
        input: the input tensor.
        dim: the dim to sort along.
        descending: sort from the largest.
        stable: keep the order of equal elements.

    Returns:
        A named pair ``(values, indices)``.
    """
    if input.ndim == 0:
        return sort_result(input.clone(), creation.zeros((), dtype=D.int64,
                                                        device=input.device))
    d = normalize_dim(dim, input.ndim)
    pick = lambda x: x._backend.sort(x._data, d, descending, stable)  # noqa: E731
    return sort_result(*_SelectAlongDim.apply(input, d, pick))


def argsort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False):
    """Indices that sort ``input`` along ``dim``.

    Args:
        input: the input tensor.
        dim: the dim to sort along.
        descending: sort from the largest.
        stable: keep the order of equal elements.

    Returns:
        An int64 tensor of ``input``'s shape.
    """
    return sort(input, dim, descending, stable).indices


def msort(input: Tensor) -> Tensor:
    """``input`` sorted along dim 0 in ascending order.

    Args:
        input: the tensor to sort.

    Returns:
        The sorted values (``sort(input, 0).values``).
    """
    return sort(input, 0).values


def topk(input: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):  # noqa: A002
    """The ``k`` largest (or smallest) elements along ``dim``: ``(values, indices)``.

    Args:
        input: the input tensor.
        k: how many elements.
        dim: the dim to search.
        largest: False: the smallest instead.
        sorted: return them in sorted order.

    Returns:
        A named pair ``(values, indices)``.
    """
    d = normalize_dim(dim, input.ndim)
    n = input.shape[d] if input.ndim else 1
    if not 0 <= k <= n:
        raise RuntimeError(f"selected index k out of range: k={k} for dimension {d} of size {n}")
    if input.ndim == 0:
        return topk_result(*sort(input))
    pick = lambda x: x._backend.topk(x._data, k, d, largest, sorted)  # noqa: E731
    return topk_result(*_SelectAlongDim.apply(input, d, pick))


def kthvalue(input: Tensor, k: int, dim: int = -1, keepdim: bool = False):
    """The ``k``-th smallest element of ``input`` along ``dim``, and its index.

    Args:
        input: the tensor to search.
        k: the rank, from 1 (the smallest).
        dim: the dim to search along.
        keepdim: whether ``dim`` stays, with size 1.

    Returns:
        A named pair ``(values, indices)``.
    """
    values, indices = sort(input, dim)
    d = normalize_dim(dim, input.ndim)
    v, i = values.narrow(d, k - 1, 1), indices.narrow(d, k - 1, 1)
    return kthvalue_result(*((v, i) if keepdim else (v.squeeze(d), i.squeeze(d))))
