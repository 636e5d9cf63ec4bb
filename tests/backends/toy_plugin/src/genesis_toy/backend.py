"""``ToyBackend``: the contract's required core, delegated to genesis's CPU backend.

Its arrays are ``ToyArray`` objects, which expose ``shape`` and nothing else genesis may
touch: if genesis read anything else off an array (or handed a CPU array to this backend),
the contract tests would fail. Kernels unwrap their array arguments, run the CPU kernel, and
wrap the arrays it returns.
"""

from __future__ import annotations

import abc
from collections import Counter

import torch

from genesis.backends import Backend
from genesis.backends.cpu import CPUBackend


class ToyArray:
    """A strided array of the toy device: a CPU torch tensor in a box."""

    __slots__ = ("t",)

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.t.shape)

    def __repr__(self) -> str:
        return f"ToyArray({self.t!r})"


def _unwrap(x):
    if isinstance(x, ToyArray):
        return x.t
    if isinstance(x, torch.Tensor):
        raise TypeError("the toy backend was handed a CPU array: genesis mixed up devices")
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(v) for v in x)
    return x


def _wrap(x):
    if isinstance(x, torch.Tensor):
        return ToyArray(x)
    if isinstance(x, tuple):
        return tuple(_wrap(v) for v in x)
    return x


def _delegate(name: str):
    def kernel(self, *args, **kwargs):
        self.calls[name] += 1
        args = _unwrap(args)
        kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
        # (looked up on the instance: some CPU kernels are torch functions, not methods)
        return _wrap(getattr(self._cpu, name)(*args, **kwargs))

    kernel.__name__ = kernel.__qualname__ = name

    return kernel


class ToyBackend(Backend):
    """Device type ``'toy'`` with a single device, ``toy:0``."""

    name = "toy"

    def __init__(self) -> None:
        self._cpu = CPUBackend()
        self.calls: Counter[str] = Counter()  # kernel name -> times called, for the tests

    def device_index_of(self, a: ToyArray) -> int:
        return 0

    def memory_stats(self, index: int | None) -> dict:
        return {"allocated_bytes.all.current": 0}


# Every method of the required core (the abstract ones) not written above goes to the CPU
# backend. The optional kernels (prod, cat, ...) are left to the contract's composite defaults,
# and no fused kernel is registered (softmax, layer_norm, attention ... run their rows'
# composites), so the op table on 'toy' checks each of them on the toy's core.
for _name in sorted(Backend.__abstractmethods__ - set(vars(ToyBackend))):
    setattr(ToyBackend, _name, _delegate(_name))
abc.update_abstractmethods(ToyBackend)
