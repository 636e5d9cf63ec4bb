"""Test utilities: ``assert_close`` (torch's default per-dtype tolerances) and ``gradcheck``
(float64 central finite differences against autograd), as ``torch.testing`` and
``torch.autograd.gradcheck`` have them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from genesis import creation, sampling
from genesis import dtypes as D
from genesis.autograd.engine import grad
from genesis.autograd.grad_mode import no_grad
from genesis.tensor import Tensor

__all__ = ["GradcheckError", "assert_close", "default_tolerances", "gradcheck", "gradgradcheck"]

# (rtol, atol) per dtype: the same table as torch.testing.assert_close.
_TOLERANCES = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
}


def default_tolerances(*dtypes) -> tuple[float, float]:
    """The ``(rtol, atol)`` ``assert_close`` uses for these dtypes (the loosest of them).

    Integer and bool dtypes compare exactly: ``(0.0, 0.0)``.
    """
    rtol = atol = 0.0
    for dt in dtypes:
        r, a = _TOLERANCES.get(_dtype_name(dt), (0.0, 0.0))
        rtol, atol = max(rtol, r), max(atol, a)
    return rtol, atol


def _dtype_name(dt) -> str:
    if isinstance(dt, D.DType):
        return dt.name
    name = str(dt)  # torch.float32 / numpy dtype('float32')
    return name.rsplit(".", 1)[-1]


class _Value:
    """One leaf of a compared structure, as host float64/int data plus its metadata."""

    def __init__(self, obj):
        self.obj = obj
        self.is_tensor = False
        self.device = None
        if _is_genesis_tensor(obj):
            self.is_tensor = True
            self.dtype = obj.dtype.name
            self.device = str(obj.device)
            t = obj.detach()
            if t.dtype is D.bfloat16:
                t = t.to(D.float32)
            self.array = np.array(t.cpu().numpy(), copy=True)
            self.shape = tuple(obj.shape)
        elif type(obj).__module__.startswith("torch") and hasattr(obj, "detach"):
            self.is_tensor = True
            self.dtype = _dtype_name(obj.dtype)
            self.device = str(obj.device)
            t = obj.detach().cpu()
            if self.dtype == "bfloat16":
                t = t.float()
            self.array = np.array(t.numpy(), copy=True)
            self.shape = tuple(obj.shape)
        elif isinstance(obj, np.ndarray) or isinstance(obj, np.generic):
            self.is_tensor = True
            self.array = np.asarray(obj)
            self.dtype = self.array.dtype.name
            self.shape = self.array.shape
        elif isinstance(obj, (bool, int, float)):
            self.array = np.asarray(obj)
            self.dtype = {bool: "bool", int: "int64", float: "float64"}[type(obj)]
            self.shape = ()
        else:
            raise TypeError(f"assert_close cannot compare objects of type {type(obj).__name__}")


def _is_genesis_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def _is_leaf(obj) -> bool:
    return (_is_genesis_tensor(obj) or isinstance(obj, (np.ndarray, np.generic, bool, int, float))
            or (type(obj).__module__.startswith("torch") and hasattr(obj, "detach")))


def assert_close(actual, expected, *, rtol: float | None = None, atol: float | None = None,
                 equal_nan: bool = False, check_device: bool = True, check_dtype: bool = True,
                 msg: str | Callable[[str], str] | None = None) -> None:
    """Assert ``actual`` and ``expected`` are close: ``|a - e| <= atol + rtol * |e|``.

    Mirrors ``torch.testing.assert_close``: tensors (genesis, torch or numpy), Python
    numbers and nested sequences/mappings of them are compared leaf by leaf; the default
    ``rtol``/``atol`` depend on the dtypes (float16 1e-3/1e-5, bfloat16 1.6e-2/1e-5,
    float32 1.3e-6/1e-5, float64 1e-7/1e-7, integers and bool exact).

    Args:
        actual: the value under test.
        expected: the reference value.
        rtol: relative tolerance (give both or neither).
        atol: absolute tolerance (give both or neither).
        equal_nan: whether NaNs in the same places compare equal.
        check_device: whether tensors must live on the same device type.
        check_dtype: whether tensors must have the same dtype.
        msg: replaces the failure message (a callable receives the generated one).

    Raises:
        AssertionError: with the number of mismatched elements and the greatest absolute
            and relative differences (and where they are).

    Example:
        >>> genesis.testing.assert_close(genesis.tensor([1.0]), genesis.tensor([1.0 + 1e-7]))
    """
    if (rtol is None) != (atol is None):
        raise ValueError("Both 'rtol' and 'atol' must be either specified or omitted, but got "
                         f"no {'rtol' if rtol is None else 'atol'}.")
    _compare(actual, expected, rtol, atol, equal_nan, check_device, check_dtype, msg, ())


def _fail(text: str, msg, path: tuple) -> None:
    where = "".join(f"[{p!r}]" for p in path)
    if where:
        text = f"{text}\n\nThe failure occurred for item {where}"
    if callable(msg):
        text = msg(text)
    elif msg is not None:
        text = msg
    raise AssertionError(text)


def _compare(actual, expected, rtol, atol, equal_nan, check_device, check_dtype, msg,
             path) -> None:
    if not _is_leaf(actual) or not _is_leaf(expected):
        if isinstance(actual, Mapping) and isinstance(expected, Mapping):
            if set(actual) != set(expected):
                _fail(f"The keys of the mappings do not match: {sorted(map(str, actual))} != "
                      f"{sorted(map(str, expected))}", msg, path)
            for k in expected:
                _compare(actual[k], expected[k], rtol, atol, equal_nan, check_device,
                         check_dtype, msg, path + (k,))
            return
        seq_a = isinstance(actual, Sequence) and not isinstance(actual, str)
        seq_e = isinstance(expected, Sequence) and not isinstance(expected, str)
        if seq_a and seq_e:
            if len(actual) != len(expected):
                _fail(f"The length of the sequences mismatch: {len(actual)} != "
                      f"{len(expected)}", msg, path)
            for i, (a, e) in enumerate(zip(actual, expected)):
                _compare(a, e, rtol, atol, equal_nan, check_device, check_dtype, msg,
                         path + (i,))
            return
        _fail(f"Cannot compare {type(actual).__name__} with {type(expected).__name__}", msg,
              path)
    a, e = _Value(actual), _Value(expected)
    if a.is_tensor != e.is_tensor and (a.is_tensor or e.is_tensor):
        # torch compares a tensor with a number only when both are tensor-likes; be as strict
        _fail(f"Cannot compare a {type(actual).__name__} with a {type(expected).__name__}",
              msg, path)
    if a.shape != e.shape:
        _fail(f"The values for attribute 'shape' do not match: {a.shape} != {e.shape}.", msg,
              path)
    if check_dtype and a.dtype != e.dtype:
        _fail(f"The values for attribute 'dtype' do not match: {a.dtype} != {e.dtype}.", msg,
              path)
    if check_device and a.device is not None and e.device is not None \
            and a.device.split(":")[0] != e.device.split(":")[0]:
        _fail(f"The values for attribute 'device' do not match: {a.device} != {e.device}.",
              msg, path)
    if rtol is None:
        rtol, atol = default_tolerances(a.dtype, e.dtype)
    _compare_values(a, e, rtol, atol, equal_nan, msg, path)


def _compare_values(a: _Value, e: _Value, rtol: float, atol: float, equal_nan: bool, msg,
                    path) -> None:
    exact = a.array.dtype.kind in "biu" and e.array.dtype.kind in "biu"
    if exact:
        x, y = a.array.astype(np.int64), e.array.astype(np.int64)
        bad = x != y
        if not bad.any():
            return
        diff = np.abs(x.astype(np.float64) - y.astype(np.float64))
        rel = diff / np.maximum(np.abs(y.astype(np.float64)), np.finfo(np.float64).tiny)
        kind = "Scalars are not equal!" if a.shape == () else "Tensor-likes are not equal!"
    else:
        x, y = a.array.astype(np.float64), e.array.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(x - y)
            close = diff <= atol + rtol * np.abs(y)
            close |= x == y  # equal infinities
            if equal_nan:
                close |= np.isnan(x) & np.isnan(y)
        bad = ~close
        if not bad.any():
            return
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = diff / np.abs(y)
        kind = "Scalars are not close!" if a.shape == () else "Tensor-likes are not close!"
    n_bad, n = int(bad.sum()), bad.size
    lines = [kind, ""]
    if a.shape == ():
        lines.append(f"Expected {y.item()} but got {x.item()}.")
        lines.append(f"Absolute difference: {diff.item()} (up to {atol} allowed)")
        lines.append(f"Relative difference: {rel.item()} (up to {rtol} allowed)")
    else:
        lines.append(f"Mismatched elements: {n_bad} / {n} ({100.0 * n_bad / n:.1f}%)")
        d = np.where(bad, np.nan_to_num(diff, nan=math.inf), -1.0)
        i_abs = tuple(int(v) for v in np.unravel_index(int(np.argmax(d)), bad.shape))
        r = np.where(bad, np.nan_to_num(rel, nan=math.inf), -1.0)
        i_rel = tuple(int(v) for v in np.unravel_index(int(np.argmax(r)), bad.shape))
        lines.append(f"Greatest absolute difference: {diff[i_abs]} at index {i_abs} "
                     f"(up to {atol} allowed)")
        lines.append(f"Greatest relative difference: {rel[i_rel]} at index {i_rel} "
                     f"(up to {rtol} allowed)")
    _fail("\n".join(lines), msg, path)


# ------------------------------------------------------------------ gradcheck
class GradcheckError(RuntimeError):
    """Autograd's gradient disagrees with finite differences (raised by ``gradcheck``)."""


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _differentiable_outputs(outputs) -> list:
    return [o for o in outputs if _is_genesis_tensor(o) and o.dtype.is_floating_point]


def _flat_values(outputs) -> np.ndarray:
    parts = [o.detach().to(D.float64).cpu().numpy().reshape(-1) for o in outputs]
    return np.concatenate(parts) if parts else np.zeros(0)


def _numerical_jacobians(fn, inputs: tuple, diff_idx: list, eps: float) -> list:
    """Per differentiable input: J[k, j] = d(flat outputs)[k] / d(flat input)[j]."""
    # Contiguous copies that keep requires_grad (gradgradcheck's fn differentiates inside);
    # the perturbation is written through a detached alias of the same memory.
    base = [x.detach().clone().requires_grad_(x.requires_grad) if _is_genesis_tensor(x)
            else x for x in inputs]
    jacobians = []
    for i in diff_idx:
        cols = []
        flat = base[i].detach().reshape(-1)
        for j in range(flat.numel()):
            orig = flat[j].item()
            with no_grad():
                flat[j] = orig + eps
            plus = _flat_values(_differentiable_outputs(_as_tuple(fn(*base))))
            with no_grad():
                flat[j] = orig - eps
            minus = _flat_values(_differentiable_outputs(_as_tuple(fn(*base))))
            with no_grad():
                flat[j] = orig
            cols.append((plus - minus) / (2 * eps))
        n_out = len(cols[0]) if cols else len(_flat_values(
            _differentiable_outputs(_as_tuple(fn(*base)))))
        jacobians.append(np.stack(cols, axis=1) if cols else np.zeros((n_out, 0)))
    return jacobians


def _analytical_jacobians(outputs: list, inputs: tuple, diff_idx: list) -> list:
    """Per differentiable input, the Jacobian built row by row from vector-Jacobian products."""
    diff_inputs = [inputs[i] for i in diff_idx]
    n_out = sum(o.numel() for o in outputs)
    jacs = [np.zeros((n_out, inputs[i].numel())) for i in diff_idx]
    recorded = [i for i, o in enumerate(outputs) if o.requires_grad]
    row = 0
    for pos, o in enumerate(outputs):
        for k in range(o.numel()):
            if o.requires_grad:
                grads_out = []  # by position: one tensor may be returned twice
                for other_pos in recorded:
                    other = outputs[other_pos]
                    g = creation.zeros(other.shape, dtype=other.dtype, device=other.device)
                    if other_pos == pos:
                        g.reshape(-1)[k] = 1.0
                    grads_out.append(g)
                grads = grad([outputs[i] for i in recorded], diff_inputs,
                                              grads_out,
                                              retain_graph=True, allow_unused=True)
                for jac, g, x in zip(jacs, grads, diff_inputs):
                    if g is None:
                        continue
                    if tuple(g.shape) != tuple(x.shape):
                        raise GradcheckError(
                            f"gradcheck: the gradient for an input of shape {tuple(x.shape)} "
                            f"has shape {tuple(g.shape)}")
                    if g.dtype is not x.dtype:
                        raise GradcheckError(
                            f"gradcheck: the gradient for a {x.dtype} input has dtype {g.dtype}")
                    jac[row] = g.detach().to(D.float64).cpu().numpy().reshape(-1)
            row += 1
    return jacs


def gradcheck(fn: Callable, inputs, *, eps: float = 1e-6, atol: float = 1e-5,
              rtol: float = 1e-3, raise_exception: bool = True) -> bool:
    """Check autograd's gradients of ``fn`` against central finite differences.

    Every input tensor with ``requires_grad=True`` must be float64. The numerical Jacobian
    ``(f(x + eps) - f(x - eps)) / (2 eps)`` (one element at a time) is compared to the
    Jacobian assembled from ``autograd.grad`` vector-Jacobian products; they must agree
    within ``|analytical - numerical| <= atol + rtol * |numerical|``. Floating outputs are
    checked; integer outputs (indices) are ignored.

    Args:
        fn: a function of ``inputs`` returning a tensor or a tuple of tensors.
        inputs: a tensor or a tuple of arguments (tensors and anything else).
        eps: finite-difference step.
        atol: absolute tolerance.
        rtol: relative tolerance.
        raise_exception: raise ``GradcheckError`` on a mismatch (else return False).

    Returns:
        True when every gradient matches.

    Example:
        >>> x = genesis.randn(3, dtype=genesis.float64, requires_grad=True)
        >>> genesis.testing.gradcheck(lambda t: (t * t).sin(), (x,))
        True
    """
    inputs = _as_tuple(inputs)
    diff_idx = [i for i, x in enumerate(inputs) if _is_genesis_tensor(x) and x.requires_grad]
    if not diff_idx:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, "
                         "but none of them have requires_grad=True.")
    for i in diff_idx:
        if inputs[i].dtype is not D.float64:
            raise ValueError(f"gradcheck: input {i} has dtype {inputs[i].dtype}; finite "
                             "differences need float64 inputs (use .double())")
    outputs = _differentiable_outputs(_as_tuple(fn(*inputs)))
    try:
        analytical = _analytical_jacobians(outputs, inputs, diff_idx)
    except GradcheckError:
        if raise_exception:
            raise
        return False
    numerical = _numerical_jacobians(fn, inputs, diff_idx, eps)
    for i, a, n in zip(diff_idx, analytical, numerical):
        if a.shape != n.shape:
            err = (f"gradcheck: Jacobian shapes differ for input {i}: analytical {a.shape}, "
                   f"numerical {n.shape} (did fn return a different number of elements?)")
        elif np.all(np.abs(a - n) <= atol + rtol * np.abs(n)):
            continue
        else:
            k, j = np.unravel_index(int(np.argmax(np.abs(a - n) - rtol * np.abs(n))), a.shape)
            err = (f"Jacobian mismatch for output element {k} with respect to input {i} "
                   f"element {j}: analytical {float(a[k, j])!r} vs numerical {float(n[k, j])!r} "
                   f"(atol={atol}, rtol={rtol}).\nnumerical:\n{n}\nanalytical:\n{a}")
        if raise_exception:
            raise GradcheckError(err)
        return False
    return True


def gradgradcheck(fn: Callable, inputs, grad_outputs=None, *, eps: float = 1e-6,
                  atol: float = 1e-5, rtol: float = 1e-3, raise_exception: bool = True) -> bool:
    """``gradcheck`` of the first-order gradients of ``fn`` (second derivatives).

    As in torch, the gradients are differentiated with respect to both ``inputs`` and
    ``grad_outputs`` (one per differentiable output; random float64 when None), so a
    backward that is not itself differentiable is caught even for linear ops.
    """
    inputs = _as_tuple(inputs)
    diff_idx = [i for i, x in enumerate(inputs) if _is_genesis_tensor(x) and x.requires_grad]
    outs = [o for o in _differentiable_outputs(_as_tuple(fn(*inputs))) if o.requires_grad]
    if grad_outputs is None:
        grad_outputs = [sampling.randn(o.shape, dtype=D.float64, device=o.device) for o in outs]
    grad_outputs = tuple(g.detach().to(D.float64).requires_grad_(True)
                         for g in _as_tuple(grad_outputs))
    n = len(inputs)

    def first_order(*args):
        ins, gos = args[:n], args[n:]
        outs = [o for o in _differentiable_outputs(_as_tuple(fn(*ins))) if o.requires_grad]
        diff = [ins[i] for i in diff_idx]
        grads = grad(outs, diff, [g.to(o.dtype) for g, o in zip(gos, outs)],
                                      create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(first_order, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception)
