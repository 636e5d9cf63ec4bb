"""Indexing: ``x[key]`` (basic and advanced) and its assignment, masked_fill/masked_select,
nonzero and one_hot; the index checks shared with ``dim_indexing`` (gather/scatter,
index_select/index_add, bincount)."""

from __future__ import annotations

from genesis import creation
from genesis import dtypes as D
from genesis.autograd.entries import slice_key_entry
from genesis.autograd.function import Function
from genesis.ops.common import (
    broadcast_shapes,
    check_same_device,
    checks_values,
    sum_to_shape,
    wrap,
)
from genesis.ops.elementwise import where
from genesis.ops.strided import Slice, slice_view
from genesis.tensor import Tensor


# ------------------------------------------------------------- index checks
def _check_index_tensor(op: str, index: Tensor, size: int) -> Tensor:
    """int64 copy of ``index``, after a bounds check where ``checks_values`` allows one
    (negatives then wrapped, for ``x[index]`` only). On an accelerator, by default, nothing
    is read: out-of-range indices are the backend's to meet (the CUDA kernels skip them and
    raise at the next synchronisation, as torch's device-side assert), and negative ones of
    ``x[index]`` its to wrap (the contract's ``index``)."""
    if index.dtype.category != 1:
        raise IndexError(f"{op}: tensors used as indices must be long, int or bool tensors, "
                         f"got {index.dtype}")
    if index.dtype is not D.int64:
        index = index.to(D.int64)
    if not checks_values(index):
        return index
    if index.numel():  # (the backend's reductions: a check, not an op to record)
        backend, data, every_dim = index._backend, index._data, tuple(range(index.ndim))
        lo = backend.item(backend.amin(data, every_dim, False))
        hi = backend.item(backend.amax(data, every_dim, False))
        # only x[index] wraps negative indices; gather, scatter, index_select ... refuse them
        if lo < (-size if op == "index" else 0) or hi >= size:
            bad = hi if hi >= size else lo
            raise IndexError(f"{op}: index {bad} is out of bounds for dimension with size {size}")
        if lo < 0:
            index = index.remainder(size)
    return index


def _check_dim_index(op: str, x: Tensor, index: Tensor) -> None:
    """gather/scatter/index_select/index_add take int64 or int32 indices, as torch does."""
    check_same_device(op, x, index)
    if index.dtype is not D.int64 and index.dtype is not D.int32:
        raise RuntimeError(f"{op}(): Expected dtype int32/int64 for index, got {index.dtype}")


# -------------------------------------------------------------- __getitem__
def _to_index_tensor(k, device) -> Tensor:
    t = creation.tensor(k, device=device)
    if t.dtype.is_floating_point:
        raise IndexError("tensors used as indices must be long, int or bool tensors")
    return t


_EMPTY = object()  # the index `False`: a new dim of size 0


def _split_key(x: Tensor, key):
    """Split an index key into a basic part (a view) and advanced indices on that view.

    Returns ``(basic_key, advanced)`` where ``advanced`` maps a dim of the viewed tensor to
    an index tensor (or is empty).
    """
    if not isinstance(key, tuple):
        key = (key,)
    items = []
    for k in key:
        if type(k) is slice or type(k) is int or k is None or k is Ellipsis:  # (basic items)
            items.append(k)
            continue
        if isinstance(k, Tensor) and k.dtype is D.bool_ and k.ndim == 0:
            k = bool(k.item())
        if isinstance(k, bool):
            items.append(None if k else _EMPTY)
        elif isinstance(k, (list,)) or (not isinstance(k, (int, slice, Tensor))
                                        and k is not None and k is not Ellipsis
                                        and hasattr(k, "__len__")):
            items.append(_to_index_tensor(k, x.device))
        elif isinstance(k, Tensor) or k is None or k is Ellipsis or isinstance(k, slice):
            items.append(k)
        elif hasattr(k, "__index__"):
            items.append(int(k.__index__()))
        else:
            raise IndexError(f"unsupported index type {type(k).__name__}")
    # dims each item consumes (a bool mask consumes as many dims as it has)
    consumed = 0
    for k in items:
        if type(k) is slice or type(k) is int:
            consumed += 1
        elif isinstance(k, Tensor):
            consumed += k.ndim if k.dtype is D.bool_ else 1
    # identity tests only: `==` on a list of tensors would compare elementwise
    n_ellipsis = sum(1 for k in items if k is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if consumed > len(x.shape):
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    if n_ellipsis:
        i = next(j for j, k in enumerate(items) if k is Ellipsis)
        items[i:i + 1] = [slice(None)] * (len(x.shape) - consumed)
    basic, advanced, view_dim, src_dim = [], {}, 0, 0
    for k in items:
        if type(k) is slice:  # (items are slices, ints, None, _EMPTY or index tensors)
            basic.append(k)
            view_dim += 1
            src_dim += 1
        elif type(k) is int:
            basic.append(k)
            src_dim += 1
        elif k is None:
            basic.append(None)
            view_dim += 1
        elif k is _EMPTY:
            basic.append(None)
            advanced[view_dim] = _empty_index(x.device)
            view_dim += 1
        else:  # index tensor
            check_same_device("index", x, k)
            if k.dtype is D.bool_:
                mask_shape = x.shape[src_dim:src_dim + k.ndim]
                if tuple(k.shape) != tuple(mask_shape):
                    raise IndexError(
                        f"The shape of the mask {list(k.shape)} at index {src_dim} does not "
                        f"match the shape of the indexed tensor {list(x.shape)}")
                for j, coords in enumerate(nonzero(k, as_tuple=True)):
                    basic.append(slice(None))
                    advanced[view_dim] = coords
                    view_dim += 1
                    src_dim += 1 if j < k.ndim else 0
            else:
                basic.append(slice(None))
                advanced[view_dim] = k
                view_dim += 1
                src_dim += 1
    return tuple(basic), advanced


def _empty_index(device) -> Tensor:
    return creation.zeros(0, dtype=D.int64, device=device)


def _prepare_advanced(view: Tensor, advanced: dict) -> list:
    """Per-dim entries for ``Backend.index``: checked int64 arrays broadcast together."""
    tensors = {d: _check_index_tensor("index", t, view.shape[d]) for d, t in advanced.items()}
    if len(tensors) == 1:  # nothing to broadcast together
        return [tensors.get(d) for d in range(view.ndim)]
    shape = broadcast_shapes(*(t.shape for t in tensors.values()))
    return [tensors[d].expand(shape) if d in tensors else None for d in range(view.ndim)]


class Index(Function):
    @staticmethod
    def forward(ctx, x, indices):
        ctx.in_shape, ctx.indices = x.shape, indices
        arrays = [None if i is None else i._data for i in indices]
        return wrap(x._backend.index(x._data, arrays), x.device)

    @staticmethod
    def backward(ctx, g):
        # A Function (not a raw kernel call) so that double backward sees it
        return IndexBackward.apply(g, ctx.in_shape, ctx.indices), None


class IndexBackward(Function):
    """The gradient of ``x[indices]``: ``g`` accumulated into zeros of ``x``'s shape."""

    @staticmethod
    def forward(ctx, g, in_shape, indices):
        ctx.indices = indices
        gx = creation.zeros(in_shape, dtype=g.dtype, device=g.device)
        full = full_indices(in_shape, indices)
        gx._backend.index_put_(gx._data, [i._data for i in full], g._data, True)
        return gx

    @staticmethod
    def backward(ctx, gg):
        return Index.apply(gg, ctx.indices), None, None


def full_indices(shape: tuple, indices: list) -> list:
    """Index tensors for every dim (``None`` dims become aranges) laid out like the result
    of ``x[indices]``, so an accumulate ``index_put_`` needs no ``None`` entries."""
    adv = [d for d, i in enumerate(indices) if i is not None]
    bshape = indices[adv[0]].shape
    adjacent = adv == list(range(adv[0], adv[-1] + 1))
    plain = [d for d in range(len(shape)) if indices[d] is None]
    # result layout: the broadcast block sits at the first advanced dim if the advanced
    # dims are adjacent, otherwise in front; plain dims keep their order around it.
    block_at = adv[0] if adjacent else 0
    before = [d for d in plain if d < block_at] if adjacent else []
    after = [d for d in plain if d not in before]
    n_result = len(before) + len(bshape) + len(after)
    out = []
    for d in range(len(shape)):
        if indices[d] is not None:
            lead = len(before)
            out.append(indices[d].reshape((1,) * lead + tuple(bshape)
                                          + (1,) * (n_result - lead - len(bshape))))
        else:
            pos = before.index(d) if d in before else len(before) + len(bshape) + after.index(d)
            view_shape = [1] * n_result
            view_shape[pos] = shape[d]
            out.append(creation.arange(shape[d], device=indices[adv[0]].device).reshape(
                view_shape))
    result_shape = broadcast_shapes(*(t.shape for t in out))
    return [t.expand(result_shape) for t in out]


def getitem(x: Tensor, key) -> Tensor:
    """``x[key]``: basic indexing gives a view, advanced indexing a copy (torch rules)."""
    if type(key) in (int, slice) or key is None:  # not bool: x[True] adds a dim
        return slice_view(x, (key,) if x.shape else _basic_key(x, (key,)))
    if type(key) is Tensor and key.dtype is not D.bool_ and x.shape:  # x[index] on dim 0
        check_same_device("index", x, key)
        return Index.apply(x, _prepare_advanced(x, {0: key}))
    basic, advanced = _split_key(x, key)
    if advanced and all(k == _WHOLE_DIM for k in basic):  # x[:, idx]: no view to make first
        return Index.apply(x, _prepare_advanced(x, advanced))
    view = slice_view(x, _basic_key(x, basic)) if basic else x
    if not advanced:
        return view
    return Index.apply(view, _prepare_advanced(view, advanced))


_WHOLE_DIM = slice(None)
# Tensor.__getitem__: x[a:b] straight to Slice's forward, any other key through getitem
tensor_getitem = slice_key_entry(Slice, getitem)


def _basic_key(x: Tensor, key: tuple) -> tuple:
    if x.shape or not isinstance(key[0], (int, slice)):
        return key
    if type(key[0]) is slice:
        raise IndexError("slice() cannot be applied to a 0-dim tensor.")
    raise IndexError("invalid index of a 0-dim tensor. Use `tensor.item()` to convert a "
                     "0-dim tensor to a number")


# -------------------------------------------------------------- __setitem__
class IndexPut(Function):
    """Out-of-place ``x[indices] = values`` (or ``+=``): the differentiable form."""

    @staticmethod
    def forward(ctx, x, indices, values, accumulate):
        out = x.clone()
        ctx.indices, ctx.accumulate, ctx.v_shape = indices, accumulate, values.shape
        arrays = [None if i is None else i._data for i in indices]
        if accumulate and any(i is None for i in indices):
            arrays = [i._data for i in full_indices(x.shape, indices)]
            values = values.expand(_indexed_shape(x, indices))
        out._backend.index_put_(out._data, arrays, values._data, accumulate)
        return out

    @staticmethod
    def backward(ctx, g):
        gx = gv = None
        if ctx.needs_input_grad[0]:
            gx = g if ctx.accumulate else IndexPut.apply(
                g, ctx.indices, g.new_zeros(()), False)
        if ctx.needs_input_grad[2]:
            gv = sum_to_shape(Index.apply(g, ctx.indices), ctx.v_shape)
        return gx, None, gv, None


def _indexed_shape(x: Tensor, indices) -> tuple:
    probe = creation.empty(x.shape, dtype=D.bool_, device=x.device)
    return Index.apply(probe, indices).shape


def masked_fill(input: Tensor, mask: Tensor, value) -> Tensor:
    """``value`` where ``mask`` is True, else ``input`` (mask broadcasts to input).

    Args:
        input: the input tensor.
        mask: a bool tensor broadcastable to ``input``.
        value: a number or a 0-d tensor.

    Returns:
        A new tensor.
    """
    if mask.dtype is not D.bool_:
        raise RuntimeError(f"masked_fill only supports boolean masks, but got mask with dtype "
                           f"{mask.dtype}")
    if isinstance(value, Tensor):
        if value.ndim:
            raise RuntimeError("masked_fill only supports a 0-dimensional value tensor, but got "
                               f"tensor with {value.ndim} dimension(s).")
        value = value.to(input.dtype)
    out = where(mask, value, input)
    if out.shape != input.shape:
        raise RuntimeError(f"masked_fill: mask of shape {tuple(mask.shape)} does not broadcast "
                           f"to input of shape {tuple(input.shape)}")
    return out if out.dtype is input.dtype else out.to(input.dtype)


def masked_select(input: Tensor, mask: Tensor) -> Tensor:
    """1-d tensor of the elements where ``mask`` (broadcast) is True.

    Args:
        input: the input tensor.
        mask: a bool tensor broadcastable with ``input``.

    Returns:
        A new 1-d tensor.
    """
    shape = broadcast_shapes(input.shape, mask.shape)
    return getitem(input.expand(shape), mask.expand(shape))


class Nonzero(Function):
    """The (N, ndim) int64 coordinates of the non-zero elements (a host sync for N)."""

    differentiable = False

    @staticmethod
    def forward(ctx, x):
        return wrap(x._backend.nonzero(x._data), x.device)


def nonzero(input: Tensor, *, as_tuple: bool = False):
    """Coordinates of non-zero elements: (N, ndim) int64, or a tuple of 1-d tensors.

    Args:
        input: the input tensor.
        as_tuple: return one 1-d tensor per dim instead.

    Returns:
        An (N, ndim) int64 tensor, or a tuple of ndim 1-d tensors.
    """
    coords = Nonzero.apply(input)
    if not as_tuple:
        return coords
    if input.ndim == 0:
        return (coords.reshape(-1),)
    return tuple(coords[:, d] for d in range(input.ndim))


def argwhere(input: Tensor) -> Tensor:
    """The indices of the non-zero elements of ``input``, one row each.

    Args:
        input: a tensor of any dtype and shape.

    Returns:
        An int64 tensor of shape ``(number of non-zero elements, input.ndim)``
        (the same as ``genesis.nonzero(input)``).
    """
    return nonzero(input)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot encoding along a new last dim.

    Args:
        tensor: an int64 tensor of class indices.
        num_classes: the number of classes; ``max + 1`` when -1.

    Returns:
        An int64 tensor with a new last dim of ``num_classes``.
    """
    if tensor.dtype is not D.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor, got "
                           f"{tensor.dtype}")
    if num_classes == -1:
        if tensor.numel() == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(tensor.max()) + 1
    if tensor.numel() and (int(tensor.min()) < 0 or int(tensor.max()) >= num_classes):
        raise RuntimeError("Class values must be smaller than num_classes and non-negative.")
    classes = creation.arange(num_classes, device=tensor.device)
    return (tensor.unsqueeze(-1) == classes).to(D.int64)
