"""``Parameter``: a tensor that a ``Module`` registers and optimizes."""

from __future__ import annotations

import genesis
from genesis import Tensor


class Parameter(Tensor):
    """A leaf tensor that is a module parameter: assigning it to a ``Module`` attribute
    registers it, so it shows up in ``parameters()`` and ``state_dict()``.

    The parameter shares memory with ``data`` (as ``data.detach()`` does) and is a leaf of
    the autograd graph whatever ``data`` was.

    Args:
        data: the initial values; an empty float tensor when ``None``.
        requires_grad: whether gradients are computed for it (default ``True``).

    Example::

        >>> w = genesis.nn.Parameter(genesis.zeros(3, 4))
        >>> w.requires_grad, w.is_leaf
        (True, True)
    """

    __slots__ = ()

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True) -> Parameter:
        if data is None:
            data = genesis.empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(
                f"Parameter(data) expects a genesis.Tensor, got {type(data).__name__}"
            )
        return Tensor._make_subclass(cls, data.detach(), requires_grad)

    def __deepcopy__(self, memo: dict) -> Parameter:
        if id(self) in memo:
            return memo[id(self)]
        with genesis.no_grad():
            result = Parameter(self.detach().clone(), self.requires_grad)
        memo[id(self)] = result
        return result

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()



class Buffer:
    """Marks a tensor to be registered as a buffer when assigned to a ``Module`` attribute
    (as ``torch.nn.Buffer``).

    Args:
        data: the buffer's tensor.
        persistent: whether it is part of the module's ``state_dict`` (default ``True``).

    Example::

        >>> m = genesis.nn.Module()
        >>> m.steps = genesis.nn.Buffer(genesis.zeros(()))
        >>> [name for name, _ in m.named_buffers()]
        ['steps']
    """

    __slots__ = ("data", "persistent")

    def __init__(self, data: Tensor, *, persistent: bool = True) -> None:
        if not isinstance(data, Tensor):
            raise TypeError(f"Buffer(data) expects a genesis.Tensor, got {type(data).__name__}")
        self.data = data
        self.persistent = persistent
