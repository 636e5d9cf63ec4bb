"""View ops: new shapes and strides over the same memory (no copies).

Every view is made through the backend's ``as_strided`` from geometry computed here, so a
backend implements one view primitive. Views share their base's version counter. This module
reshapes, reorders and broadcasts dims; views at explicit positions (basic indexing,
narrow/select, as_strided, unfold) and a base's history after an in-place op on one of its
views are in ``genesis.ops.strided``.
"""

from __future__ import annotations

import math

from genesis.autograd.function import Function
from genesis.autograd.grad_mode import _state as _grad
from genesis.dispatch import _modes as _intercepting
from genesis.dtypes import DType
from genesis.ops.common import normalize_dim, shape_arg, sum_to_shape, wrap
from genesis.tensor import Size, Tensor, geometry, interned_size, view_tensor


def make_view(x: Tensor, shape, strides, offset) -> Tensor:
    """A tensor viewing ``x``'s memory with the given geometry (records no graph; no kernel
    and no allocation: the backend only describes the same storage anew)."""
    shape, strides = interned_size(tuple(shape)), tuple(strides)
    return view_tensor(x, x._backend.as_strided(x._data, shape, strides, offset), shape,
                       (strides, offset))


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
        strides, offset = geometry(x)
        new_strides = _cached_view_strides(x.shape, strides, shape)
        if new_strides is None:
            raise RuntimeError(
                f"view size {list(shape)} is not compatible with input tensor's size "
                f"{list(x.shape)} and stride {list(strides)} (at least one dimension spans "
                "across two contiguous subspaces). Use .reshape(...) instead.")
        ctx.in_shape = x.shape
        shape = interned_size(shape)
        return view_tensor(x, x._backend.view(x._data, shape, new_strides), shape,
                           (new_strides, offset))

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
        resolved = interned_size(_infer_shape(shape_arg(shape, True) if shape else (),
                                              x.numel()))
        if ints and len(_VIEW_SHAPES) < 4096:
            _VIEW_SHAPES[key] = resolved
    return resolved


def _all_ints(args: tuple) -> bool:
    for a in args:
        if type(a) is not int:
            return False
    return True


_SHAPE_TYPES = (tuple, Size)

# (input shape, input strides, int shape arguments) -> (resolved Size, its strides, the
# view's geometry at offset 0, the common one): the host path of a view or reshape that was
# met before, as one lookup
_VIEW_PLANS: dict = {}


def records_nothing(x: Tensor) -> bool:
    """Whether a view of ``x`` made now needs no ``Function.apply``: no graph to record
    and no op observers (the host paths of views check this first). The host paths read a
    tensor's ``requires_grad`` before the grad mode: the flag is usually False, and the mode
    is a thread-local read."""
    return type(x) is Tensor and not (x.requires_grad and _grad.enabled) and not _intercepting


def _remember_view(x: Tensor, shape: tuple, resolved: Size) -> None:
    """Keep the plan of ``x.view(*shape)`` for the host path, when it is a view the host
    path could make (a view that records a graph never looks its plan up)."""
    if not (records_nothing(x) and _all_ints(shape)):  # (a list of sizes: never looked up)
        return
    strides = geometry(x)[0]
    new_strides = _cached_view_strides(x.shape, strides, resolved)
    if new_strides is not None:
        if len(_VIEW_PLANS) > 4096:
            _VIEW_PLANS.clear()
        _VIEW_PLANS[(x.shape, strides, shape)] = (resolved, new_strides, (new_strides, 0))


def _planned_view(x: Tensor, shape: tuple) -> Tensor | None:
    """The host path of a view or reshape met before, with nothing to record: one lookup
    of the remembered plan and the view, without ``Function.apply``; None where that does
    not apply (a first meeting, a copy, a graph to record, op observers)."""
    if type(x) is Tensor and not (x.requires_grad and _grad.enabled) and not _intercepting:
        for n in shape:  # (records_nothing and _all_ints, inline; 2.0 == 2 as a key)
            if type(n) is not int:
                return None
        strides, offset = x._geom or geometry(x)
        plan = _VIEW_PLANS.get((x.shape, strides, shape))
        if plan is not None:
            size, new_strides, geom = plan
            return view_tensor(x, x._backend.view(x._data, size, new_strides), size,
                               (new_strides, offset) if offset else geom)
    return None


def view(x: Tensor, *shape) -> Tensor:
    """The same memory seen with another shape (one ``-1`` is inferred); errors if the
    strides do not allow it (use ``reshape``).

    Args:
        x: the input tensor.
        *shape: the new shape (ints, or one tuple); one ``-1`` is inferred.

    Returns:
        A view.
    """
    if len(shape) == 1 and type(shape[0]) in _SHAPE_TYPES:
        shape = shape[0]  # view((2, 3)) as view(2, 3)
    fast = _planned_view(x, shape)
    if fast is not None:
        return fast
    resolved = _resolved_shape(x, shape)
    if resolved is None:
        return view_dtype(x, shape[0])
    out = View.apply(x, resolved)
    _remember_view(x, shape, resolved)
    return out


def view_dtype(x: Tensor, dtype: DType) -> Tensor:
    """The same bytes read as ``dtype`` of equal item size (not differentiable)."""
    if dtype.itemsize != x.dtype.itemsize:
        raise RuntimeError(f"view({dtype}): only dtypes of the same size as {x.dtype} "
                           f"({x.dtype.itemsize} bytes) are supported")
    if dtype is x.dtype:
        return x
    return wrap(x._backend.reinterpret(x._data, dtype), x.device, base=x)


def reshape(x: Tensor, *shape) -> Tensor:
    """``x`` with a new shape: a view when the strides allow, otherwise a copy.

    Args:
        x: the input tensor.
        *shape: the new shape (ints, or one tuple); one ``-1`` is inferred.

    Returns:
        A view when the strides allow, otherwise a copy.
    """
    if len(shape) == 1 and type(shape[0]) in _SHAPE_TYPES:
        shape = shape[0]  # reshape((2, 3)) as reshape(2, 3)
    fast = _planned_view(x, shape)
    if fast is not None:
        return fast
    resolved = _resolved_shape(x, shape)
    if resolved is None:  # a dtype: reshape takes none
        raise TypeError(f"a shape must be ints, got {shape!r}")
    strides = geometry(x)[0]
    if _cached_view_strides(x.shape, strides, resolved) is None:
        return View.apply(contiguous(x), resolved)
    out = View.apply(x, resolved)
    _remember_view(x, shape, resolved)
    return out


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
        strides, offset = geometry(x)
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
    """Transpose a matrix (0-d and 1-d tensors: a view of the same shape).

    Args:
        x: the input tensor.

    Returns:
        A view.
    """
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {x.ndim}D")
    return View.apply(x, x.shape) if x.ndim < 2 else transpose(x, 0, 1)  # (a view, as torch)


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
        strides, offset = geometry(x)
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
    return View.apply(x, shape)  # (a new view even when no dim goes, as torch)


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
