"""Views at explicit positions: basic indexing (``x[1:3, None, 2]``: ``Slice``), ``narrow``,
``select``, ``unbind``, ``as_strided``, ``unfold``; and the history of a base tensor after an
in-place op wrote into one of its views (``CopySlices``, ``rebase_view_history``). The
geometry helpers are those of ``genesis.ops.views``.
"""

from __future__ import annotations

from genesis import creation
from genesis.autograd import grad_mode
from genesis.autograd.entries import constants_entry
from genesis.autograd.function import _NO_GRAD_CTX, Function, grad_edge
from genesis.ops.common import normalize_dim, wrap
from genesis.ops.views import make_view
from genesis.tensor import Tensor, geometry, interned_size, is_contiguous_geometry, view_tensor


class Slice(Function):
    """Basic indexing (ints, slices with steps, None, Ellipsis) as a strided view.

    The op's argument is the key tuple (``x[1:3, None]``: ``(slice(1, 3), None)``); its
    forward also takes ``x[a:b]``'s slice alone, as ``Tensor.__getitem__``'s entry hands it
    over (the tuple is made only for a mode and kept on a recorded node)."""

    kernel_forward = True

    @staticmethod
    def forward(ctx, x, key):
        # x[a:b]: its slice alone (from Tensor.__getitem__'s entry) or the key tuple (slice,)
        k = key
        if type(key) is not slice:  # (a basic key has at least one item: x[()] is x itself)
            k = key[0] if type(key[0]) is slice and len(key) == 1 else None
        if k is None:  # any other key tuple
            shape, strides, offset = slice_geometry(x, key)
            geom = (strides, offset)
        else:
            strides, offset = x._geom or geometry(x)
            start, stop, step = k.start, k.stop, k.step
            if (type(start) is int or start is None) and (type(stop) is int or stop is None) \
                    and (step is None or type(step) is int):  # (2.0 == 2 as a key: ints only)
                shape, strides, added, geom = \
                    _known_slice((x.shape, strides, start, stop, step)) \
                    or slice_plan(x.shape, strides, start, stop, step)  # (met before: a lookup)
                if offset:
                    offset += added
                    geom = (strides, offset)
                else:  # (the plan's geometry is the view's)
                    offset = added
            else:
                shape, strides, offset = slice_geometry(x, (k,))
                geom = (strides, offset)
        if ctx is not _NO_GRAD_CTX:  # (recording: the node keeps the key tuple)
            ctx.in_shape, ctx.key = x.shape, (k,) if k is key else key
        return view_tensor(x, x._backend.as_strided(x._data, shape, strides, offset), shape,
                           geom)

    @staticmethod
    def backward(ctx, g):
        # A Function (not a raw copy) so that double backward sees it
        return _slice_backward(g, ctx.in_shape, ctx.key), None


class SliceBackward(Function):
    """The gradient of ``x[key]``: ``g`` written into zeros of ``x``'s shape."""

    @staticmethod
    def forward(ctx, g, in_shape, key):
        ctx.key = key
        gx = creation.zeros(in_shape, dtype=g.dtype, device=g.device)
        shape, strides, offset = slice_geometry(gx, key)
        region = make_view(gx, shape, strides, offset)
        region._backend.copy_(region._data, g._data)
        return gx

    @staticmethod
    def backward(ctx, gg):
        return slice_view(gg, ctx.key), None, None


# The dispatcher's entries of the two (Slice.apply's and SliceBackward.apply's steps for
# their arities): ``slice_view(x, key)`` is basic indexing with a normalised key
slice_view = constants_entry(Slice, 1)
_slice_backward = constants_entry(SliceBackward, 2)


def slice_geometry(x: Tensor, key: tuple):
    """Shape (a ``Size``), strides and offset of ``x[key]`` for a normalised basic-index
    ``key``."""
    strides, offset = x._geom or geometry(x)
    if len(key) == 1 and type(key[0]) is slice and x.shape:  # x[a:b], the common key
        k = key[0]
        start, stop, step = k.start, k.stop, k.step
        if (type(start) is int or start is None) and (type(stop) is int or stop is None) \
                and (type(step) is int or step is None):  # its plan, remembered
            shape, new_strides, added, _ = \
                SLICE_PLANS.get((x.shape, strides, start, stop, step)) \
                or slice_plan(x.shape, strides, start, stop, step)
            return shape, new_strides, offset + added
        shape, new_strides, offset = _leading_slice(x.shape, strides, offset, k)
        return interned_size(shape), new_strides, offset
    shape_out, strides_out = [], []
    dim = 0
    for k in key:
        if type(k) is slice:
            if k.start is None and k.stop is None and k.step is None:  # a whole dim (`...`)
                shape_out.append(x.shape[dim])
                strides_out.append(strides[dim])
            else:
                start, length, step = _slice_extent(k, x.shape[dim])
                if length:
                    offset += start * strides[dim]
                shape_out.append(length)
                strides_out.append(strides[dim] * step)
            dim += 1
        elif k is None:
            shape_out.append(1)
            strides_out.append(0)
        else:  # an int
            n = x.shape[dim]
            if not -n <= k < n:
                raise IndexError(
                    f"index {k} is out of bounds for dimension {dim} with size {n}")
            offset += (k % n) * strides[dim]
            dim += 1
    shape_out.extend(x.shape[dim:])
    strides_out.extend(strides[dim:])
    return interned_size(tuple(shape_out)), tuple(strides_out), offset


def _leading_slice(shape: tuple, strides: tuple, offset: int, k: slice) -> tuple:
    """Shape, strides and offset of ``x[k]`` for one slice ``k`` of dim 0."""
    start, length, step = _slice_extent(k, shape[0])
    return ((length,) + shape[1:], (strides[0] * step,) + strides[1:],
            offset + start * strides[0] if length else offset)


# (input shape, input strides, start, stop, step) -> the plan of x[start:stop:step] (see
# slice_plan): an x[a:b] met before, as one lookup. Plans are kept for int and None bounds
# only (2.0 == 2 as a key, and torch refuses float bounds).
SLICE_PLANS: dict = {}


# (a bound method: CPython compiles ``SLICE_PLANS.get(...)`` on a module global as a read
# and a call)
_known_slice = SLICE_PLANS.get


def slice_plan(shape: tuple, strides: tuple, start, stop, step) -> tuple:
    """The plan of ``x[start:stop:step]`` (int or None bounds) for ``x`` of at least one dim,
    made and kept: ``(result Size, result strides, offset added, (result strides, offset
    added))``, the last the view's geometry when ``x`` starts at offset 0; None for a 0-d
    ``x``."""
    if not shape:  # (a 0-d x: no plan, slice_geometry raises)
        return None
    new_shape, new_strides, added = _leading_slice(shape, strides, 0, slice(start, stop, step))
    if len(SLICE_PLANS) > 4096:  # many distinct slices: start over
        SLICE_PLANS.clear()
    plan = SLICE_PLANS[(shape, strides, start, stop, step)] = (
        interned_size(new_shape), new_strides, added, (new_strides, added))
    return plan


def _slice_extent(k: slice, n: int) -> tuple:
    """``(start, length, step)`` that slice ``k`` picks from a dim of size ``n``."""
    start, stop, step = k.indices(n)
    if step <= 0:
        raise ValueError("step must be greater than zero")
    return start, max(0, (stop - start + step - 1) // step), step


def narrow(x: Tensor, dim: int, start: int, length: int) -> Tensor:
    """The slice ``start:start+length`` of dim ``dim`` (a view).

    Args:
        x: the input tensor.
        dim: the dim to slice.
        start: the first index.
        length: the number of elements.

    Returns:
        A view.
    """
    d = normalize_dim(dim, len(x.shape))
    n = x.shape[d]
    if start < 0:
        start += n
    if not 0 <= start <= n or length < 0 or start + length > n:
        raise RuntimeError(f"narrow: start ({start}) + length ({length}) exceeds dimension size "
                         f"({n}) of dim {d}")
    return slice_view(x, (slice(None),) * d + (slice(start, start + length),))


def select(x: Tensor, dim: int, index: int) -> Tensor:
    """``x`` indexed at ``index`` along ``dim`` (that dim removed; a view).

    Args:
        x: the input tensor.
        dim: the dim to index.
        index: the position along it.

    Returns:
        A view with one dim fewer.
    """
    d = normalize_dim(dim, x.ndim)
    return slice_view(x, (slice(None),) * d + (int(index),))


def unbind(x: Tensor, dim: int = 0) -> tuple:
    """All slices along ``dim`` as a tuple of views.

    Args:
        x: the input tensor.
        dim: the dim to slice along.

    Returns:
        A tuple of views, each without ``dim``.
    """
    d = normalize_dim(dim, x.ndim)
    return tuple(select(x, d, i) for i in range(x.shape[d]))


class AsStrided(Function):
    @staticmethod
    def forward(ctx, x, shape, strides, offset):
        in_strides, in_offset = geometry(x)
        ctx.geom = (x.shape, in_strides, in_offset, shape, strides, offset)
        return make_view(x, shape, strides, offset)

    @staticmethod
    def backward(ctx, g):
        in_shape, in_strides, in_offset, shape, strides, offset = ctx.geom
        # Scatter-add the gradient into a flat buffer covering the memory both geometries
        # touch, then read it back with the input's geometry (handles overlapping views).
        extent = 1 + max(_last_index(in_shape, in_strides, in_offset),
                         _last_index(shape, strides, offset))
        flat = creation.zeros(extent, dtype=g.dtype, device=g.device)
        positions = make_view(creation.arange(extent, device=g.device), shape, strides, offset)
        if grad_mode.is_grad_enabled():  # create_graph: differentiable ops (double backward)
            flat = flat.index_add(0, positions.reshape(-1), g.reshape(-1))
            return AsStrided.apply(flat, in_shape, in_strides, in_offset), None, None, None
        # positions are in range by construction: call the kernel without index checks
        b = flat._backend
        summed = b.index_add(flat._data, 0, positions.reshape(-1)._data, g.reshape(-1)._data)
        return make_view(wrap(summed, g.device), in_shape, in_strides, in_offset), None, None, None


def _last_index(shape, strides, offset) -> int:
    return offset + sum((n - 1) * s for n, s in zip(shape, strides) if n > 0)


def as_strided(x: Tensor, size, stride, storage_offset: int | None = None) -> Tensor:
    """A view of ``x``'s storage with explicit geometry (offset defaults to ``x``'s).

    Args:
        x: the input tensor.
        size: the view's shape.
        stride: the view's strides, in elements.
        storage_offset: the first element's offset in the storage; ``x``'s when None.

    Returns:
        A view sharing ``x``'s storage.
    """
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError(f"mismatch in length of strides {stride} and shape {size}")
    if storage_offset is None:
        storage_offset = x.storage_offset()
    return AsStrided.apply(x, size, stride, storage_offset)


def unfold(x: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """Windows of length ``size`` every ``step`` along ``dimension``, as a new last dim
    (a view; overlapping windows share memory)."""
    d = normalize_dim(dimension, x.ndim)
    n = x.shape[d] if x.ndim else 1
    if size > n or size < 0:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    strides, offset = geometry(x)
    if x.ndim == 0:
        return AsStrided.apply(x, (size,), (1,), offset)
    count = (n - size) // step + 1
    shape = x.shape[:d] + (count,) + x.shape[d + 1:] + (size,)
    new_strides = strides[:d] + (strides[d] * step,) + strides[d + 1:] + (strides[d],)
    return AsStrided.apply(x, shape, new_strides, offset)


class CopySlices(Function):
    """History of a base tensor after an in-place op wrote into one of its views."""

    @staticmethod
    def forward(ctx, base_before, view_after, region):
        ctx.region = region
        return wrap(base_before._data, base_before.device)

    @staticmethod
    def backward(ctx, g):
        # Written with differentiable ops (AsStrided, mul) so that double backward works.
        shape, strides, offset = ctx.region
        g = g.clone()  # contiguous at offset 0: the base's geometry
        g_view = AsStrided.apply(g, shape, strides, offset)
        keep = creation.ones(g.shape, dtype=g.dtype, device=g.device)  # 0 where overwritten
        region = make_view(keep, shape, strides, offset)
        region._backend.copy_(region._data, region._backend.full(shape, 0, g.dtype,
                                                                 g.device.index))
        return g * keep, g_view, None


def rebase_view_history(base: Tensor, view_t: Tensor) -> None:
    """After an in-place op recorded on ``view_t``, route ``base``'s history through it."""
    base_strides, base_offset = geometry(base)
    if not is_contiguous_geometry(base.shape, base_strides):
        raise RuntimeError("in-place ops on views of a non-contiguous base tensor that needs "
                           "gradients are not supported; call .contiguous() on the base first")
    strides, offset = geometry(view_t)
    region = (view_t.shape, strides, offset - base_offset)
    before = Tensor._wrap(base._data, base.device)
    before.requires_grad, before.grad_fn = base.requires_grad, base.grad_fn
    if base.grad_fn is not None:
        before._out_idx = base._out_idx
    elif base.requires_grad:  # (a leaf: its own edge, so the gradient reaches base.grad)
        before._leaf_edge = grad_edge(base)
    after = Tensor._wrap(view_t._data, view_t.device)
    after.requires_grad, after.grad_fn, after._out_idx = True, view_t.grad_fn, view_t._out_idx
    with grad_mode.enable_grad():
        new_base = CopySlices.apply(before, after, region)
        base.requires_grad, base.grad_fn, base._out_idx = True, new_base.grad_fn, 0
        new_view = AsStrided.apply(base, view_t.shape, strides, offset)
    view_t.grad_fn, view_t._out_idx = new_view.grad_fn, 0
    view_t._view_version = view_t._version_box[0]
