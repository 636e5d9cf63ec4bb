"""Shape rules shared by every op: broadcasting, dim normalisation, device checks."""

from __future__ import annotations

import os
from operator import index as _index
from operator import itemgetter

from genesis import dtypes as D
from genesis.tensor import Size, Tensor, geometry

wrap = Tensor._wrap


class KernelTable:
    """backend -> that backend's kernel for one op, made by ``make(backend)`` the first time
    that backend asks.

    The hot paths read ``table`` (a plain dict) in a ``try`` and call ``fill`` on a miss:
    CPython subscripts an exact dict in one specialised instruction, where ``[]`` on a dict
    subclass (a ``__missing__`` table) goes through a Python-level ``__getitem__`` call
    (about 200 machine instructions more, over 1 % of a tiny op). ``kernels[backend]`` is
    the same lookup, for the cold paths.

    Example:
        >>> kernels = KernelTable(lambda backend: backend.unary_kernel("exp"))
        >>> try:
        ...     kernel = kernels.table[x._backend]
        ... except KeyError:  # (this backend's first call of the op)
        ...     kernel = kernels.fill(x._backend)
        >>> y_data = kernel(x._data)
    """

    __slots__ = ("table", "make")

    def __init__(self, make):
        self.table: dict = {}
        self.make = make

    def fill(self, backend):
        """Make ``backend``'s kernel, keep it and return it."""
        kernel = self.table[backend] = self.make(backend)
        return kernel

    def __getitem__(self, backend):
        try:
            return self.table[backend]
        except KeyError:
            return self.fill(backend)


def formula_caller(formula, names: tuple, wanted: tuple):
    """``call(values)``: ``formula`` called on the ``wanted`` entries of ``values``, laid out
    as ``names`` (how a backward hands a declared gradient formula just the arguments it
    reads).

    Args:
        formula: the gradient formula (``lambda g, y: g * y``).
        names: what ``values`` holds, in order (``("g", "x", "y")``).
        wanted: the formula's arguments, in its order (``("g", "y")``).

    Returns:
        ``call(values)``, the formula's result. Up to three arguments it is a call of fixed
        arity: CPython runs that in the caller's evaluation loop, where ``formula(*picked)``
        re-enters the interpreter (about 0.15 µs, once per graph node in every backward).

    Example:
        >>> formula_caller(lambda g, y: g * y, ("g", "x", "y"), ("g", "y"))((2, 0, 5))
        10
    """
    pos = [names.index(n) for n in wanted]
    if len(pos) == 1:
        i = pos[0]
        return lambda values: formula(values[i])
    if len(pos) == 2:
        i, j = pos
        return lambda values: formula(values[i], values[j])
    if len(pos) == 3:
        i, j, k = pos
        return lambda values: formula(values[i], values[j], values[k])
    pick = itemgetter(*pos)
    return lambda values: formula(*pick(values))


def broadcast_shapes(*shapes) -> tuple:
    """The shape that ``shapes`` broadcast to (numpy/torch rules); error names them all.

    Args:
        *shapes: shapes (tuples of ints, or ``Size``).

    Returns:
        The broadcast shape as a tuple of ints.
    """
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        offset = ndim - len(s)
        for i, n in enumerate(s):
            cur = out[offset + i]
            if n != cur:
                if cur == 1:
                    out[offset + i] = n
                elif n != 1:
                    shown = " and ".join(str(tuple(x)) for x in shapes)
                    raise RuntimeError(
                        f"shapes {shown} cannot be broadcast together: size {n} vs size {cur} "
                        f"at dimension {offset + i - ndim}")
    return tuple(out)


_BROADCAST: dict = {}  # (shape, shape) -> broadcast Size: the pairs a program meets repeat


def broadcast_size(a: tuple, b: tuple) -> Size:
    """``broadcast_shapes(a, b)`` as a ``Size``, remembered per pair of shapes."""
    out = _BROADCAST.get((a, b))
    if out is None:
        if len(_BROADCAST) > 4096:
            _BROADCAST.clear()
        out = _BROADCAST[(a, b)] = Size(broadcast_shapes(a, b))
    return out


def expand_array(t: Tensor, shape: tuple):
    """``t``'s array viewed at the broadcast ``shape`` (zero strides; no copy)."""
    if t.shape == shape:
        return t._data
    strides, offset = geometry(t)
    new_strides = [0] * (len(shape) - len(t.shape))
    for n, s in zip(t.shape, strides):
        new_strides.append(0 if n == 1 else s)
    return t._backend.as_strided(t._data, shape, tuple(new_strides), offset)


def normalize_dim(dim: int, ndim: int) -> int:
    """A dim index in ``[0, ndim)`` from a possibly negative one (0-d tensors accept -1, 0)."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


def normalize_dims(dim, ndim: int) -> tuple:
    """Sorted, distinct non-negative dims; ``None`` or ``()`` means every dim."""
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = (dim,)
    dims = tuple(sorted({normalize_dim(d, ndim) for d in dim}))
    if len(dims) != len(dim):
        raise RuntimeError(f"dim {tuple(dim)} appears multiple times in the list of dims")
    if ndim == 0:
        return ()
    return dims


def check_same_device(op: str, *tensors) -> None:
    """Raise the torch-style error when tensors of two devices meet in ``op``."""
    first = tensors[0].device
    for t in tensors[1:]:
        if t.device is not first:
            raise RuntimeError(
                f"Expected all tensors to be on the same device, but found at least two "
                f"devices, {first} and {t.device}! (in {op})")


# Checks of tensor *values* (index bounds, class targets, probabilities) read a result back to
# the host. On the CPU that costs nothing extra and torch raises there too; on an accelerator
# it would stop the host until the device catches up (twice per gather on an LLM decode step)
# and make CUDA-graph capture impossible, and torch itself only reports such errors later,
# through a device-side assert. So they run on accelerators only when asked for:
# GENESIS_DEVICE_CHECKS=1 in the environment (or this flag set to True), for debugging.
# Without it a backend meets bad indices in its kernels: genesis-cuda's skip them and raise
# IndexError at the next synchronisation (genesis_cuda/kernel_errors.py).
DEVICE_VALUE_CHECKS = os.environ.get("GENESIS_DEVICE_CHECKS", "") not in ("", "0")


class _ValueChecks:
    """``off`` > 0 while ``genesis.compile`` traces: a compiled function reads no values to
    check them (a replay could not re-check them, and a host read would break its graph)."""

    off = 0


VALUE_CHECKS = _ValueChecks()


def checks_values(t: Tensor) -> bool:
    """Whether a check that reads ``t``'s values to the host runs: always for a CPU tensor,
    on an accelerator only with ``GENESIS_DEVICE_CHECKS=1`` (see ``DEVICE_VALUE_CHECKS``),
    never while ``genesis.compile`` traces."""
    return (t.device.type == "cpu" or DEVICE_VALUE_CHECKS) and not VALUE_CHECKS.off


def float_dtype_for(dtype: D.DType) -> D.DType:
    """The dtype a float-valued op on ``dtype`` computes in (ints go to the default)."""
    return dtype if dtype.is_floating_point else D.get_default_dtype()


def sum_to_shape(grad: Tensor, shape: tuple) -> Tensor:
    """Reduce a broadcast gradient back to an input's ``shape``."""
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    dims = list(range(lead))
    for i, n in enumerate(shape):
        if n == 1 and grad.shape[lead + i] != 1:
            dims.append(lead + i)
    out = grad.sum(dim=tuple(dims), keepdim=True) if dims else grad
    if lead:
        out = out.reshape(shape)
    return out


def shape_arg(args, allow_infer: bool = False) -> tuple:
    """Accept ``f(2, 3)``, ``f((2, 3))`` and ``f([2, 3])`` as the shape ``(2, 3)``
    (``allow_infer``: a -1 is left for the caller to resolve)."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = args[0]
    try:  # index(), not int(): a float size is an error (torch), not silently truncated
        shape = tuple(_index(a) for a in args)
    except TypeError:
        raise TypeError(f"a shape must be ints, got {args!r}") from None
    for n in shape:
        if n < 0 and not (allow_infer and n == -1):
            raise RuntimeError(f"negative dimension {n} in shape {shape}")
    return shape
