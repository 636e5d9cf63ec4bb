"""How tensors print: ``tensor([...], dtype=..., device=..., grad_fn=<...>)`` like torch."""

from __future__ import annotations

import numpy as np

from genesis import dtypes as D

_IMPLIED = (D.float32, D.int64, D.bool_)  # dtypes torch does not spell out


def tensor_repr(t) -> str:
    arr = t._host_numpy()
    prefix = "tensor("
    if arr.size == 0:
        body = "[]" if arr.ndim == 1 else f"size={tuple(t.shape)}"
    else:
        with np.printoptions(precision=4, threshold=1000, edgeitems=3, linewidth=80):
            body = np.array2string(arr, separator=", ", prefix=prefix)
    parts = [body]
    if t.device.type != "cpu":
        parts.append(f"device='{t.device}'")
    if t.dtype not in _IMPLIED or (arr.size == 0 and t.dtype is not D.get_default_dtype()):
        parts.append(f"dtype={t.dtype}")
    if t.grad_fn is not None:
        parts.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        parts.append("requires_grad=True")
    return prefix + ", ".join(parts) + ")"
