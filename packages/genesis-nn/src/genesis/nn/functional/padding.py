"""``pad``: grow (or crop, with negative amounts) the trailing dims of a tensor.

Constant padding concatenates filled blocks; reflect/replicate/circular gather from index
lists. Both are differentiable composites.
"""

from __future__ import annotations

from collections.abc import Sequence

import genesis
from genesis import Tensor

__all__ = ["pad"]


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant",
        value: float | None = None) -> Tensor:
    """Pad the last ``len(pad) // 2`` dims of ``input``.

    ``pad`` lists (left, right) amounts starting from the last dim:
    ``(last_left, last_right, second_last_left, second_last_right, ...)``. With
    ``mode="constant"`` negative amounts crop.

    Args:
        input: any tensor.
        pad: amounts; even length, at most ``2 * input.ndim``.
        mode: ``"constant"``, ``"reflect"``, ``"replicate"`` or ``"circular"``.
        value: the fill value of constant padding (default 0).

    Returns:
        A new tensor, larger (or, with negative padding, smaller) in the padded dims.

    Example::

        >>> F.pad(genesis.ones(1, 2), (1, 2))
        tensor([[0., 1., 1., 0., 0.]])
    """
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2:
        raise ValueError(f"Padding length must be divisible by 2, got {len(pad)}")
    if len(pad) // 2 > input.ndim:
        raise ValueError(
            f"Padding length should be at most twice the input's number of dimensions "
            f"({input.ndim}), got {len(pad)}"
        )
    if mode == "constant":
        return _pad_constant(input, pad, 0.0 if value is None else value)
    if value is not None and value != 0:
        raise ValueError(f'Padding mode "{mode}" doesn\'t take in value argument')
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    out = input
    for i in range(len(pad) // 2):
        dim = input.ndim - 1 - i
        out = _pad_by_index(out, dim, pad[2 * i], pad[2 * i + 1], mode)
    return out


def _pad_constant(input: Tensor, pad: tuple[int, ...], value: float) -> Tensor:
    out = input
    for i in range(len(pad) // 2):
        dim = input.ndim - 1 - i
        left, right = pad[2 * i], pad[2 * i + 1]
        size = out.shape[dim]
        if left < 0 or right < 0:  # crop first
            start = -left if left < 0 else 0
            stop = size + right if right < 0 else size
            if stop < start:
                raise RuntimeError(
                    f"pad: cropping {pad[2 * i:2 * i + 2]} leaves a negative size of dim {dim} "
                    f"(size {size})"
                )
            out = out.narrow(dim, start, stop - start)
            left, right = max(left, 0), max(right, 0)
        parts = []
        for amount in (left, right):
            shape = list(out.shape)
            shape[dim] = amount
            parts.append(genesis.full(tuple(shape), value, dtype=out.dtype, device=out.device)
                         if amount else None)
        pieces = [p for p in (parts[0], out, parts[1]) if p is not None]
        if len(pieces) > 1:
            out = genesis.cat(pieces, dim)
    return out


def _pad_by_index(input: Tensor, dim: int, left: int, right: int, mode: str) -> Tensor:
    n = input.shape[dim]
    if left < 0 or right < 0:
        raise ValueError(f"pad: negative padding is only supported in constant mode, got "
                         f"({left}, {right})")
    if mode == "reflect":
        if left >= n or right >= n:
            raise RuntimeError(
                f"Argument #4: Padding size should be less than the corresponding input "
                f"dimension, but got: padding ({left}, {right}) at dimension {dim} of input "
                f"{list(input.shape)}"
            )
        idx = list(range(left, 0, -1)) + list(range(n)) + list(range(n - 2, n - 2 - right, -1))
    elif mode == "replicate":
        idx = [0] * left + list(range(n)) + [n - 1] * right
    else:  # circular
        if left > n or right > n:
            raise RuntimeError("Padding value causes wrapping around more than once.")
        idx = list(range(n - left, n)) + list(range(n)) + list(range(right))
    index = genesis.tensor(idx, dtype=genesis.int64, device=input.device)
    return input.index_select(dim, index)
