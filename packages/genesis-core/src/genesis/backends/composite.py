"""Composite kernels: the contract's optional kernels written with its required core.

``Backend``'s optional methods call these, so a new backend that implements only the
abstract methods runs every op; a backend overrides a method with a kernel of its own when it
has one. The last ones (softmax, layer_norm, rms_norm and their backwards) are the composites
of genesis-core's fused ops, named by their rows in ``genesis.fused_declarations``. Each
function takes the backend first (``b``) and then the method's (or kernel's) arguments, and
returns exactly what the method must return (shape, dtype, a new array unless stated), so
genesis's ops cannot tell a composite from a kernel.

They are written for correctness on every dtype, not speed: several launch one kernel per
step (the product reduction halves the reduced axis each step, the prefix sum doubles its
shift), and ``nonzero`` reads the mask on the host, as its result size needs anyway.
"""

from __future__ import annotations

import math

import numpy as np

from genesis.dtypes import DType, bfloat16, bool_, float16, float32, float64, int64

_HALF = (float16, bfloat16)


# ------------------------------------------------------------------ geometry helpers
def contiguous_strides(shape) -> tuple[int, ...]:
    """C-order strides, in elements, of a new array of ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def is_contiguous(b, a) -> bool:
    """Whether ``a`` is C-contiguous (size-1 dims may have any stride)."""
    if not math.prod(a.shape):
        return True
    expected = 1
    for n, s in zip(reversed(a.shape), reversed(b.strides_of(a))):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def narrow(b, a, dim: int, start: int, length: int):
    """A view of ``a`` holding ``length`` entries of ``dim`` from ``start``."""
    strides = b.strides_of(a)
    shape = a.shape[:dim] + (length,) + a.shape[dim + 1:]
    return b.as_strided(a, shape, strides, b.storage_offset_of(a) + start * strides[dim])


def expand(b, reduced, like):
    """View a keepdim-reduced array (size-1 dims) at ``like``'s shape."""
    strides = tuple(0 if n == 1 else s for n, s in zip(reduced.shape, b.strides_of(reduced)))
    return b.as_strided(reduced, like.shape, strides, b.storage_offset_of(reduced))


def expand_to(b, a, shape):
    """View ``a`` (trailing-aligned, numpy broadcasting) at ``shape``."""
    pad = len(shape) - len(a.shape)
    strides = (0,) * pad + tuple(0 if n == 1 else s
                                 for n, s in zip(a.shape, b.strides_of(a)))
    return b.as_strided(a, tuple(shape), strides, b.storage_offset_of(a))


def place_along(b, vector, dim: int, shape):
    """View the 1-d ``vector`` along ``dim`` of ``shape`` (stride 0 on every other dim)."""
    strides = [0] * len(shape)
    strides[dim] = b.strides_of(vector)[0]
    return b.as_strided(vector, tuple(shape), tuple(strides), b.storage_offset_of(vector))


def positions(b, shape, dim: int, index):
    """int64 coordinates ``0..shape[dim]-1`` along ``dim``, viewed at ``shape``."""
    return place_along(b, b.arange(0, shape[dim], 1, int64, index), dim, shape)


def zero(dtype: DType):
    """The Python zero that fits ``dtype`` (``False`` for bool)."""
    return False if dtype is bool_ else 0.0 if dtype.is_floating_point else 0


def acc_dtype(dtype: DType) -> DType:
    """float32 for the half types (they accumulate in float32), else ``dtype``."""
    return float32 if dtype in _HALF else dtype


def norm_acc_dtype(dtype: DType) -> DType:
    """Accumulation dtype of the composite norms: float64 stays, the rest use float32."""
    return dtype if dtype is float64 else float32


def new_copy(b, a, dtype: DType | None = None):
    """A new contiguous array with ``a``'s values (in ``dtype``); never ``a`` itself."""
    out = b.empty(a.shape, dtype or b.dtype_of(a), b.device_index_of(a))
    return b.copy_(out, a)


def reshape_reduced(b, a, dims, keepdim: bool):
    """Move ``dims`` last and flatten: a new contiguous (M, R) array, and the result shape."""
    keep = [d for d in range(len(a.shape)) if d not in dims]
    order = keep + list(dims)
    strides = b.strides_of(a)
    moved = b.as_strided(a, tuple(a.shape[d] for d in order), tuple(strides[d] for d in order),
                         b.storage_offset_of(a))
    flat = new_copy(b, moved)
    m, r = math.prod(a.shape[d] for d in keep), math.prod(a.shape[d] for d in dims)
    if keepdim:
        out_shape = tuple(1 if d in dims else n for d, n in enumerate(a.shape))
    else:
        out_shape = tuple(a.shape[d] for d in keep)
    return b.as_strided(flat, (m, r), (r, 1), 0), out_shape


# ------------------------------------------------------------------ creation and copies
def host_scalar(b, value, dtype: DType, index):
    """A 0-d array holding ``value`` (made on the host, cast while copied to ``dtype``)."""
    host = np.array(value, dtype=np.bool_ if dtype is bool_ else
                    np.float64 if dtype.is_floating_point else np.int64)
    out = b.empty((), dtype, index)
    return b.copy_(out, b.from_numpy(host, index))


def full(b, shape, value, dtype, index):
    out = b.empty(shape, dtype, index)
    if math.prod(shape):
        one = host_scalar(b, value, dtype, index)
        b.copy_(out, b.as_strided(one, tuple(shape), (0,) * len(shape), 0))
    return out


def arange(b, start, end, step, dtype, index):
    n = max(math.ceil((end - start) / step), 0)
    if dtype.is_floating_point:
        values = start + np.arange(n, dtype=np.float64) * step
    else:  # torch steps integer dtypes in integers (a float step is truncated)
        values = int(start) + np.arange(n, dtype=np.int64) * int(step)
    out = b.empty((n,), dtype, index)
    return b.copy_(out, b.from_numpy(values, index)) if n else out


def contiguous(b, a):
    return a if is_contiguous(b, a) else new_copy(b, a)


def cast(b, a, dtype):
    return a if b.dtype_of(a) is dtype else new_copy(b, a, dtype)


def item(b, a):
    if b.dtype_of(a) is bfloat16:  # numpy has no bfloat16
        a = cast(b, a, float32)
    return b.to_numpy(a).reshape(-1)[0].item()


def cat(b, arrays, dim):
    first = arrays[0]
    shape = list(first.shape)
    shape[dim] = sum(x.shape[dim] for x in arrays)
    out = b.empty(tuple(shape), b.dtype_of(first), b.device_index_of(first))
    start = 0
    for x in arrays:
        n = x.shape[dim]
        if n and math.prod(x.shape):
            b.copy_(narrow(b, out, dim, start, n), x)
        start += n
    return out


# ------------------------------------------------------------------ elementwise
def clamp(b, a, lo, hi, out):
    if lo is None and hi is None:
        return b.copy_(out, a) if out is not None else new_copy(b, a)
    if lo is not None:  # maximum/minimum propagate NaN, as clamp does
        a = b.binary("maximum", a, lo, out=out if hi is None else None)
    if hi is not None:
        a = b.binary("minimum", a, hi, out=out)
    return a


# ------------------------------------------------------------------ reductions
def prod(b, a, dims, keepdim, dtype):
    work = acc_dtype(dtype)
    rows, out_shape = reshape_reduced(b, cast(b, a, work), dims, keepdim)
    m, r = rows.shape
    if m == 0:
        return b.empty(out_shape, dtype, b.device_index_of(a))
    if r == 0:
        return full(b, out_shape, 1, dtype, b.device_index_of(a))
    # Halve the reduced axis each step: columns [0, h) *= columns [r-h, r); an odd middle
    # column stays. The pairwise order rounds no worse than a running product.
    while r > 1:
        h = r // 2
        left = b.as_strided(rows, (m, h), (rows.shape[1], 1), 0)
        right = b.as_strided(rows, (m, h), (rows.shape[1], 1), r - h)
        b.binary("mul", left, right, out=left)
        r -= h
    result = b.as_strided(rows, out_shape, tuple(s * rows.shape[1] for s in
                                                 contiguous_strides(out_shape)), 0)
    return new_copy(b, result, dtype)


def _order_reversed(b, a):
    """An order-reversing bijection: ``-a`` for floats, ``~a`` (``-a - 1``) for integers
    and bool (no overflow, unsigned types included)."""
    return b.unary("neg" if b.dtype_of(a).is_floating_point else "bitwise_not", a)


def amin(b, a, dims, keepdim):
    return _order_reversed(b, b.amax(_order_reversed(b, a), dims, keepdim))


def arg_extreme(b, a, dim, keepdim, largest: bool):
    """argmax/argmin: the first position along ``dim`` holding the max (min) or a NaN."""
    extreme = (b.amax if largest else b.amin)(a, (dim,), True)
    hit = b.binary("eq", a, expand(b, extreme, a))
    if b.dtype_of(a).is_floating_point:  # a NaN is the extreme (it propagates)
        hit = b.binary("logical_or", hit, b.unary("isnan", a))
    n = a.shape[dim]
    candidates = b.where(hit, positions(b, a.shape, dim, b.device_index_of(a)), n)
    return b.amin(candidates, (dim,), keepdim)


def any_(b, a, dims, keepdim):
    nonzero = b.binary("ne", a, zero(b.dtype_of(a)))
    return b.binary("gt", b.sum(nonzero, dims, keepdim, int64), 0)


def all_(b, a, dims, keepdim):
    zeros = b.binary("eq", a, zero(b.dtype_of(a)))
    return b.binary("eq", b.sum(zeros, dims, keepdim, int64), 0)


def cumsum(b, a, dim, dtype):
    work = acc_dtype(dtype)
    out = new_copy(b, a, work)
    if not a.shape:
        return cast(b, out, dtype)
    n = out.shape[dim]
    shift = 1
    while shift < n:  # Hillis-Steele: out[i] += out[i - shift], shift = 1, 2, 4, ...
        prev = new_copy(b, out)
        b.binary("add", narrow(b, prev, dim, shift, n - shift), narrow(b, prev, dim, 0, n - shift),
                 out=narrow(b, out, dim, shift, n - shift))
        shift *= 2
    return cast(b, out, dtype)


# ------------------------------------------------------------------ indexing
def _grids(b, shape, dim, along_dim, index):
    """Index arrays for every dim of ``shape``: ``along_dim`` at ``dim``, positions elsewhere."""
    return [along_dim if d == dim else positions(b, shape, d, index) for d in range(len(shape))]


def gather(b, a, dim, index):
    if not a.shape:  # 0-d: the index (all zeros) picks the one value
        return new_copy(b, expand_to(b, a, index.shape))
    return b.index(a, _grids(b, index.shape, dim, index, b.device_index_of(a)))


def scatter(b, a, dim, index, src, reduce):
    out = new_copy(b, a)
    if not math.prod(index.shape):
        return out
    dev = b.device_index_of(a)
    if isinstance(src, (bool, int, float)):
        values = host_scalar(b, src, b.dtype_of(a), dev)
    else:  # only the first index.shape entries of src are read
        values = b.as_strided(src, index.shape, b.strides_of(src), b.storage_offset_of(src))
    if not a.shape:
        return b.copy_(out, values) if reduce is None else \
            b.binary("add", out, values, out=out)
    b.index_put_(out, _grids(b, index.shape, dim, index, dev), values, reduce == "add")
    return out


def index_select(b, a, dim, index):
    if not a.shape:  # torch: a 0-d input stays 0-d (the index holds one 0)
        return new_copy(b, a)
    return b.index(a, [None] * dim + [index])


def index_add(b, a, dim, index, src):
    dtype = b.dtype_of(a)
    work = acc_dtype(dtype)  # repeated indices add up in float32 for the half types
    out = new_copy(b, a, work)
    if math.prod(src.shape):
        src = cast(b, src, work)
        if not a.shape:
            total = b.sum(src, tuple(range(len(src.shape))), False, work)
            b.binary("add", out, total, out=out)
        else:
            along = place_along(b, index, dim, src.shape)
            b.index_put_(out, _grids(b, src.shape, dim, along, b.device_index_of(a)), src, True)
    return cast(b, out, dtype)


def nonzero(b, a):
    mask = b.binary("ne", a, zero(b.dtype_of(a)))
    coords = np.argwhere(b.to_numpy(contiguous(b, mask))).astype(np.int64)
    return b.from_numpy(np.ascontiguousarray(coords), b.device_index_of(a))


def topk(b, a, k, dim, largest, sorted):
    values, indices = b.sort(a, dim, largest, True)
    return new_copy(b, narrow(b, values, dim, 0, k)), new_copy(b, narrow(b, indices, dim, 0, k))


# ------------------------------------------------------------------ layout
def flip(b, a, dims):
    out = a
    for d in dims:
        n = a.shape[d]
        reverse = b.arange(n - 1, -1, -1, int64, b.device_index_of(a))
        out = b.index_select(out, d, reverse)
    return out if dims else new_copy(b, a)


def triangle(b, a, k, upper: bool):
    """tril/triu: keep ``col - row <= k`` (lower) or ``>= k`` (upper) of the last two dims."""
    rows, cols = a.shape[-2:]
    dev = b.device_index_of(a)
    diff = b.binary("sub", positions(b, (rows, cols), 1, dev), positions(b, (rows, cols), 0, dev))
    keep = b.binary("ge" if upper else "le", diff, k)
    return b.where(expand_to(b, keep, a.shape), a, zero(b.dtype_of(a)))


# ------------------------------------------------------------------ random
def normal_(b, a, mean, std, gen):
    """Box-Muller on two uniform draws per element, in float32 (float64 for float64)."""
    work = float64 if b.dtype_of(a) is float64 else float32
    dev = b.device_index_of(a)
    u1 = b.uniform_(b.empty(a.shape, work, dev), 0.0, 1.0, gen)
    u2 = b.uniform_(b.empty(a.shape, work, dev), 0.0, 1.0, gen)
    radius = b.unary("sqrt", b.binary("mul", b.unary("log1p", b.unary("neg", u1)), -2.0))
    angle = b.unary("cos", b.binary("mul", u2, 2 * math.pi))
    z = b.binary("add", b.binary("mul", b.binary("mul", radius, angle), float(std)),
                 float(mean))
    return b.copy_(a, z)


def randperm(b, n, dtype, index, gen):
    """Sort random 62-bit keys: the positions they move to are a uniform permutation."""
    keys = b.random_(b.empty((n,), int64, index), 0, 2**62, gen)
    _, order = b.sort(keys, 0, False, True)
    return cast(b, order, dtype)


# ------------------------------------------------------------------ fused kernels
def linear(b, x, weight, bias):
    """``x @ weight.T (+ bias)``: a matmul on (M, K) rows, then the bias added in place."""
    k, n = x.shape[-1], weight.shape[0]
    lead = tuple(x.shape[:-1])
    m = math.prod(lead)
    xc = contiguous(b, x)
    x2 = b.as_strided(xc, (m, k), (k, 1), b.storage_offset_of(xc))  # (M, K)
    ws = b.strides_of(weight)
    w_t = b.as_strided(weight, (k, n), (ws[1], ws[0]), b.storage_offset_of(weight))  # (K, N)
    out = b.matmul(x2, w_t)  # (M, N), contiguous
    if bias is not None:
        out = b.binary("add", out, expand_to(b, bias, out.shape), out=out)
    return b.as_strided(out, lead + (n,), contiguous_strides(lead + (n,)), 0)


def softmax(b, x, dim, log):
    dtype = b.dtype_of(x)
    work = x if dtype.itemsize >= 4 else cast(b, x, float32)
    shifted = b.binary("sub", work, expand(b, b.amax(work, (dim,), True), work))
    exp = b.unary("exp", shifted)
    total = b.sum(exp, (dim,), True, b.dtype_of(work))  # keepdim: size 1 along dim
    if log:
        out = b.binary("sub", shifted, expand(b, b.unary("log", total), work))
    else:
        out = b.binary("div", exp, expand(b, total, work))
    return cast(b, out, dtype)


def softmax_backward(b, y, grad, dim, log):
    dt = b.dtype_of(y)
    if log:  # g - exp(y) * sum(g)
        total = expand(b, b.sum(grad, (dim,), True, dt), grad)
        return b.binary("sub", grad, b.binary("mul", b.unary("exp", y), total))
    dot = expand(b, b.sum(b.binary("mul", grad, y), (dim,), True, dt), y)  # y * (g - sum(g y))
    return b.binary("mul", y, b.binary("sub", grad, dot))


def _affine(b, y, weight, bias, acc):
    if weight is not None:
        y = b.binary("mul", y, expand_to(b, cast(b, weight, acc), y.shape))
    if bias is not None:
        y = b.binary("add", y, expand_to(b, cast(b, bias, acc), y.shape))
    return y


def layer_norm(b, x, weight, bias, eps):
    acc = norm_acc_dtype(b.dtype_of(x))
    xw = cast(b, x, acc)
    last = len(x.shape) - 1
    n = x.shape[-1]
    mean = b.binary("div", b.sum(xw, (last,), True, acc), float(n))
    centered = b.binary("sub", xw, expand(b, mean, xw))
    var = b.binary("div", b.sum(b.binary("mul", centered, centered), (last,), True, acc),
                   float(n))
    rstd = b.unary("rsqrt", b.binary("add", var, float(eps)))
    y = _affine(b, b.binary("mul", centered, expand(b, rstd, xw)), weight, bias, acc)
    return cast(b, y, b.dtype_of(x)), mean, rstd


def layer_norm_backward(b, grad, x, weight, mean, rstd):
    acc = norm_acc_dtype(b.dtype_of(x))
    g = cast(b, grad, acc)
    xw = cast(b, x, acc)
    last = len(x.shape) - 1
    n = float(x.shape[-1])
    lead = tuple(range(last))
    xhat = b.binary("mul", b.binary("sub", xw, expand(b, mean, xw)), expand(b, rstd, xw))
    gw = gb = None
    if weight is not None:
        gw = cast(b, b.sum(b.binary("mul", g, xhat), lead, False, acc), b.dtype_of(weight))
        gb = cast(b, b.sum(g, lead, False, acc), b.dtype_of(weight))
        g = b.binary("mul", g, expand_to(b, cast(b, weight, acc), g.shape))
    mean_g = b.binary("div", b.sum(g, (last,), True, acc), n)
    mean_gx = b.binary("div", b.sum(b.binary("mul", g, xhat), (last,), True, acc), n)
    inner = b.binary("sub", b.binary("sub", g, expand(b, mean_g, g)),
                     b.binary("mul", xhat, expand(b, mean_gx, g)))
    gx = b.binary("mul", inner, expand(b, rstd, g))
    return cast(b, gx, b.dtype_of(x)), gw, gb


def rms_norm(b, x, weight, eps):
    acc = norm_acc_dtype(b.dtype_of(x))
    xw = cast(b, x, acc)
    last = len(x.shape) - 1
    ms = b.binary("div", b.sum(b.binary("mul", xw, xw), (last,), True, acc), float(x.shape[-1]))
    rstd = b.unary("rsqrt", b.binary("add", ms, float(eps)))
    y = _affine(b, b.binary("mul", xw, expand(b, rstd, xw)), weight, None, acc)
    return cast(b, y, b.dtype_of(x)), rstd


def rms_norm_backward(b, grad, x, weight, rstd):
    acc = norm_acc_dtype(b.dtype_of(x))
    g = cast(b, grad, acc)
    xw = cast(b, x, acc)
    last = len(x.shape) - 1
    xhat = b.binary("mul", xw, expand(b, rstd, xw))
    gw = None
    if weight is not None:
        gw = cast(b, b.sum(b.binary("mul", g, xhat), tuple(range(last)), False, acc),
                  b.dtype_of(weight))
        g = b.binary("mul", g, expand_to(b, cast(b, weight, acc), g.shape))
    mean_gx = b.binary("div", b.sum(b.binary("mul", g, xhat), (last,), True, acc),
                       float(x.shape[-1]))
    inner = b.binary("sub", g, b.binary("mul", xhat, expand(b, mean_gx, g)))
    gx = b.binary("mul", inner, expand(b, rstd, g))
    return cast(b, gx, b.dtype_of(x)), gw
