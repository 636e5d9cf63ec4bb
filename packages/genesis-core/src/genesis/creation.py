"""Making tensors: from data, filled, ranges, identity, numpy and DLPack (random draws are in
``genesis.sampling``)."""

from __future__ import annotations

import numpy as np

from genesis import dtypes as D
from genesis.device import default_device_or_none, placement
from genesis.device import device as Device
from genesis.dispatch import registered_op
from genesis.ops.common import shape_arg, wrap
from genesis.tensor import Tensor

_NP_TO_DTYPE = {
    np.dtype(np.bool_): D.bool_, np.dtype(np.uint8): D.uint8, np.dtype(np.int8): D.int8,
    np.dtype(np.int16): D.int16, np.dtype(np.int32): D.int32, np.dtype(np.int64): D.int64,
    np.dtype(np.float16): D.float16, np.dtype(np.float32): D.float32,
    np.dtype(np.float64): D.float64,
}
_DTYPE_TO_NP = {v: k for k, v in _NP_TO_DTYPE.items()}


def numpy_dtype(dtype: D.DType) -> np.dtype:
    """The numpy dtype holding ``dtype``'s values (bfloat16 travels as float32)."""
    return _DTYPE_TO_NP.get(dtype, np.dtype(np.float32))


def _finish(t: Tensor, requires_grad: bool) -> Tensor:
    if requires_grad:
        t.requires_grad_(True)
    return t


def _infer_dtype(data) -> D.DType | None:
    """The dtype torch.tensor would give nested Python data (None: let numpy decide)."""
    flat = data
    while isinstance(flat, (list, tuple)) and flat:
        flat = flat[0]
    if isinstance(flat, Tensor):
        return None
    # As torch: Python bools/ints/floats count as bool/int64/the default float, numpy scalars
    # as their own dtype (np.float64 stays float64), and the element dtypes are promoted.
    found = None
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
            continue
        if isinstance(item, np.generic):
            dt = _NP_TO_DTYPE.get(item.dtype)
            if dt is None:
                raise TypeError(f"Could not infer dtype of numpy.{item.dtype}")
        elif isinstance(item, bool):
            dt = D.bool_
        elif isinstance(item, int):
            dt = D.int64
        elif isinstance(item, float):
            dt = D.get_default_dtype()
        elif isinstance(item, Tensor):
            return None
        else:
            raise TypeError(f"Could not infer dtype of {type(item).__name__}")
        if dt is not found:
            found = dt if found is None else D.promote_types(found, dt)
    # an empty list is a float tensor, as in torch
    return D.get_default_dtype() if found is None else found


@registered_op("tensor")
def tensor(data, dtype: D.DType | None = None, device=None,
           requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (numbers, nested lists, numpy arrays, tensors).

    Args:
        data: the values. Python floats become the default dtype, ints int64, bools bool.
        dtype: the element type (inferred when None).
        device: where to put it; the default device (``get_default_device()``) when None.
        requires_grad: record operations on it for autograd.

    Returns:
        A new tensor (never sharing memory with ``data``).

    Example:
        >>> genesis.tensor([[1, 2], [3, 4]], dtype=genesis.float32)
    """
    dev = placement(device)
    if isinstance(data, Tensor):
        out = data.detach().to(device=dev, dtype=dtype or data.dtype, copy=True)
        return _finish(out, requires_grad)
    if isinstance(data, np.ndarray):
        arr = data
        inferred = _NP_TO_DTYPE.get(arr.dtype)
        if inferred is None:
            raise TypeError(f"can't convert np.ndarray of type {arr.dtype}")
    else:
        inferred = _infer_dtype(data)
        try:
            if inferred is None:  # a list holding tensors: go through numpy
                arr = np.array([np.asarray(x) for x in data]) \
                    if isinstance(data, (list, tuple)) else np.asarray(data)
                inferred = _NP_TO_DTYPE.get(arr.dtype, D.get_default_dtype())
            else:  # floats straight to the asked-for float dtype: 1.2 as float64 must not
                # pass through float32 (integer targets keep numpy's wrapping casts below)
                wanted = dtype if dtype in (D.float16, D.float32, D.float64) else inferred
                arr = np.array(data, dtype=numpy_dtype(wanted))
        except ValueError:
            _check_nesting(data)  # ragged data: say where, in torch's words
            raise
    target = dtype or inferred
    # np.asarray, not np.ascontiguousarray: the latter turns 0-d data into shape (1,)
    arr = np.asarray(arr, dtype=numpy_dtype(target) if target is not D.bfloat16
                     else np.float32, order="C")
    return _finish(_from_host(arr.copy(), target, dev), requires_grad)


def _sequence_length(x) -> int | None:
    """``len(x)`` for the things ``tensor()`` reads as a dimension, else None."""
    if isinstance(x, (list, tuple)):
        return len(x)
    if isinstance(x, (np.ndarray, Tensor)) and x.ndim:
        return x.shape[0]
    return None


def _check_nesting(data) -> None:
    """Raise where nested ``data`` is not rectangular: the shape is read along the first
    elements (as torch does), then every sequence must match it."""
    shape, x = [], data
    while (n := _sequence_length(x)) is not None:
        shape.append(n)
        if not n:
            break
        x = x[0]

    def walk(x, dim):
        n = _sequence_length(x)
        if dim == len(shape):
            if n is not None:
                raise ValueError(f"expected a number at dim {dim} (got a sequence of "
                                 f"length {n})")
            return
        if n is None:
            raise ValueError(f"expected sequence of length {shape[dim]} at dim {dim} "
                             f"(got {type(x).__name__})")
        if n != shape[dim]:
            raise ValueError(f"expected sequence of length {shape[dim]} at dim {dim} "
                             f"(got {n})")
        for item in x:
            walk(item, dim + 1)

    walk(data, 0)


def _from_host(arr: np.ndarray, dtype: D.DType, dev) -> Tensor:
    backend = dev.backend
    data = backend.from_numpy(arr, dev.index)
    if dtype is D.bfloat16:
        data = backend.cast(data, D.bfloat16)
    return wrap(data, dev)


@registered_op("as_tensor")
def as_tensor(data, dtype: D.DType | None = None, device=None) -> Tensor:
    """``data`` as a tensor, sharing memory when it already is one (or a CPU numpy array).

    Args:
        data: a tensor, a numpy array, or (nested) Python numbers.
        dtype: the element type; kept or inferred when None.
        device: where to put it; when None, the default device if one is set
            (``set_default_device``), else kept (the CPU for new data).

    Returns:
        ``data`` itself when nothing changes, else a new tensor.
    """
    dev = placement(device) if device is not None else default_device_or_none()
    if isinstance(data, Tensor):
        if (dtype is None or dtype is data.dtype) and (dev is None or dev is data.device):
            return data
        return data.to(device=dev or data.device, dtype=dtype or data.dtype)
    if isinstance(data, np.ndarray) and (dev is None or dev.type == "cpu") and (
            dtype is None or numpy_dtype(dtype) == data.dtype):
        return from_numpy(data)
    return tensor(data, dtype=dtype, device=dev)


@registered_op("from_numpy")
def from_numpy(ndarray: np.ndarray) -> Tensor:
    """A CPU tensor sharing memory with ``ndarray``.

    Args:
        ndarray: a numpy array of a supported dtype.

    Returns:
        A CPU tensor sharing ``ndarray``'s memory.
    """
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    if ndarray.dtype not in _NP_TO_DTYPE:
        raise TypeError(f"can't convert np.ndarray of type {ndarray.dtype}. The only supported "
                        "types are: float64, float32, float16, int64, int32, int16, int8, "
                        "uint8, and bool.")
    dev = placement("cpu")
    return wrap(dev.backend.from_numpy(ndarray, None), dev)


@registered_op("from_dlpack")
def from_dlpack(ext) -> Tensor:
    """A tensor sharing memory with any DLPack-capable object (or a capsule).

    Args:
        ext: an object with ``__dlpack__`` (a torch or cupy tensor ...) or a DLPack capsule.

    Returns:
        A tensor viewing the same memory.
    """
    if hasattr(ext, "__dlpack_device__"):
        dev_type, index = ext.__dlpack_device__()
    else:
        dev_type, index = 1, 0
    names = {1: "cpu", 2: "cuda", 3: "cpu"}
    if int(dev_type) not in names:
        raise RuntimeError(f"from_dlpack: unsupported DLPack device type {dev_type}")
    dev = Device(names[int(dev_type)], None if names[int(dev_type)] == "cpu" else int(index))
    return wrap(dev.backend.from_dlpack(ext, dev.index), dev)


# --------------------------------------------------------------- filled
def _factory(shape, value, dtype, device, requires_grad) -> Tensor:
    dev = placement(device)
    if dtype is None:
        dtype = D.get_default_dtype() if value is None or isinstance(value, float) \
            else D.scalar_dtype(value)
    backend = dev.backend
    if value is None:
        data = backend.empty(shape, dtype, dev.index)
    else:
        data = backend.full(shape, value, dtype, dev.index)
    return _finish(wrap(data, dev), requires_grad)


@registered_op("zeros")
def zeros(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of zeros with the given shape.

    Args:
        *size: the shape: ints, or one tuple or list of ints.
        dtype: the element type; the default float dtype when None.
        device: where to make it; the default device (``get_default_device()``) when None.
        requires_grad: whether autograd records operations on the result.

    Returns:
        A new tensor.
    """
    return _factory(shape_arg(size), 0.0 if dtype is None else 0, dtype, device, requires_grad)


@registered_op("ones")
def ones(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of ones with the given shape.

    Args:
        *size: the shape: ints, or one tuple or list of ints.
        dtype: the element type; the default float dtype when None.
        device: where to make it; the default device (``get_default_device()``) when None.
        requires_grad: whether autograd records operations on the result.

    Returns:
        A new tensor.
    """
    return _factory(shape_arg(size), 1.0 if dtype is None else 1, dtype, device, requires_grad)


@registered_op("full")
def full(size, fill_value, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor filled with ``fill_value`` (dtype inferred from it when not given).

    Args:
        size: the shape (a tuple or list of ints).
        fill_value: the value of every element.
        dtype: the element type; inferred from ``fill_value`` when None.
        device: where to make it; the default device (``get_default_device()``) when None.
        requires_grad: whether autograd records operations on the result.

    Returns:
        A new tensor.
    """
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    return _factory(shape_arg((size,) if isinstance(size, int) else size), fill_value, dtype,
                    device, requires_grad)


@registered_op("empty")
def empty(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """An uninitialised tensor with the given shape.

    Args:
        *size: the shape: ints, or one tuple or list of ints.
        dtype: the element type; the default float dtype when None.
        device: where to make it; the default device (``get_default_device()``) when None.
        requires_grad: whether autograd records operations on the result.

    Returns:
        A new tensor with arbitrary values.
    """
    return _factory(shape_arg(size), None, dtype, device, requires_grad)


def _like(t: Tensor, dtype, device):
    return dtype or t.dtype, device or t.device


@registered_op("zeros_like")
def zeros_like(input: Tensor, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A tensor of zeros with the shape of ``input``.

    Args:
        input: the tensor whose shape (and, by default, dtype and device) is used.
        dtype: the result's dtype; ``input.dtype`` when None.
        device: the result's device; ``input.device`` when None.
        requires_grad: whether autograd records operations on the result.

    Returns:
        A new tensor of ``input.shape``.

    Example:
        >>> genesis.zeros_like(genesis.ones(2, 3)).sum().item()
        0.0
    """
    dtype, device = _like(input, dtype, device)
    return _factory(input.shape, 0, dtype, device, requires_grad)


@registered_op("ones_like")
def ones_like(input: Tensor, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A tensor of ones with the shape of ``input``.

    Args:
        input: the tensor whose shape (and, by default, dtype and device) is used.
        dtype: the result's dtype; ``input.dtype`` when None.
        device: the result's device; ``input.device`` when None.
        requires_grad: whether autograd records operations on the result.

    Returns:
        A new tensor of ``input.shape``.
    """
    dtype, device = _like(input, dtype, device)
    return _factory(input.shape, 1, dtype, device, requires_grad)


@registered_op("full_like")
def full_like(input: Tensor, fill_value, *, dtype=None, device=None,
              requires_grad=False) -> Tensor:
    """A tensor filled with ``fill_value`` with the shape of ``input``.

    Args:
        input: the tensor whose shape (and, by default, dtype and device) is used.
        fill_value: the value of every element.
        dtype: the result's dtype; ``input.dtype`` when None.
        device: the result's device; ``input.device`` when None.
        requires_grad: whether autograd records operations on the result.

    Returns:
        A new tensor of ``input.shape``.
    """
    dtype, device = _like(input, dtype, device)
    return _factory(input.shape, fill_value, dtype, device, requires_grad)


@registered_op("empty_like")
def empty_like(input: Tensor, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    """A tensor of uninitialised memory with the shape of ``input``.

    Args:
        input: the tensor whose shape (and, by default, dtype and device) is used.
        dtype: the result's dtype; ``input.dtype`` when None.
        device: the result's device; ``input.device`` when None.
        requires_grad: whether autograd records operations on the result.

    Returns:
        A new tensor of ``input.shape`` (its values are arbitrary).
    """
    dtype, device = _like(input, dtype, device)
    return _factory(input.shape, None, dtype, device, requires_grad)


# --------------------------------------------------------------- ranges
@registered_op("arange")
def arange(start, end=None, step=1, *, dtype=None, device=None,
           requires_grad: bool = False) -> Tensor:
    """Values ``start, start+step, ...`` below ``end`` (``arange(n)`` is ``0..n-1``).

    Args:
        start: the first value (or, alone, ``end`` with a start of 0).
        end: the bound, excluded.
        step: the difference between values.
        dtype: the element type; when None, int64 for integer arguments, else the default
            float dtype.
        device: where to make it; the default device (``get_default_device()``) when None.
        requires_grad: whether autograd records operations on the result.

    Returns:
        A new 1-d tensor.
    """
    if end is None:
        start, end = 0, start
    vals = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    if vals[2] == 0:
        raise RuntimeError("arange: step must be nonzero")
    if dtype is None:
        dtype = D.get_default_dtype() if any(isinstance(v, float) for v in vals) else D.int64
    if (vals[1] - vals[0]) * vals[2] < 0:
        raise RuntimeError(f"arange: upper bound and larger bound inconsistent with step sign "
                           f"(start={vals[0]}, end={vals[1]}, step={vals[2]})")
    dev = placement(device)
    return _finish(wrap(dev.backend.arange(*vals, dtype, dev.index), dev), requires_grad)


@registered_op("linspace")
def linspace(start, end, steps: int, *, dtype=None, device=None,
             requires_grad: bool = False) -> Tensor:
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive.

    Args:
        start: the first value.
        end: the last value.
        steps: the number of values.
        dtype: the element type; the default float dtype when None.
        device: where to make it; the default device (``get_default_device()``) when None.
        requires_grad: whether autograd records operations on the result.

    Returns:
        A new 1-d tensor of ``steps`` values.
    """
    if steps < 0:
        raise RuntimeError("linspace: number of steps must be non-negative")
    dtype = dtype or D.get_default_dtype()
    step = (end - start) / (steps - 1) if steps > 1 else 0.0
    idx = np.arange(steps, dtype=np.float64)
    # torch fills the second half from the end so the last value is exactly `end`
    vals = np.where(idx < max(steps // 2, 1), start + step * idx, end - step * (steps - 1 - idx))
    return tensor(vals, dtype=dtype, device=device, requires_grad=requires_grad)


@registered_op("eye")
def eye(n: int, m: int | None = None, *, dtype=None, device=None,
        requires_grad: bool = False) -> Tensor:
    """A 2-d tensor with ones on the diagonal.

    Args:
        n: the number of rows.
        m: the number of columns; ``n`` when None.
        dtype: the element type; the default float dtype when None.
        device: where to make it; the default device (``get_default_device()``) when None.
        requires_grad: whether autograd records operations on the result.

    Returns:
        A new (n, m) tensor.
    """
    m = n if m is None else m
    return tensor(np.eye(n, m), dtype=dtype or D.get_default_dtype(), device=device,
                  requires_grad=requires_grad)
