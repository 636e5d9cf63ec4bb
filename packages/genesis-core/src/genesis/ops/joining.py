"""Joining, splitting and rearranging: cat, stack, split, chunk, repeat, tile,
repeat_interleave, flip, roll, tril, triu."""

from __future__ import annotations

import numpy as np

from genesis import creation
from genesis import dtypes as D
from genesis.autograd.function import Function
from genesis.ops.common import check_same_device, normalize_dim, normalize_dims, wrap
from genesis.ops.strided import narrow
from genesis.tensor import Tensor


class Cat(Function):
    @staticmethod
    def forward(ctx, dim, *tensors):
        dtype = D.result_type(*tensors) if len({t.dtype for t in tensors}) > 1 \
            else tensors[0].dtype
        arrays = [(t if t.dtype is dtype else t.to(dtype))._data for t in tensors]
        ctx.sizes = [t.shape[dim] for t in tensors]
        ctx.dtypes = [t.dtype for t in tensors]
        ctx.dim = dim
        return wrap(tensors[0]._backend.cat(arrays, dim), tensors[0].device)

    @staticmethod
    def backward(ctx, g):
        grads, start = [None], 0
        for size, dtype in zip(ctx.sizes, ctx.dtypes):
            piece = narrow(g, ctx.dim, start, size)
            grads.append(piece if piece.dtype is dtype else piece.to(dtype))
            start += size
        return tuple(grads)


def cat(tensors, dim: int = 0) -> Tensor:
    """Concatenate tensors along ``dim`` (other dims must match; dtypes promote).

    Args:
        tensors: a sequence of tensors, the same shape except in ``dim``.
        dim: the dim to join along.

    Returns:
        A new tensor.
    """
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("cat(): expected a non-empty list of Tensors")
    # torch skips legacy empty 1-d tensors when other inputs have more dims
    # (len(shape), not the ndim property: a property is a call, several per tensor here)
    kept = [t for t in tensors if not (len(t.shape) == 1 and t.shape[0] == 0)] or tensors[:1]
    check_same_device("cat", *kept)
    ref = kept[0]
    nd = len(ref.shape)
    if nd == 0:
        raise RuntimeError("zero-dimensional tensor (at position 0) cannot be concatenated")
    d = normalize_dim(dim, nd)
    for i, t in enumerate(kept):
        if len(t.shape) != nd:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {nd} "
                               f"and {t.ndim}")
        for k in range(nd):
            if k != d and t.shape[k] != ref.shape[k]:
                raise RuntimeError(
                    f"Sizes of tensors must match except in dimension {d}. Expected size "
                    f"{ref.shape[k]} but got size {t.shape[k]} for tensor number {i} in the "
                    f"list (shapes {tuple(ref.shape)} and {tuple(t.shape)}).")
    return Cat.apply(d, *kept)


concat = concatenate = cat


def stack(tensors, dim: int = 0) -> Tensor:
    """Join same-shaped tensors along a new dim.

    Args:
        tensors: a sequence of tensors of one shape.
        dim: the position of the new dim.

    Returns:
        A new tensor with one more dim.
    """
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    for i, t in enumerate(tensors):
        if t.shape != tensors[0].shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got "
                               f"{list(tensors[0].shape)} at entry 0 and {list(t.shape)} at "
                               f"entry {i}")
    d = normalize_dim(dim, tensors[0].ndim + 1)
    return cat([t.unsqueeze(d) for t in tensors], d)


def hstack(tensors) -> Tensor:
    """Concatenate tensors horizontally: along dim 1, or dim 0 for 1-d tensors.

    Args:
        tensors: a sequence of tensors with matching shapes except in the joined dim.

    Returns:
        A new tensor.
    """
    tensors = list(tensors)
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors) -> Tensor:
    """Stack tensors vertically: 0-d and 1-d tensors become rows, then ``cat`` on dim 0.

    Args:
        tensors: a sequence of tensors with matching shapes except in dim 0.

    Returns:
        A new tensor of at least two dims.
    """
    return cat([t.reshape(1, -1) if t.ndim < 2 else t for t in tensors], 0)


def split(tensor: Tensor, split_size_or_sections, dim: int = 0) -> tuple:
    """Views of ``tensor`` in pieces of a size (last may be smaller) or given sizes.

    Args:
        tensor: the input tensor.
        split_size_or_sections: the size of each piece (an int), or a list of sizes.
        dim: the dim to split along.

    Returns:
        A tuple of views.
    """
    d = normalize_dim(dim, tensor.ndim)
    n = tensor.shape[d]
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        if size <= 0:
            raise RuntimeError(f"split expects split_size be positive, got {size}")
        sizes = [min(size, n - s) for s in range(0, n, size)] or [0]
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if sum(sizes) != n:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} "
                               f"(input tensor's size at dimension {d}), but got "
                               f"split_sizes={sizes}")
    out, start = [], 0
    for s in sizes:
        out.append(narrow(tensor, d, start, s))
        start += s
    return tuple(out)


def chunk(tensor: Tensor, chunks: int, dim: int = 0) -> tuple:
    """Split into ``chunks`` nearly equal views (the last may be smaller).

    Args:
        tensor: the input tensor.
        chunks: the number of pieces wanted.
        dim: the dim to split along.

    Returns:
        A tuple of views (fewer than ``chunks`` when the size does not allow more).
    """
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    n = tensor.shape[normalize_dim(dim, tensor.ndim)]
    if n == 0:  # torch gives `chunks` empty pieces
        return split(tensor, [0] * chunks, dim)
    size = max(1, -(-n // chunks))
    return split(tensor, size, dim)


def tensor_split(tensor: Tensor, sections: int, dim: int = 0) -> tuple:
    """Split ``tensor`` into ``sections`` views of nearly equal size along ``dim``.

    The first ``size % sections`` pieces are one element longer, as torch's.

    Args:
        tensor: the tensor to split.
        sections: the number of pieces.
        dim: the dim to split along.

    Returns:
        A tuple of ``sections`` views.
    """
    n = tensor.shape[normalize_dim(dim, tensor.ndim)]
    base, extra = divmod(n, sections)
    return split(tensor, [base + (1 if i < extra else 0) for i in range(sections)], dim)


def repeat(tensor: Tensor, *sizes) -> Tensor:
    """Tile ``tensor`` ``sizes[i]`` times along each dim (new leading dims allowed)."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    if len(sizes) < tensor.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number "
                           "of dimensions of tensor")
    shape = (1,) * (len(sizes) - tensor.ndim) + tuple(tensor.shape)
    x = tensor.reshape(shape)
    interleaved, expanded, final = [], [], []
    for r, n in zip(sizes, shape):
        interleaved += [1, n]
        expanded += [r, n]
        final.append(r * n)
    return x.reshape(interleaved).expand(expanded).reshape(final)


def tile(tensor: Tensor, dims) -> Tensor:
    """Like ``repeat``, padding ``dims`` with leading ones when it is shorter.

    Args:
        tensor: the input tensor.
        dims: repetitions per dim.

    Returns:
        A new tensor.
    """
    dims = tuple(dims)
    if len(dims) < tensor.ndim:
        dims = (1,) * (tensor.ndim - len(dims)) + dims
    return repeat(tensor, dims)


def repeat_interleave(input: Tensor, repeats=None, dim=None, *, output_size=None) -> Tensor:
    """Repeat each element ``repeats`` times (an int, or a tensor of per-element counts).

    With ``input`` alone (a tensor of counts), index ``i`` repeated ``input[i]`` times.

    Args:
        input: the input tensor.
        repeats: an int, or an int64 tensor of per-element counts.
        dim: the dim to repeat along; the flattened tensor when None.
        output_size: the total length along ``dim``, if known (saves a host sync).

    Returns:
        A new tensor.
    """
    if repeats is None:
        return repeat_interleave(creation.arange(input.numel(), device=input.device),
                                 input.reshape(-1), 0)
    if dim is None:
        input, dim = input.reshape(-1), 0
    d = normalize_dim(dim, input.ndim)
    n = input.shape[d]
    counts = np.asarray(repeats.tolist() if isinstance(repeats, Tensor) else repeats)
    if counts.ndim == 0:
        counts = np.full(n, int(counts))
    if counts.shape != (n,):
        raise RuntimeError(f"repeats must have the same size as input along dim, but got "
                           f"repeats.size(0) = {counts.size} and input.size({d}) = {n}")
    if (counts < 0).any():
        raise RuntimeError("repeats can not be negative")
    index = creation.from_numpy(np.repeat(np.arange(n, dtype=np.int64), counts)).to(input.device)
    return input.index_select(d, index)


class Flip(Function):
    @staticmethod
    def forward(ctx, x, dims):
        ctx.dims = dims
        return wrap(x._backend.flip(x._data, dims), x.device)

    @staticmethod
    def backward(ctx, g):
        return Flip.apply(g, ctx.dims), None


def flip(input: Tensor, dims) -> Tensor:
    """Reverse the order of elements along ``dims`` (a copy, as in torch).

    Args:
        input: the input tensor.
        dims: the dims to reverse (an int or a sequence).

    Returns:
        A new tensor.
    """
    dims = normalize_dims(dims if not isinstance(dims, int) else (dims,), input.ndim)
    return Flip.apply(input, dims)


def fliplr(input: Tensor) -> Tensor:
    """``input`` with dim 1 reversed (left to right).

    Args:
        input: a tensor of at least two dims.

    Returns:
        A new tensor (a copy, as torch's).
    """
    return flip(input, (1,))


def flipud(input: Tensor) -> Tensor:
    """``input`` with dim 0 reversed (up to down).

    Args:
        input: a tensor of at least one dim.

    Returns:
        A new tensor (a copy, as torch's).
    """
    return flip(input, (0,))


def roll(input: Tensor, shifts, dims=None) -> Tensor:
    """Rotate elements by ``shifts`` along ``dims`` (flattened when dims is None).

    Args:
        input: the input tensor.
        shifts: the shift (an int or one per dim).
        dims: the dims to roll; the flattened tensor when None.

    Returns:
        A new tensor.
    """
    if dims is None:
        return roll(input.reshape(-1), shifts, 0).reshape(input.shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:"
                           f"{len(dims)}")
    out = input
    for s, d in zip(shifts, dims):
        d = normalize_dim(d, input.ndim)
        n = out.shape[d]
        if n == 0:
            continue
        s %= n
        if s:
            out = cat([narrow(out, d, n - s, s), narrow(out, d, 0, n - s)], d)
    return out if out is not input else input.clone()  # a new tensor even unmoved, as torch


class _Triangle(Function):
    upper = False

    @classmethod
    def forward(cls, ctx, x, k):
        ctx.k = k
        fn = x._backend.triu if cls.upper else x._backend.tril
        return wrap(fn(x._data, k), x.device)

    @classmethod
    def backward(cls, ctx, g):
        return cls.apply(g, ctx.k), None


class Tril(_Triangle):
    upper = False


class Triu(_Triangle):
    upper = True


def tril(input: Tensor, diagonal: int = 0) -> Tensor:
    """Lower triangle of the last two dims; the rest zero.

    Args:
        input: the input tensor.
        diagonal: which diagonal bounds the triangle (0: the main one; >0 above).

    Returns:
        A new tensor.
    """
    if input.ndim < 2:
        raise RuntimeError("tril: input tensor must have at least 2 dimensions")
    return Tril.apply(input, int(diagonal))


def triu(input: Tensor, diagonal: int = 0) -> Tensor:
    """Upper triangle of the last two dims; the rest zero.

    Args:
        input: the input tensor.
        diagonal: which diagonal bounds the triangle (0: the main one; >0 above).

    Returns:
        A new tensor.
    """
    if input.ndim < 2:
        raise RuntimeError("triu: input tensor must have at least 2 dimensions")
    return Triu.apply(input, int(diagonal))
