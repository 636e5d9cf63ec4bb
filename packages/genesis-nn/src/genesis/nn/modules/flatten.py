"""``Flatten`` and ``Unflatten``: reshape a range of dimensions."""

from __future__ import annotations

from collections.abc import Sequence

from genesis import Tensor
from genesis.nn.modules.module import Module

__all__ = ["Flatten", "Unflatten"]


class Flatten(Module):
    """Merge dims ``start_dim..end_dim`` into one.

    Args:
        start_dim: first dim to flatten (default 1: keep the batch dim).
        end_dim: last dim to flatten (default -1).

    Shape:
        input: ``(*, S_start, ..., S_end, *)``; output: ``(*, prod(S_start..S_end), *)``.

    Example::

        >>> genesis.nn.Flatten()(genesis.zeros(32, 1, 5, 5)).shape
        genesis.Size([32, 25])
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input: Tensor) -> Tensor:
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split dim ``dim`` into ``unflattened_size``.

    Args:
        dim: the dim to split.
        unflattened_size: the new sizes (their product must equal the dim's size; one may be
            -1).

    Shape:
        input: ``(*, S_dim, *)``; output: ``(*, *unflattened_size, *)``.

    Example::

        >>> genesis.nn.Unflatten(1, (2, 5, 5))(genesis.zeros(2, 50)).shape
        genesis.Size([2, 2, 5, 5])
    """

    def __init__(self, dim: int, unflattened_size: Sequence[int]) -> None:
        super().__init__()
        if not isinstance(unflattened_size, (tuple, list)):
            raise TypeError("unflattened_size must be a tuple or list of ints, got "
                            f"{type(unflattened_size).__name__}")
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size)

    def forward(self, input: Tensor) -> Tensor:
        dim = self.dim if self.dim >= 0 else self.dim + input.ndim
        shape = tuple(input.shape[:dim]) + self.unflattened_size + tuple(input.shape[dim + 1:])
        return input.reshape(shape)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
