"""Indexing along one dim by an index tensor: gather/scatter/scatter_add,
index_select/index_add, and bincount (an index_add of ones or weights)."""

from __future__ import annotations

from genesis import creation
from genesis import dtypes as D
from genesis.autograd.function import Function
from genesis.autograd.grad_mode import is_grad_enabled
from genesis.ops.common import check_same_device, normalize_dim, wrap
from genesis.ops.declared_elementwise import scalar_for
from genesis.ops.indexing import _check_dim_index, _check_index_tensor
from genesis.tensor import Tensor


# ------------------------------------------------------- gather and scatter
class Gather(Function):
    @staticmethod
    def forward(ctx, x, dim, index):
        ctx.in_shape, ctx.dim = x.shape, dim
        ctx.save_for_backward(index)
        return wrap(x._backend.gather(x._data, dim, index._data), x.device)

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        gx = creation.zeros(ctx.in_shape, dtype=g.dtype, device=g.device)
        # the Functions, not the public ops: ``index`` was checked once, in forward
        return Scatter.apply(gx, ctx.dim, index, g, "add"), None, None


def _check_gather_shapes(op: str, x: Tensor, dim: int, index: Tensor) -> None:
    if index.ndim != x.ndim:
        raise RuntimeError(f"{op}(): Index tensor must have the same number of dimensions as "
                           f"input tensor ({index.ndim} vs {x.ndim})")
    for d in range(x.ndim):
        if d != dim and index.shape[d] > x.shape[d]:
            raise RuntimeError(
                f"{op}(): Size does not match at dimension {d} expected index "
                f"{list(index.shape)} to be smaller than self {list(x.shape)} apart from "
                f"dimension {dim}")


def gather(input: Tensor, dim: int, index: Tensor) -> Tensor:
    """``out[i][j] = input[i][index[i][j]]`` along ``dim``.

    Args:
        input: the input tensor.
        dim: the dim to index along.
        index: an int64 tensor of ``input``'s ndim.

    Returns:
        A new tensor of ``index``'s shape.
    """
    d = normalize_dim(dim, input.ndim)
    _check_dim_index("gather", input, index)
    _check_gather_shapes("gather", input, d, index)
    index = _check_index_tensor("gather", index, input.shape[d] if input.ndim else 1)
    return Gather.apply(input, d, index)


class Scatter(Function):
    @staticmethod
    def forward(ctx, x, dim, index, src, reduce):
        ctx.dim, ctx.reduce = dim, reduce
        ctx.save_for_backward(index)
        ctx.src_is_tensor = isinstance(src, Tensor)
        if isinstance(src, Tensor):
            data = src._data
        else:  # a Python number, converted the way torch casts it to x's dtype
            data = scalar_for(src, x.dtype)
        return wrap(x._backend.scatter(x._data, dim, index._data, data, reduce), x.device)

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        gx = g if ctx.reduce == "add" else Scatter.apply(g, ctx.dim, index, 0.0, None)
        gsrc = Gather.apply(g, ctx.dim, index) if ctx.src_is_tensor else None
        return gx, None, None, gsrc, None


def _scatter(op, input, dim, index, src, reduce):
    d = normalize_dim(dim, input.ndim)
    _check_dim_index(op, input, index)
    _check_gather_shapes(op, input, d, index)
    if isinstance(src, Tensor):
        check_same_device(op, input, src)
        if src.dtype is not input.dtype:
            raise RuntimeError(f"{op}(): Expected self.dtype to be equal to src.dtype "
                               f"({input.dtype} vs {src.dtype})")
    index = _check_index_tensor(op, index, input.shape[d] if input.ndim else 1)
    return Scatter.apply(input, d, index, src, reduce)


def scatter(input: Tensor, dim: int, index: Tensor, src=None, *, value=None,
            reduce: str | None = None) -> Tensor:
    """A copy of ``input`` with ``src`` (tensor or scalar) written at ``index`` along ``dim``.

    Args:
        input: the input tensor.
        dim: the dim to index along.
        index: an int64 tensor of ``input``'s ndim.
        src: the values: a tensor (at least ``index``'s shape) or a number.
        value: a number, instead of ``src``.
        reduce: None (write), ``'add'`` or ``'multiply'``.

    Returns:
        A new tensor.
    """
    if src is None:
        src = value
    if reduce not in (None, "add"):
        raise ValueError(f"scatter: reduce must be None or 'add', got {reduce!r}")
    return _scatter("scatter", input, dim, index, src, reduce)


def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """A copy of ``input`` with ``src`` added at ``index`` along ``dim``.

    Args:
        input: the input tensor.
        dim: the dim to index along.
        index: an int64 tensor of ``input``'s ndim.
        src: the values to add (at least ``index``'s shape).

    Returns:
        A new tensor.
    """
    return _scatter("scatter_add", input, dim, index, src, "add")


class IndexSelect(Function):
    @staticmethod
    def forward(ctx, x, dim, index):
        ctx.in_shape, ctx.dim = x.shape, dim
        ctx.save_for_backward(index)
        return wrap(x._backend.index_select(x._data, dim, index._data), x.device)

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        gx = creation.zeros(ctx.in_shape, dtype=g.dtype, device=g.device)
        if is_grad_enabled():  # create_graph: the differentiable op, so double backward works
            return IndexAdd.apply(gx, ctx.dim, index, g), None, None
        # into the zeros themselves: one input-sized array (an embedding's weight), not two
        gx._backend.index_add_(gx._data, ctx.dim, index._data, g._data)
        return gx, None, None


def index_select(input: Tensor, dim: int, index: Tensor) -> Tensor:
    """Entries of ``input`` at the 1-d ``index`` along ``dim``.

    Args:
        input: the input tensor.
        dim: the dim to index along.
        index: a 1-d int64 tensor.

    Returns:
        A new tensor with ``len(index)`` entries along ``dim``.
    """
    d = normalize_dim(dim, input.ndim)
    _check_dim_index("index_select", input, index)
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    index = _check_index_tensor("index_select", index if index.ndim == 1 else index.reshape(-1),
                                input.shape[d] if input.ndim else 1)
    return IndexSelect.apply(input, d, index)


class IndexAdd(Function):
    @staticmethod
    def forward(ctx, x, dim, index, src):
        ctx.dim = dim
        ctx.save_for_backward(index)
        return wrap(x._backend.index_add(x._data, dim, index._data, src._data), x.device)

    @staticmethod
    def backward(ctx, g):
        (index,) = ctx.saved_tensors
        return g, None, None, IndexSelect.apply(g, ctx.dim, index)


def index_add(input: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha=1) -> Tensor:
    """A copy of ``input`` with ``alpha * source`` slices added at ``index`` along ``dim``.

    Args:
        input: the input tensor.
        dim: the dim to index along.
        index: a 1-d int64 tensor.
        source: the slices to add, ``index``'s length along ``dim``.
        alpha: a number multiplying ``source``.

    Returns:
        A new tensor.
    """
    d = normalize_dim(dim, input.ndim)
    _check_dim_index("index_add", input, index)
    check_same_device("index_add", input, source)
    if source.dtype is not input.dtype:
        raise RuntimeError(f"index_add(): self ({input.dtype}) and source ({source.dtype}) "
                           "must have the same scalar type")
    expected = list(input.shape)
    if input.ndim:
        expected[d] = index.numel()
    if list(source.shape) != expected and not (input.ndim == 0 and source.numel() == 1):
        raise RuntimeError(f"index_add(): source shape {list(source.shape)} does not match "
                           f"input shape {list(input.shape)} with {index.numel()} indices "
                           f"along dim {d}")
    index = _check_index_tensor("index_add", index.reshape(-1),
                                input.shape[d] if input.ndim else 1)
    if alpha != 1:
        source = source * alpha
    return IndexAdd.apply(input, d, index, source)


def bincount(input: Tensor, weights: Tensor | None = None, minlength: int = 0) -> Tensor:
    """How often each value ``0 .. max(input)`` occurs in the 1-d integer ``input``.

    With ``weights`` (1-d, ``input``'s length), the sum of the weights at each value's
    positions instead (differentiable in ``weights``).

    Args:
        input: 1-d tensor of non-negative integers.
        weights: optional 1-d tensor of ``input``'s length.
        minlength: the least length of the result.

    Returns:
        Shape ``(max(max(input) + 1, minlength),)``: int64 counts, or the weights' sums
        (float32 for float32 weights, float64 otherwise, as torch).

    Example:
        >>> genesis.bincount(genesis.tensor([1, 3, 3]))
        tensor([0, 1, 0, 2])
    """
    if input.ndim != 1 or input.dtype.category != 1 or input.dtype is D.bool_:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs, got "
                           f"{input.dtype} of shape {list(input.shape)}")
    if minlength < 0:
        raise RuntimeError(f"minlength should be >= 0, got {minlength}")
    if weights is not None and (weights.ndim != 1 or weights.shape[0] != input.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input, got "
                           f"weights of shape {list(weights.shape)} for input of shape "
                           f"{list(input.shape)}")
    length = minlength
    if input.numel():  # the result's length depends on the data: one host sync, as in torch
        if int(input.min()) < 0:
            raise RuntimeError("bincount only supports 1-d non-negative integral inputs, got "
                               f"the negative value {int(input.min())}")
        length = max(length, int(input.max()) + 1)
    if weights is None:
        source = input.new_ones(input.shape, dtype=D.int64)
    else:
        check_same_device("bincount", input, weights)
        source = weights.to(D.float32 if weights.dtype is D.float32 else D.float64)
    out = input.new_zeros((length,), dtype=source.dtype)
    index = input if input.dtype is D.int64 else input.to(D.int64)
    return IndexAdd.apply(out, 0, index, source)
