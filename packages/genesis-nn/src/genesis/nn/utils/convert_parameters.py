"""Flatten parameters into one vector and back."""

from __future__ import annotations

from collections.abc import Iterable

import genesis
from genesis import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def _check_same_device(param: Tensor, device) -> object:
    if device is None:
        return param.device
    if param.device != device:
        raise TypeError(
            "Found two parameters on different devices, this is currently not supported: "
            f"{device} and {param.device}"
        )
    return device


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """All parameters flattened and concatenated into one 1-D tensor (differentiable).

    Args:
        parameters: the tensors, e.g. ``model.parameters()``; all on one device.

    Example::

        >>> vec = genesis.nn.utils.parameters_to_vector(genesis.nn.Linear(3, 2).parameters())
        >>> vec.shape
        genesis.Size([8])
    """
    device = None
    flat = []
    for param in parameters:
        device = _check_same_device(param, device)
        flat.append(param.reshape(-1))
    return genesis.cat(flat)


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of the 1-D ``vec`` into ``parameters`` (in place, under
    ``no_grad``), the inverse of ``parameters_to_vector``.

    Args:
        vec: a 1-D tensor with as many elements as all parameters together.
        parameters: the tensors to overwrite.

    Example::

        >>> lin = genesis.nn.Linear(3, 2)
        >>> genesis.nn.utils.vector_to_parameters(genesis.zeros(8), lin.parameters())
    """
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected genesis.Tensor, but got: {type(vec).__name__}")
    if vec.ndim != 1:
        raise ValueError(f"vec must be 1-D, got shape {list(vec.shape)}")
    params = list(parameters)
    total = sum(p.numel() for p in params)
    if total != vec.numel():
        raise ValueError(
            f"vec has {vec.numel()} elements but the parameters have {total} in total"
        )
    device = None
    offset = 0
    with genesis.no_grad():
        for param in params:
            device = _check_same_device(param, device)
            n = param.numel()
            param.copy_(vec[offset:offset + n].reshape(param.shape))
            offset += n
