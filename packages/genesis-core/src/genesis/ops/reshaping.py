"""``view`` and ``reshape``: the same memory seen with another shape, or a copy when the
strides do not allow a view; ``contiguous``; ``view(dtype)``.

A view's geometry is worked out once per (input shape, input strides, requested sizes) and
remembered (``view_plan``): a training step asks for the same few reshapes every time.
"""

from __future__ import annotations

import math

from genesis.autograd.entries import constants_entry, unary_entry
from genesis.autograd.function import _NO_GRAD_CTX, Function
from genesis.dtypes import DType
from genesis.ops.common import shape_arg, wrap
from genesis.tensor import Size, Tensor, geometry, interned_size, view_tensor


def contiguous_strides(shape) -> tuple:
    """The strides of a C-contiguous tensor of ``shape``."""
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


# (input shape, input strides, requested sizes) -> (Size, the view's strides or None when
# the strides allow no view): the plans met so far
_VIEW_PLANS: dict = {}


_known_view = _VIEW_PLANS.get  # (a bound method: see strided._known_slice)


def view_plan(x: Tensor, sizes: tuple) -> tuple:
    """``(Size, strides)`` of ``x`` seen at ``sizes`` (one ``-1`` inferred); strides None
    when no view of ``x``'s memory has that shape. Remembered for int sizes."""
    strides = (x._geom or geometry(x))[0]
    ints = _all_ints(sizes)  # (2.0 == 2 as a key, a list no key: only ints are remembered)
    key = (x.shape, strides, sizes)
    plan = _VIEW_PLANS.get(key) if ints else None
    if plan is None:
        size = interned_size(_infer_shape(shape_arg(sizes, True) if sizes else (), x.numel()))
        plan = (size, _view_strides(x.shape, strides, size))
        if ints:
            if len(_VIEW_PLANS) > 4096:
                _VIEW_PLANS.clear()
            _VIEW_PLANS[key] = plan
    return plan


def _all_ints(args: tuple) -> bool:
    for a in args:
        if type(a) is not int:
            return False
    return True


class View(Function):
    """``x`` seen at ``sizes`` (the caller's: ints, one ``-1``): a view or an error."""

    kernel_forward = True

    @staticmethod
    def forward(ctx, x, sizes):
        geom = x._geom or geometry(x)
        for n in sizes:  # (2.0 == 2 as a key: only int sizes are remembered)
            if type(n) is not int:
                plan = None
                break
        else:
            plan = _known_view((x.shape, geom[0], sizes))
        size, new_strides = plan or view_plan(x, sizes)  # (met before: one lookup)
        if new_strides is None:
            raise RuntimeError(
                f"view size {list(size)} is not compatible with input tensor's size "
                f"{list(x.shape)} and stride {list(geometry(x)[0])} (at least one dimension "
                "spans across two contiguous subspaces). Use .reshape(...) instead.")
        if ctx is not _NO_GRAD_CTX:  # (recording)
            ctx.in_shape = x.shape
        return view_tensor(x, x._backend.view(x._data, size, new_strides), size,
                           (new_strides, geom[1]))

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.in_shape), None


_view = constants_entry(View, 1)
_SHAPE_TYPES = (tuple, Size)


def view(x: Tensor, *shape) -> Tensor:
    """The same memory seen with another shape (one ``-1`` is inferred); errors if the
    strides do not allow it (use ``reshape``).

    Args:
        x: the input tensor.
        *shape: the new shape (ints, or one tuple); one ``-1`` is inferred; or one dtype.

    Returns:
        A view.
    """
    if len(shape) == 1:
        if type(shape[0]) in _SHAPE_TYPES:
            shape = shape[0]  # view((2, 3)) as view(2, 3)
        elif isinstance(shape[0], DType):
            return view_dtype(x, shape[0])
    return _view(x, shape)


class ViewDtype(Function):
    """The same bytes read as another dtype of equal item size (not differentiable)."""

    differentiable = False

    @staticmethod
    def forward(ctx, x, dtype):
        return wrap(x._backend.reinterpret(x._data, dtype), x.device, base=x)


def view_dtype(x: Tensor, dtype: DType) -> Tensor:
    """The same bytes read as ``dtype`` of equal item size (not differentiable)."""
    if dtype.itemsize != x.dtype.itemsize:
        raise RuntimeError(f"view({dtype}): only dtypes of the same size as {x.dtype} "
                           f"({x.dtype.itemsize} bytes) are supported")
    if dtype is x.dtype:
        return x
    return ViewDtype.apply(x, dtype)


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
    if len(shape) == 1 and isinstance(shape[0], DType):
        raise TypeError(f"a shape must be ints, got {shape!r}")
    if view_plan(x, shape)[1] is None:
        return _view(contiguous(x), shape)
    return _view(x, shape)


class Contiguous(Function):
    kernel_forward = True

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
    return _contiguous(x)


_contiguous = unary_entry(Contiguous)  # Contiguous.apply's steps for one tensor
