"""View ops: new shapes and strides over the same memory (no copies).

Every view is made through the backend's ``as_strided`` from geometry computed here, so a
backend implements one view primitive. Views share their base's version counter.
"""

from __future__ import annotations

import math

from genesis import creation
from genesis.autograd import grad_mode
from genesis.autograd.function import Function
from genesis.dtypes import DType
from genesis.ops.common import normalize_dim, shape_arg, sum_to_shape, wrap
from genesis.tensor import Tensor, interned_size, is_contiguous_geometry


def _geometry(x: Tensor):
    b = x._backend
    return tuple(b.strides_of(x._data)), b.storage_offset_of(x._data)


def make_view(x: Tensor, shape, strides, offset) -> Tensor:
    """A tensor viewing ``x``'s memory with the given geometry (records no graph; no kernel
    and no allocation: the backend only describes the same storage anew)."""
    shape = interned_size(tuple(shape))
    data = x._backend.as_strided(x._data, shape, tuple(strides), offset)
    return wrap(data, x.device, x, shape, x.dtype)


def contiguous_strides(shape) -> tuple:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def _infer_shape(shape: tuple, numel: int) -> tuple:
    """Resolve one ``-1`` in ``shape`` and check the element count."""
    shape = tuple(int(s) for s in shape)
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    known = 1
    for s in shape:
        if s != -1:
            if s < 0:
                raise RuntimeError(f"invalid shape dimension {s}")
            known *= s
    if -1 in shape:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape = tuple(numel // known if s == -1 else s for s in shape)
    elif known != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return shape


def _view_strides(old_shape, old_strides, new_shape):
    """Strides that show ``old`` memory at ``new_shape`` without a copy, or None."""
    if math.prod(old_shape) == 0 or not old_shape or not new_shape:
        return contiguous_strides(new_shape)
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_stride = old_strides[-1]
    tensor_numel = view_numel = 1
    for d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[d]
        # a chunk ends where the next-outer dim is not laid out right after this one
        if d == 0 or (old_shape[d - 1] != 1
                      and old_strides[d - 1] != tensor_numel * chunk_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk_stride = old_strides[d - 1]
                tensor_numel = view_numel = 1
    if view_d != -1:
        return None
    return tuple(new_strides)


_VIEW_STRIDES: dict = {}  # (shape, strides, new shape) -> new strides (or None): repeats


def _cached_view_strides(old_shape, old_strides, new_shape):
    key = (old_shape, old_strides, new_shape)
    try:
        return _VIEW_STRIDES[key]
    except KeyError:
        if len(_VIEW_STRIDES) > 4096:
            _VIEW_STRIDES.clear()
        out = _VIEW_STRIDES[key] = _view_strides(old_shape, old_strides, new_shape)
        return out


class View(Function):
    @staticmethod
    def forward(ctx, x, shape):
        strides, offset = _geometry(x)
        new_strides = _cached_view_strides(x.shape, strides, shape)
        if new_strides is None:
            raise RuntimeError(
                f"view size {list(shape)} is not compatible with input tensor's size "
                f"{list(x.shape)} and stride {list(strides)} (at least one dimension spans "
                "across two contiguous subspaces). Use .reshape(...) instead.")
        ctx.in_shape = x.shape
        return make_view(x, shape, new_strides, offset)

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.in_shape), None


_VIEW_SHAPES: dict = {}  # (input shape, shape arguments of ints) -> resolved shape


def _resolved_shape(x: Tensor, shape: tuple):
    """The shape that ``view``/``reshape`` arguments name for ``x`` (one ``-1`` inferred),
    remembered per (input shape, int arguments); None for ``view(dtype)``."""
    ints = _all_ints(shape)  # (2.0 == 2 as a key: only int sizes use the cache)
    key = (x.shape, shape)
    resolved = _VIEW_SHAPES.get(key) if ints else None
    if resolved is None:
        if len(shape) == 1 and isinstance(shape[0], DType):
            return None
        resolved = _infer_shape(shape_arg(shape, True) if shape else (), x.numel())
        if ints and len(_VIEW_SHAPES) < 4096:
            _VIEW_SHAPES[key] = resolved
    return resolved


def _all_ints(args: tuple) -> bool:
    for a in args:
        if type(a) is not int:
            return False
    return True


def view(x: Tensor, *shape) -> Tensor:
    """The same memory seen with another shape (one ``-1`` is inferred); errors if the
    strides do not allow it (use ``reshape``).

    Args:
        x: the input tensor.
        *shape: the new shape (ints, or one tuple); one ``-1`` is inferred.

    Returns:
        A view.
    """
    resolved = _resolved_shape(x, shape)
    if resolved is None:
        return view_dtype(x, shape[0])
    return View.apply(x, resolved)


def view_dtype(x: Tensor, dtype: DType) -> Tensor:
    """The same bytes read as ``dtype`` of equal item size (not differentiable)."""
    if dtype.itemsize != x.dtype.itemsize:
        raise RuntimeError(f"view({dtype}): only dtypes of the same size as {x.dtype} "
                           f"({x.dtype.itemsize} bytes) are supported")
    if dtype is x.dtype:
        return x
    return wrap(x._backend.reinterpret(x._data, dtype), x.device, base=x)


def unfold(x: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """Windows of length ``size`` every ``step`` along ``dimension``, as a new last dim
    (a view; overlapping windows share memory)."""
    d = normalize_dim(dimension, x.ndim)
    n = x.shape[d] if x.ndim else 1
    if size > n or size < 0:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    strides, offset = _geometry(x)
    if x.ndim == 0:
        return AsStrided.apply(x, (size,), (1,), offset)
    count = (n - size) // step + 1
    shape = x.shape[:d] + (count,) + x.shape[d + 1:] + (size,)
    new_strides = strides[:d] + (strides[d] * step,) + strides[d + 1:] + (strides[d],)
    return AsStrided.apply(x, shape, new_strides, offset)


def reshape(x: Tensor, *shape) -> Tensor:
    """``x`` with a new shape: a view when the strides allow, otherwise a copy.

    Args:
        x: the input tensor.
        *shape: the new shape (ints, or one tuple); one ``-1`` is inferred.

    Returns:
        A view when the strides allow, otherwise a copy.
    """
    resolved = _resolved_shape(x, shape)
    if resolved is None:  # a dtype: reshape takes none
        raise TypeError(f"a shape must be ints, got {shape!r}")
    strides, _ = _geometry(x)
    if _cached_view_strides(x.shape, strides, resolved) is not None:
        return View.apply(x, resolved)
    return View.apply(contiguous(x), resolved)


class Contiguous(Function):
    @staticmethod
    def forward(ctx, x):
        return wrap(x._backend.contiguous(x._data), x.device)

    @staticmethod
    def backward(ctx, g):
        return g


def contiguous(x: Tensor) -> Tensor:
    """``x`` itself if C-contiguous, else a C-contiguous copy.

    Args:
        x: the input tensor.

    Returns:
        ``x`` or a contiguous copy.
    """
    if x.is_contiguous():
        return x
    return Contiguous.apply(x)


class Permute(Function):
    @staticmethod
    def forward(ctx, x, dims):
        strides, offset = _geometry(x)
        ctx.dims = dims
        return make_view(x, [x.shape[d] for d in dims], [strides[d] for d in dims], offset)

    @staticmethod
    def backward(ctx, g):
        inverse = [0] * len(ctx.dims)
        for i, d in enumerate(ctx.dims):
            inverse[d] = i
        return g.permute(inverse), None


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
    dims = tuple(normalize_dim(int(d), x.ndim) for d in dims)
    if len(dims) != x.ndim or len(set(dims)) != x.ndim:
        raise RuntimeError(f"permute: dims {dims} are not a permutation of the {x.ndim} dims "
                           f"of a tensor of shape {tuple(x.shape)}")
    return Permute.apply(x, dims)


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    """Swap two dimensions (a view).

    Args:
        x: the input tensor.
        dim0: a dim.
        dim1: another dim.

    Returns:
        A view.
    """
    if x.ndim == 0:
        return x
    d0, d1 = normalize_dim(dim0, x.ndim), normalize_dim(dim1, x.ndim)
    dims = list(range(x.ndim))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return Permute.apply(x, tuple(dims))


swapaxes = swapdims = transpose


def t(x: Tensor) -> Tensor:
    """Transpose a matrix (0-d and 1-d tensors are returned as they are).

    Args:
        x: the input tensor.

    Returns:
        A view.
    """
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {x.ndim}D")
    return x if x.ndim < 2 else transpose(x, 0, 1)


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
    return Permute.apply(x, tuple(order))


moveaxis = movedim


class Expand(Function):
    @staticmethod
    def forward(ctx, x, shape):
        strides, offset = _geometry(x)
        pad = len(shape) - x.ndim
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
    return Expand.apply(x, shape)


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
    return x if shape == x.shape else View.apply(x, shape)


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
    strides, offset = _geometry(x)
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


class Slice(Function):
    """Basic indexing (ints, slices with steps, None, Ellipsis) as a strided view."""

    @staticmethod
    def forward(ctx, x, key):
        shape, strides, offset = slice_geometry(x, key)
        ctx.in_shape, ctx.key = x.shape, key
        return make_view(x, shape, strides, offset)

    @staticmethod
    def backward(ctx, g):
        # A Function (not a raw copy) so that double backward sees it
        return SliceBackward.apply(g, ctx.in_shape, ctx.key), None


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
        return Slice.apply(gg, ctx.key), None, None


def slice_geometry(x: Tensor, key: tuple):
    """Shape, strides and offset of ``x[key]`` for a normalised basic-index ``key``."""
    strides, offset = _geometry(x)
    shape_out, strides_out = [], []
    dim = 0
    for k in key:
        if k is None:
            shape_out.append(1)
            strides_out.append(0)
        elif isinstance(k, int):
            n = x.shape[dim]
            if not -n <= k < n:
                raise IndexError(
                    f"index {k} is out of bounds for dimension {dim} with size {n}")
            offset += (k % n) * strides[dim]
            dim += 1
        else:  # slice
            n = x.shape[dim]
            start, stop, step = k.indices(n)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            length = max(0, (stop - start + step - 1) // step)
            if length:
                offset += start * strides[dim]
            shape_out.append(length)
            strides_out.append(strides[dim] * step)
            dim += 1
    shape_out.extend(x.shape[dim:])
    strides_out.extend(strides[dim:])
    return tuple(shape_out), tuple(strides_out), offset


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
    d = normalize_dim(dim, x.ndim)
    n = x.shape[d]
    if start < 0:
        start += n
    if not 0 <= start <= n or length < 0 or start + length > n:
        raise RuntimeError(f"narrow: start ({start}) + length ({length}) exceeds dimension size "
                         f"({n}) of dim {d}")
    key = (slice(None),) * d + (slice(start, start + length),)
    return Slice.apply(x, key)


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
    return Slice.apply(x, (slice(None),) * d + (int(index),))


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
        in_strides, in_offset = _geometry(x)
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


class CopySlices(Function):
    """History of a base tensor after an in-place op wrote into one of its views."""

    @staticmethod
    def forward(ctx, base_before, view_after, geometry):
        ctx.geometry = geometry
        return wrap(base_before._data, base_before.device)

    @staticmethod
    def backward(ctx, g):
        # Written with differentiable ops (AsStrided, mul) so that double backward works.
        shape, strides, offset = ctx.geometry
        g = g.clone()  # contiguous at offset 0: the base's geometry
        g_view = AsStrided.apply(g, shape, strides, offset)
        keep = creation.ones(g.shape, dtype=g.dtype, device=g.device)  # 0 where overwritten
        region = make_view(keep, shape, strides, offset)
        region._backend.copy_(region._data, region._backend.full(shape, 0, g.dtype,
                                                                 g.device.index))
        return g * keep, g_view, None


def rebase_view_history(base: Tensor, view_t: Tensor) -> None:
    """After an in-place op recorded on ``view_t``, route ``base``'s history through it."""
    base_strides, base_offset = _geometry(base)
    if not is_contiguous_geometry(base.shape, base_strides):
        raise RuntimeError("in-place ops on views of a non-contiguous base tensor that needs "
                           "gradients are not supported; call .contiguous() on the base first")
    strides, offset = _geometry(view_t)
    geometry = (view_t.shape, strides, offset - base_offset)
    before = Tensor._wrap(base._data, base.device)
    before.requires_grad, before.grad_fn, before._out_idx = \
        base.requires_grad, base.grad_fn, base._out_idx
    before._accumulator = base._accumulator
    after = Tensor._wrap(view_t._data, view_t.device)
    after.requires_grad, after.grad_fn, after._out_idx = True, view_t.grad_fn, view_t._out_idx
    with grad_mode.enable_grad():
        new_base = CopySlices.apply(before, after, geometry)
        base.requires_grad, base.grad_fn, base._out_idx = True, new_base.grad_fn, 0
        new_view = AsStrided.apply(base, view_t.shape, strides, offset)
    view_t.grad_fn, view_t._out_idx = new_view.grad_fn, 0
    view_t._view_version = view_t._version_box[0]
