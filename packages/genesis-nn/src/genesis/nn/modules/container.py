"""Containers: modules that hold other modules or parameters."""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from genesis import Tensor
from genesis.nn.modules.module import Module
from genesis.nn.parameter import Parameter

__all__ = ["Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"]


def _normalize_index(idx: int, size: int, kind: str) -> int:
    idx = operator.index(idx)
    if not -size <= idx < size:
        raise IndexError(f"index {idx} is out of range for {kind} of length {size}")
    return idx + size if idx < 0 else idx


def _renumber(container: Module, modules: list) -> None:
    """Register ``modules`` under the names 0..n-1 in place of every current entry."""
    container._modules.clear()
    for i, module in enumerate(modules):
        container._modules[str(i)] = module


class Sequential(Module):
    """Runs its modules one after another, each on the previous one's output.

    Args:
        *args: modules, in order; or a single ``OrderedDict`` of name -> module.

    Example::

        >>> model = genesis.nn.Sequential(genesis.nn.Linear(4, 8), genesis.nn.ReLU(),
        ...                               genesis.nn.Linear(8, 2))
        >>> model(genesis.zeros(3, 4)).shape
        genesis.Size([3, 2])
    """

    def __init__(self, *args: Any) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for idx, module in enumerate(args):
                self.add_module(str(idx), module)

    def __getitem__(self, idx: int | slice) -> Module | Sequential:
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        idx = _normalize_index(idx, len(self), "Sequential")
        return list(self._modules.values())[idx]

    def __setitem__(self, idx: int, module: Module) -> None:
        idx = _normalize_index(idx, len(self), "Sequential")
        key = list(self._modules)[idx]
        setattr(self, key, module)

    def __delitem__(self, idx: int | slice) -> None:
        keys = list(self._modules)
        if isinstance(idx, slice):
            for key in keys[idx]:
                delattr(self, key)
        else:
            delattr(self, keys[_normalize_index(idx, len(self), "Sequential")])
        _renumber(self, list(self._modules.values()))  # names stay 0..n-1, as in torch

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __add__(self, other: Sequential) -> Sequential:
        if not isinstance(other, Sequential):
            raise ValueError(
                "add operator supports only objects of Sequential class, but "
                f"{type(other)} is given."
            )
        return Sequential(*self, *other)

    def append(self, module: Module) -> Sequential:
        """Add ``module`` at the end. Returns ``self``."""
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> Sequential:
        """Append every module of ``modules``. Returns ``self``."""
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module: Module) -> Sequential:
        """Insert ``module`` before position ``index``. Returns ``self``."""
        if not isinstance(module, Module):
            raise AssertionError(f"module should be of type: {Module}")
        n = len(self)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        if index < 0:
            index += n
        modules = list(self._modules.values())
        modules.insert(index, module)
        _renumber(self, modules)
        return self

    def forward(self, input: Any) -> Any:
        for module in self._modules.values():
            input = module(input)
        return input


class ModuleList(Module):
    """A list of modules, registered so their parameters are the list's parameters.

    Args:
        modules: an iterable of modules to start with.

    Example::

        >>> layers = genesis.nn.ModuleList([genesis.nn.Linear(4, 4) for _ in range(3)])
        >>> len(list(layers.parameters()))
        6
    """

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx: int | slice) -> Module | ModuleList:
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        idx = _normalize_index(idx, len(self), "ModuleList")
        return self._modules[str(idx)]

    def __setitem__(self, idx: int, module: Module) -> None:
        idx = _normalize_index(idx, len(self), "ModuleList")
        setattr(self, str(idx), module)

    def __delitem__(self, idx: int | slice) -> None:
        keys = list(self._modules)
        if isinstance(idx, slice):
            for key in keys[idx]:
                del self._modules[key]
        else:
            del self._modules[keys[_normalize_index(idx, len(self), "ModuleList")]]
        _renumber(self, list(self._modules.values()))

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __iadd__(self, modules: Iterable[Module]) -> ModuleList:
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        return ModuleList([*self, *other])

    def append(self, module: Module) -> ModuleList:
        """Add ``module`` at the end. Returns ``self``."""
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        """Append every module of ``modules``. Returns ``self``."""
        if isinstance(modules, (Module, Tensor)) or not isinstance(modules, Iterable):
            raise TypeError(
                "ModuleList.extend should be called with an iterable, but got "
                + type(modules).__name__
            )
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module: Module) -> None:
        """Insert ``module`` before position ``index``."""
        modules = list(self._modules.values())
        modules.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(modules):
            self.add_module(str(i), m)

    def pop(self, key: int | slice) -> Module:
        """Remove and return the module at ``key``."""
        v = self[key]
        del self[key]
        return v

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleList is a container; call its modules instead")


class ModuleDict(Module):
    """An ordered dict of modules, registered under their keys.

    Args:
        modules: a mapping or an iterable of ``(key, module)`` pairs.

    Example::

        >>> heads = genesis.nn.ModuleDict({"cls": genesis.nn.Linear(8, 3)})
        >>> heads["cls"].out_features
        3
    """

    def __init__(self, modules: Mapping[str, Module] | Iterable | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def clear(self) -> None:
        """Remove every module."""
        self._modules.clear()

    def pop(self, key: str) -> Module:
        """Remove ``key`` and return its module."""
        v = self[key]
        del self[key]
        return v

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def update(self, modules: Mapping[str, Module] | Iterable) -> None:
        """Add (or replace) modules from a mapping or ``(key, module)`` pairs."""
        items = modules.items() if isinstance(modules, Mapping) else modules
        for j, pair in enumerate(items):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ValueError(
                    f"ModuleDict update sequence element #{j} should be a (key, module) pair"
                )
            self[pair[0]] = pair[1]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleDict is a container; call its modules instead")


class ParameterList(Module):
    """A list of parameters, registered so the module's ``parameters()`` includes them.

    Tensors that are not parameters are wrapped in ``Parameter`` when added.

    Args:
        values: an iterable of tensors to start with.

    Example::

        >>> ps = genesis.nn.ParameterList([genesis.nn.Parameter(genesis.ones(2))])
        >>> _ = ps.append(genesis.zeros(3)); len(ps)
        2
    """

    def __init__(self, values: Iterable[Tensor] | None = None) -> None:
        super().__init__()
        self._size = 0
        if values is not None:
            self.extend(values)

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):
            return ParameterList([self[i] for i in range(len(self))[idx]])
        idx = _normalize_index(idx, len(self), "ParameterList")
        return getattr(self, str(idx))

    def __setitem__(self, idx: int, param: Any) -> None:
        idx = _normalize_index(idx, len(self), "ParameterList")
        if isinstance(param, Tensor) and not isinstance(param, Parameter):
            param = Parameter(param)
        setattr(self, str(idx), param)

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(len(self)))

    def __iadd__(self, parameters: Iterable[Any]) -> ParameterList:
        return self.extend(parameters)

    def append(self, value: Any) -> ParameterList:
        """Add ``value`` at the end (tensors become ``Parameter``s). Returns ``self``."""
        new_idx = len(self)
        self._size += 1
        self[new_idx] = value
        return self

    def extend(self, values: Iterable[Any]) -> ParameterList:
        """Append every value of ``values``. Returns ``self``."""
        if isinstance(values, Tensor) or not isinstance(values, Iterable):
            raise TypeError(
                "ParameterList.extend should be called with an iterable, but got "
                + type(values).__name__
            )
        for value in values:
            self.append(value)
        return self

    def extra_repr(self) -> str:
        lines = []
        for k, p in enumerate(self):
            if isinstance(p, Tensor):
                size_str = "x".join(str(size) for size in p.shape)
                device = "" if p.device.type == "cpu" else f" ({p.device})"
                lines.append(
                    f"  ({k}): Parameter containing: [{type(p).__name__} of size {size_str}"
                    f" ({p.dtype}){device}]"
                )
            else:
                lines.append(f"  ({k}): Object of type: {type(p).__name__}")
        return "\n".join(lines)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ParameterList is a container; use its parameters instead")


class ParameterDict(Module):
    """An ordered dict of parameters, registered under their keys.

    Tensors that are not parameters are wrapped in ``Parameter`` when added.

    Args:
        parameters: a mapping or an iterable of ``(key, tensor)`` pairs.

    Example::

        >>> pd = genesis.nn.ParameterDict({"scale": genesis.ones(4)})
        >>> type(pd["scale"]).__name__
        'Parameter'
    """

    def __init__(self, parameters: Mapping[str, Any] | Iterable | None = None) -> None:
        super().__init__()
        self._keys: dict[str, None] = {}
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        self._keys[key] = None
        if isinstance(value, Tensor) and not isinstance(value, Parameter):
            value = Parameter(value)
        setattr(self, key, value)

    def __delitem__(self, key: str) -> None:
        del self._keys[key]
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def keys(self):
        return self._keys.keys()

    def items(self):
        return ((k, self[k]) for k in self._keys)

    def values(self):
        return (self[k] for k in self._keys)

    def pop(self, key: str) -> Any:
        """Remove ``key`` and return its value."""
        v = self[key]
        del self[key]
        return v

    def update(self, parameters: Mapping[str, Any] | Iterable) -> None:
        """Add (or replace) entries from a mapping or ``(key, tensor)`` pairs."""
        items = parameters.items() if isinstance(parameters, Mapping) else parameters
        for j, pair in enumerate(items):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ValueError(
                    f"ParameterDict update sequence element #{j} should be a (key, value) pair"
                )
            self[pair[0]] = pair[1]

    def extra_repr(self) -> str:
        lines = []
        for k, p in self.items():
            size_str = "x".join(str(size) for size in p.shape)
            lines.append(f"  ({k}): Parameter containing: [{type(p).__name__} of size "
                         f"{size_str} ({p.dtype})]")
        return "\n".join(lines)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ParameterDict is a container; use its parameters instead")
