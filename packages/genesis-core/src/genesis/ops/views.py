"""View ops: new shapes and strides over the same memory (no copies).

Every view is made through the backend's ``as_strided`` from geometry computed here, so a
backend implements one view primitive. Views share their base's version counter. This module
reorders, broadcasts, squeezes and flattens dims; ``view``/``reshape`` are in
``genesis.ops.reshaping``; views at explicit positions (basic indexing, narrow/select,
as_strided, unfold) and a base's history after an in-place op on one of its views are in
``genesis.ops.strided``.
"""

from __future__ import annotations

import math

from genesis.autograd.entries import constants_entry
from genesis.autograd.function import Function
from genesis.ops.common import normalize_dim, sum_to_shape
from genesis.ops.reshaping import _infer_shape, reshape, view
from genesis.tensor import Tensor, geometry, interned_size, view_tensor


def make_view(x: Tensor, shape, strides, offset) -> Tensor:
    """A tensor viewing ``x``'s memory with the given geometry (records no graph; no kernel
    and no allocation: the backend only describes the same storage anew)."""
    shape, strides = interned_size(tuple(shape)), tuple(strides)
    return view_tensor(x, x._backend.as_strided(x._data, shape, strides, offset), shape,
                       (strides, offset))


class Permute(Function):
    kernel_forward = True

    @staticmethod
    def forward(ctx, x, dims):
        strides, offset = geometry(x)
        ctx.dims = dims
        return make_view(x, [x.shape[d] for d in dims], [strides[d] for d in dims], offset)

    @staticmethod
    def backward(ctx, g):
        inverse = [0] * len(ctx.dims)
        for i, d in enumerate(ctx.dims):
            inverse[d] = i
        return g.permute(inverse), None


_permute = constants_entry(Permute, 1)  # (x, dims): Permute.apply's steps for its arity


def permute(x: Tensor, *dims) -> Tensor:
    """Reorder the dimensions (a view).

    Args:
        x: the input tensor.
        *dims: the new order of the dims (ints, or one tuple).

    Returns:
        A view.
    """
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    nd = len(x.shape)  # (not the ndim property: a call)
    dims = tuple(normalize_dim(int(d), nd) for d in dims)
    if len(dims) != nd or len(set(dims)) != nd:
        raise RuntimeError(f"permute: dims {dims} are not a permutation of the {x.ndim} dims "
                           f"of a tensor of shape {tuple(x.shape)}")
    return _permute(x, dims)


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    """Swap two dimensions (a view).

    Args:
        x: the input tensor.
        dim0: a dim.
        dim1: another dim.

    Returns:
        A view.
    """
    nd = len(x.shape)  # (not the ndim property: a call)
    if nd == 0:
        return x
    d0, d1 = normalize_dim(dim0, nd), normalize_dim(dim1, nd)
    dims = list(range(nd))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return _permute(x, tuple(dims))


swapaxes = swapdims = transpose


def t(x: Tensor) -> Tensor:
    """Transpose a matrix (0-d and 1-d tensors: a view of the same shape).

    Args:
        x: the input tensor.

    Returns:
        A view.
    """
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {x.ndim}D")
    return view(x, x.shape) if x.ndim < 2 else transpose(x, 0, 1)  # (a view, as torch)


def movedim(x: Tensor, source, destination) -> Tensor:
    """Move dims at ``source`` to positions ``destination`` (a view).

    Args:
        x: the input tensor.
        source: a dim or a sequence of dims to move.
        destination: their new positions.

    Returns:
        A view.
    """
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [normalize_dim(d, x.ndim) for d in src]
    dst = [normalize_dim(d, x.ndim) for d in dst]
    order = [d for d in range(x.ndim) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return _permute(x, tuple(order))


moveaxis = movedim


class Expand(Function):
    kernel_forward = True

    @staticmethod
    def forward(ctx, x, shape):
        strides, offset = geometry(x)
        pad = len(shape) - len(x.shape)
        new_strides = [0] * pad
        for i, (n, s) in enumerate(zip(x.shape, strides)):
            target = shape[pad + i]
            if n == target:
                new_strides.append(s)
            elif n == 1:
                new_strides.append(0)
            else:
                raise RuntimeError(
                    f"The expanded size of the tensor ({target}) must match the existing size "
                    f"({n}) at non-singleton dimension {pad + i}.  Target sizes: {list(shape)}."
                    f"  Tensor sizes: {list(x.shape)}")
        ctx.in_shape = x.shape
        return make_view(x, shape, new_strides, offset)

    @staticmethod
    def backward(ctx, g):
        return sum_to_shape(g, ctx.in_shape), None


def expand(x: Tensor, *shape) -> Tensor:
    """Broadcast size-1 dims to ``shape`` without copying (``-1`` keeps a size).

    Args:
        x: the input tensor.
        *shape: the new shape (ints, or one tuple); ``-1`` keeps a dim's size.

    Returns:
        A view with zero strides in the expanded dims.
    """
    shape = tuple(int(s) for s in (shape[0] if len(shape) == 1 and isinstance(
        shape[0], (tuple, list)) else shape))
    if len(shape) < x.ndim:
        raise RuntimeError(
            f"expand: the number of sizes provided ({len(shape)}) must be greater or equal to "
            f"the number of dimensions in the tensor ({x.ndim})")
    pad = len(shape) - x.ndim
    shape = tuple(x.shape[i - pad] if s == -1 and i >= pad else s for i, s in enumerate(shape))
    if shape == x.shape:
        return x
    return expand_to(x, shape)


# ``Expand.apply(x, shape)`` for a checked ``shape``, as a dispatcher entry of known arity
# (also the unreduction of a reduction's gradient: see declared_reductions._unreduce)
expand_to = constants_entry(Expand, 1)


def expand_as(x: Tensor, other: Tensor) -> Tensor:
    return expand(x, other.shape)


def broadcast_to(x: Tensor, shape) -> Tensor:
    """A view of ``x`` broadcast to ``shape`` (as ``x.expand(shape)``).

    Args:
        x: the tensor to broadcast.
        shape: the target shape; ``-1`` keeps a dim's size.

    Returns:
        A view with zero strides along the broadcast dims (no copy).
    """
    return expand(x, tuple(shape))


def squeeze(x: Tensor, dim=None) -> Tensor:
    """Drop size-1 dims (all, or those in ``dim``).

    Args:
        x: the input tensor.
        dim: an int or a tuple of dims to drop if their size is 1; all size-1 dims when None.

    Returns:
        A view.
    """
    if dim is None:
        shape = tuple(n for n in x.shape if n != 1)
    else:
        dims = {normalize_dim(d, x.ndim) for d in ((dim,) if isinstance(dim, int) else dim)}
        shape = tuple(n for i, n in enumerate(x.shape) if not (i in dims and n == 1))
    return view(x, shape)  # (a new view even when no dim goes, as torch)


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """Insert a size-1 dim at ``dim``.

    Args:
        x: the input tensor.
        dim: the position of the new dim.

    Returns:
        A view with one more dim.
    """
    d = normalize_dim(dim, x.ndim + 1)
    shape = x.shape[:d] + (1,) + x.shape[d:]
    strides, offset = geometry(x)
    inner = strides[d] * x.shape[d] if d < x.ndim else 1
    new_strides = strides[:d] + (inner,) + strides[d:]
    return _GeometryView.apply(x, shape, new_strides, offset)


class _GeometryView(Function):
    """A view whose gradient is a reshape back (unsqueeze and friends)."""

    @staticmethod
    def forward(ctx, x, shape, strides, offset):
        ctx.in_shape = x.shape
        return make_view(x, shape, strides, offset)

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.in_shape), None, None, None


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dims ``start_dim..end_dim`` into one.

    Args:
        x: the input tensor.
        start_dim: the first dim to merge.
        end_dim: the last dim to merge.

    Returns:
        A view when possible, otherwise a copy.
    """
    if x.ndim == 0:
        return reshape(x, 1)
    s, e = normalize_dim(start_dim, x.ndim), normalize_dim(end_dim, x.ndim)
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    n = math.prod(x.shape[s:e + 1])
    return reshape(x, x.shape[:s] + (n,) + x.shape[e + 1:])


def unflatten(x: Tensor, dim: int, sizes) -> Tensor:
    """Split dim ``dim`` into ``sizes`` (one may be -1).

    Args:
        x: the input tensor.
        dim: the dim to split.
        sizes: the new sizes, whose product is ``x.shape[dim]``.

    Returns:
        A view.
    """
    d = normalize_dim(dim, x.ndim)
    sizes = _infer_shape(tuple(sizes), x.shape[d])
    return reshape(x, x.shape[:d] + sizes + x.shape[d + 1:])


def ravel(x: Tensor) -> Tensor:
    """``x`` flattened to one dim: a view when possible, otherwise a copy.

    Args:
        x: the tensor to flatten.

    Returns:
        A 1-d tensor of ``x.numel()`` elements.
    """
    return reshape(x, -1)
