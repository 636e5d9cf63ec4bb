"""Gradient clipping: ``clip_grad_norm_`` and ``clip_grad_value_``.

Everything stays on the device: the total norm is a 0-d tensor and the clip coefficient is
applied as a tensor, so no step reads a value back to the host (except
``error_if_nonfinite``, which has to look). With ``foreach`` (the default where possible)
the 2-norm or max-norm of all gradients is one multi-tensor call of the backend
(``multi_tensor_norm``), and the scaling another (``multi_tensor_scale_``), instead of a
few kernels per gradient.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import repeat
from operator import attrgetter, is_

import genesis
from genesis import Tensor
from genesis.nn.fused_declarations import MULTI_TENSOR_NORM, MULTI_TENSOR_SCALE

__all__ = ["clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "get_total_norm",
           "clip_grads_with_norm_"]

_TensorOrTensors = Tensor | Iterable[Tensor]


def _as_list(tensors: _TensorOrTensors) -> list[Tensor]:
    if isinstance(tensors, Tensor):
        return [tensors]
    return list(tensors)


def _one_group(tensors: list[Tensor]) -> bool:
    """Whether ``tensors`` can go to one multi-tensor call: one device, one floating dtype."""
    first = tensors[0]
    return (first.dtype.is_floating_point
            and all(map(is_, map(_device_of, tensors), repeat(first.device)))
            and all(map(is_, map(_dtype_of, tensors), repeat(first.dtype))))


_device_of, _dtype_of = attrgetter("device"), attrgetter("dtype")


def _vector_norm(t: Tensor, norm_type: float) -> Tensor:
    """The ``norm_type``-norm of all of ``t``'s elements, as a 0-d tensor."""
    return genesis.norm(t, norm_type)


def get_total_norm(tensors: _TensorOrTensors, norm_type: float = 2.0,
                   error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """The norm of the norms of ``tensors`` (as if they were concatenated into one vector).

    Args:
        tensors: tensors (typically gradients); ``None`` entries are skipped.
        norm_type: the p of the norm; ``float("inf")`` for the max-abs norm.
        error_if_nonfinite: raise if the total norm is NaN or infinite.
        foreach: ``None``/``True``: one multi-tensor norm where the tensors share a device
            and dtype and ``norm_type`` is 2 or inf; ``False``: a norm per tensor.

    Returns:
        a 0-d tensor on the first tensor's device.
    """
    tensors = [t for t in _as_list(tensors) if t is not None]
    norm_type = float(norm_type)
    if not tensors:
        return genesis.tensor(0.0)
    device = tensors[0].device
    with genesis.no_grad():
        if foreach is not False and norm_type in (2.0, math.inf) and _one_group(tensors):
            total = Tensor._wrap(MULTI_TENSOR_NORM.forward(
                tensors[0]._backend, [t._data for t in tensors], norm_type),
                device).to(tensors[0].dtype)
        else:
            norms = [_vector_norm(t.detach(), norm_type).to(device) for t in tensors]
            stacked = genesis.stack(norms)  # (num_tensors,)
            total = _vector_norm(stacked, norm_type)
    if error_if_nonfinite and not bool(total.isfinite()):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is "
            "non-finite, so it cannot be clipped. To disable this error and scale the "
            "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`"
        )
    return total


def clip_grads_with_norm_(parameters: _TensorOrTensors, max_norm: float, total_norm: Tensor,
                          foreach: bool | None = None) -> None:
    """Scale the gradients of ``parameters`` in place by ``min(1, max_norm / (total_norm +
    1e-6))``, given a precomputed ``total_norm``."""
    _scale_grads([g for p in _as_list(parameters) if (g := p.grad) is not None], max_norm,
                 total_norm, foreach)


def _scale_grads(grads: list[Tensor], max_norm: float, total_norm: Tensor,
                 foreach: bool | None) -> None:
    """``clip_grads_with_norm_`` on the gradients themselves."""
    if not grads:
        return
    with genesis.no_grad():
        coef = (max_norm / (total_norm + 1e-6)).clamp(max=1.0)
        if foreach is not False and _one_group(grads):
            MULTI_TENSOR_SCALE.forward(grads[0]._backend, [g._data for g in grads],
                                       coef.to(grads[0].device)._data)
            for g in grads:
                g._version_box[0] += 1
            return
        for g in grads:
            g.mul_(coef.to(g.device, g.dtype))


def clip_grad_norm_(parameters: _TensorOrTensors, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """Scale all gradients together so their total norm is at most ``max_norm``.

    The total norm is that of all gradients concatenated into one vector; gradients are
    multiplied in place by ``min(1, max_norm / (total_norm + 1e-6))``. A parameter whose
    gradient is one rank's shard (``genesis.distributed.fsdp``) counts its whole gradient:
    its ``grad_norm_reducer`` combines the ranks' norms (a collective: every rank calls this).

    Args:
        parameters: a tensor or tensors whose ``.grad`` is clipped.
        max_norm: the largest allowed total norm.
        norm_type: the p of the norm; ``float("inf")`` for the max-abs norm.
        error_if_nonfinite: raise if the total norm is NaN or infinite (reads it to the
            host).
        foreach: ``None``/``True``: multi-tensor norm and scaling (see
            ``get_total_norm``); ``False``: per gradient.

    Returns:
        the total norm before clipping, a 0-d tensor.

    Example::

        >>> model = genesis.nn.Linear(4, 2)
        >>> model(genesis.randn(8, 4)).sum().backward()
        >>> norm = genesis.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    """
    params = [p for p in _as_list(parameters) if p.grad is not None]
    grads = [p.grad for p in params]
    if any(getattr(p, "grad_norm_reducer", None) is not None for p in params):
        total = _norm_over_shards(params, norm_type, error_if_nonfinite, foreach)
    else:
        total = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    _scale_grads(grads, max_norm, total, foreach)
    return total


def _norm_over_shards(params: list[Tensor], norm_type: float, error_if_nonfinite: bool,
                      foreach: bool | None) -> Tensor:
    """The total norm when some gradients are one rank's shard of a larger gradient.

    Such a parameter (FSDP's ``ShardedParameter``) has a ``grad_norm_reducer``: a function
    ``(local_norm, norm_type) -> norm over every rank``. This module cannot know how ranks talk
    (genesis.nn does not import genesis.distributed), so the parameter brings it. Gradients
    are grouped by reducer (in parameter order, the same on every rank); each group's local
    norm is reduced once, then the groups' norms and the plain gradients' norm are combined.
    """
    groups: dict = {}  # reducer (None: plain gradients) -> gradients
    for p in params:
        groups.setdefault(getattr(p, "grad_norm_reducer", None), []).append(p.grad)
    norms = []
    for reducer, grads in groups.items():
        local = get_total_norm(grads, norm_type, False, foreach)
        norms.append(local if reducer is None else reducer(local, float(norm_type)))
    first = params[0].grad
    return get_total_norm([n.to(first.device, first.dtype) for n in norms], norm_type,
                          error_if_nonfinite, foreach)


def clip_grad_norm(parameters: _TensorOrTensors, max_norm: float, norm_type: float = 2.0,
                   error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """Deprecated alias of ``clip_grad_norm_``."""
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def clip_grad_value_(parameters: _TensorOrTensors, clip_value: float,
                     foreach: bool | None = None) -> None:
    """Clamp every gradient element to ``[-clip_value, clip_value]`` in place.

    Args:
        parameters: a tensor or tensors whose ``.grad`` is clipped.
        clip_value: the largest allowed magnitude.

    Example::

        >>> model = genesis.nn.Linear(4, 2)
        >>> model(genesis.randn(8, 4)).sum().backward()
        >>> genesis.nn.utils.clip_grad_value_(model.parameters(), 0.1)
    """
    clip_value = float(clip_value)
    if math.isnan(clip_value):
        raise ValueError("clip_value must not be NaN")
    with genesis.no_grad():
        for p in _as_list(parameters):
            if p.grad is not None:
                p.grad.clamp_(min=-clip_value, max=clip_value)
