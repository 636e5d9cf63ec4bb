"""Matrix products: matmul (batched, broadcast, 1-d promotion), mm, bmm, outer, dot."""

from __future__ import annotations

import math

from genesis.autograd.entries import matrix_entry, ternary_entry
from genesis.autograd.function import _NO_GRAD_CTX, Function
from genesis.autograd.grad_mode import is_grad_enabled
from genesis.backends.composite import contiguous_strides
from genesis.ops.common import (
    broadcast_size,
    check_same_device,
    sum_to_shape,
    wrap,
)
from genesis.tensor import Tensor, interned_size, is_contiguous_geometry, new_tensor


def _check(op: str, a: Tensor, b: Tensor) -> None:
    """The operands' checks once their dtypes or devices differ (where anything else than a
    Tensor also ends up: its dtype is never a genesis dtype)."""
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
        raise TypeError(f"{op} expects two tensors, got {type(a).__name__} and "
                        f"{type(b).__name__}")
    check_same_device(op, a, b)
    if a.dtype is not b.dtype:
        raise RuntimeError(f"{op}: expected both operands to have the same dtype, but got "
                           f"{a.dtype} and {b.dtype}")


# (a's shape, b's shape) -> (result Size, a's broadcast shape or None, b's or None): the
# operand shapes met so far, checked
_PRODUCTS: dict = {}


def _product_shapes(a_shape, b_shape) -> tuple:
    """The shapes of ``a @ b`` for operands of at least 2 dims (batch dims broadcast),
    checked and remembered."""
    if a_shape[-1] != b_shape[-2]:
        raise RuntimeError(
            f"matmul: shapes {tuple(a_shape)} and {tuple(b_shape)} cannot be multiplied "
            f"({a_shape[-2]}x{a_shape[-1]} and {b_shape[-2]}x{b_shape[-1]})")
    batch = broadcast_size(a_shape[:-2], b_shape[:-2])
    shapes = (interned_size(tuple(batch) + (a_shape[-2], b_shape[-1])),
              None if a_shape[:-2] == batch else batch + a_shape[-2:],
              None if b_shape[:-2] == batch else batch + b_shape[-2:])
    if len(_PRODUCTS) > 4096:
        _PRODUCTS.clear()
    _PRODUCTS[(a_shape, b_shape)] = shapes
    return shapes


class Matmul(Function):
    """(..., M, K) @ (..., K, N) with broadcast batch dims."""

    autocast = "lower"

    @staticmethod
    def forward(ctx, a, b):
        if a.dtype is not b.dtype or a.device is not b.device:
            _check("matmul", a, b)
        shapes = _PRODUCTS.get((a.shape, b.shape)) or _product_shapes(a.shape, b.shape)
        shape, a_shape, b_shape = shapes  # the result's, and the operands' with batch dims
        x = a if a_shape is None else a.expand(a_shape)
        y = b if b_shape is None else b.expand(b_shape)
        if ctx is not _NO_GRAD_CTX:  # (recording)
            ctx.save_for_backward(a, b)
        backend = a._backend
        return new_tensor(backend.matmul(x._data, y._data), a.device, backend, shape, a.dtype)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = sum_to_shape(Matmul.apply(g, b.mT), a.shape)
        if ctx.needs_input_grad[1]:
            gb = sum_to_shape(Matmul.apply(a.mT, g), b.shape)
        return ga, gb


class Linear(Function):
    """``x @ W^T + b`` as one op: one graph node, and autocast treats it as matmul-like."""

    autocast = "lower"
    kernel_forward = True  # (checks, the backend's linear and a wrap: no op)

    @staticmethod
    def forward(ctx, x, weight, bias):
        _check("linear", x, weight)
        if x.shape[-1] != weight.shape[-1]:
            raise RuntimeError(
                f"linear: input of shape {tuple(x.shape)} and weight of shape "
                f"{tuple(weight.shape)} cannot be multiplied ({x.shape[-1]} input features vs "
                f"{weight.shape[-1]})")
        if bias is not None:
            check_same_device("linear", x, bias)
            if bias.dtype is not x.dtype:
                raise RuntimeError(f"linear: bias dtype {bias.dtype} does not match input "
                                   f"dtype {x.dtype}")
        out = wrap(x._backend.linear(x._data, weight._data,
                                     None if bias is None else bias._data), x.device)  # (*, out)
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return out

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        needs = ctx.needs_input_grad
        # create_graph needs differentiable ops (double backward); a gradient of another
        # dtype than the output gets matmul's checks
        if is_grad_enabled() or g.dtype is not x.dtype:
            gx = gw = gb = None
            if needs[0]:
                gx = matmul(g, weight)
            g2 = g.reshape(-1, g.shape[-1])  # (N, out)
            if needs[1]:
                gw = Matmul.apply(g2.mT, x.reshape(-1, x.shape[-1]))  # (out, in)
            if ctx.has_bias and needs[2]:
                gb = g2.sum(0)
            return gx, gw, gb
        # The same products on the arrays: no view or graph bookkeeping per backward
        b, device, dtype = g._backend, g.device, g.dtype
        g2, rows, out = _rows(g)  # (N, out)
        gx = gw = gb = None
        if needs[0]:
            gx = b.matmul(g2, weight._data)  # (N, in)
            if len(x.shape) != 2:
                gx = b.as_strided(gx, x.shape, contiguous_strides(x.shape),
                                  b.storage_offset_of(gx))  # (*, in)
            gx = wrap(gx, device, None, x.shape, dtype)
        if needs[1]:
            g2t = b.as_strided(g2, (out, rows), (1, out), b.storage_offset_of(g2))  # (out, N)
            gw = wrap(b.matmul(g2t, _rows(x)[0]), device, None, weight.shape, dtype)
        if ctx.has_bias and needs[2]:
            gb = wrap(g2, device, None, interned_size((rows, out)), dtype).sum(0)
        return gx, gw, gb


def _rows(t: Tensor) -> tuple:
    """``(array, rows, cols)``: ``t``'s array as a contiguous matrix whose rows are all its
    leading dims (a view; of a contiguous copy when ``t``'s memory is not in C order)."""
    b, data, shape = t._backend, t._data, t.shape
    if not is_contiguous_geometry(shape, b.strides_of(data)):
        data = b.contiguous(data)
    cols = shape[-1]
    rows = math.prod(shape[:-1])
    if len(shape) == 2 and (rows < 2 or b.strides_of(data)[0] == cols):
        return data, rows, cols
    return b.as_strided(data, (rows, cols), (cols, 1), b.storage_offset_of(data)), rows, cols


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias`` (what ``nn.functional.linear`` computes)."""
    if len(weight.shape) != 2:
        raise RuntimeError(f"linear: weight must be 2-D (out_features, in_features), got shape "
                           f"{tuple(weight.shape)}")
    return _linear(input, weight, bias)


_linear = ternary_entry(Linear)  # (input, weight, bias): Linear.apply's steps for its arity


def with_vectors(input: Tensor, other: Tensor) -> Tensor:
    """``matmul`` where either operand has fewer than two dims (torch's 1-d rules: a 1-d
    left operand is a row, a 1-d right operand a column, and the added dim is removed
    again), or is not a tensor (a TypeError naming both); matrices go to ``Matmul``."""
    if not (isinstance(input, Tensor) and isinstance(other, Tensor)):
        raise TypeError(f"matmul expects two tensors, got {type(input).__name__} and "
                        f"{type(other).__name__}")
    if input.ndim == 0 or other.ndim == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are "
                           f"{input.ndim}D and {other.ndim}D")
    a = input.unsqueeze(0) if input.ndim == 1 else input
    b = other.unsqueeze(-1) if other.ndim == 1 else other
    if a.shape[-1] != b.shape[-2]:
        raise RuntimeError(
            f"matmul: shapes {tuple(input.shape)} and {tuple(other.shape)} cannot be "
            f"multiplied ({a.shape[-2]}x{a.shape[-1]} and {b.shape[-2]}x{b.shape[-1]})")
    out = Matmul.apply(a, b)
    if other.ndim == 1:
        out = out.squeeze(-1)
    if input.ndim == 1:
        out = out.squeeze(-2 if other.ndim > 1 else -1)
    return out


# Matmul's dispatcher entry for two matrices (the sizes are checked by its forward),
# ``with_vectors`` for everything else
matmul = matrix_entry(Matmul, with_vectors)
matmul.__doc__ = """Matrix product with torch's rules for 1-d operands and broadcast batch dims.

    Shape:
        (..., M, K) @ (..., K, N) -> (..., M, N); a 1-d left operand is a row, a 1-d right
        operand a column, and the added dim is removed again.

    Args:
        input: the left operand, at least 1-d.
        other: the right operand, at least 1-d.

    Returns:
        A new tensor of the shape given under Shape.

    Example:
        >>> genesis.matmul(genesis.ones(2, 3), genesis.ones(3)).shape
        genesis.Size([2])
    """


def mm(input: Tensor, mat2: Tensor) -> Tensor:
    """Product of two matrices (no broadcasting).

    Args:
        input: an (M, K) matrix.
        mat2: a (K, N) matrix.

    Returns:
        A new (M, N) matrix.
    """
    if input.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError(f"mm: expected 2-D tensors, got {input.ndim}-D and {mat2.ndim}-D")
    if input.shape[1] != mat2.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({input.shape[0]}x"
                           f"{input.shape[1]} and {mat2.shape[0]}x{mat2.shape[1]})")
    return Matmul.apply(input, mat2)


def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    """Batched product of (B, M, K) and (B, K, N) tensors (no broadcasting).

    Args:
        input: a (B, M, K) tensor.
        mat2: a (B, K, N) tensor.

    Returns:
        A new (B, M, N) tensor.
    """
    if input.ndim != 3 or mat2.ndim != 3:
        raise RuntimeError(f"bmm: expected 3-D tensors, got {input.ndim}-D and {mat2.ndim}-D")
    if input.shape[0] != mat2.shape[0] or input.shape[2] != mat2.shape[1]:
        raise RuntimeError(f"bmm: shapes {tuple(input.shape)} and {tuple(mat2.shape)} cannot "
                           "be multiplied")
    return Matmul.apply(input, mat2)


def outer(input: Tensor, vec2: Tensor) -> Tensor:
    """Outer product of two 1-d tensors.

    Args:
        input: a 1-d tensor of length N.
        vec2: a 1-d tensor of length M.

    Returns:
        A new (N, M) tensor.
    """
    if input.ndim != 1 or vec2.ndim != 1:
        raise RuntimeError(f"outer: expected 1-D tensors, got {input.ndim}-D and {vec2.ndim}-D")
    return input.unsqueeze(1) * vec2.unsqueeze(0)


ger = outer


def dot(input: Tensor, other: Tensor) -> Tensor:
    """Inner product of two 1-d tensors of the same length.

    Args:
        input: a 1-d tensor.
        other: a 1-d tensor of the same length and dtype.

    Returns:
        A 0-d tensor.
    """
    if input.ndim != 1 or other.ndim != 1 or input.shape != other.shape:
        raise RuntimeError(f"dot: expected 1-D tensors of the same size, got "
                           f"{tuple(input.shape)} and {tuple(other.shape)}")
    return matmul(input, other)
