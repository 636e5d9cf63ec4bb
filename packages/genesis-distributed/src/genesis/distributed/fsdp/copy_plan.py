"""The copies of an FSDP parameter group's traffic, planned once when the group is made.

A group's buffers all have one layout (``FSDPParamGroup``'s docstring): parameter ``i``'s
padded chunk of ``n_i`` elements starts at the aligned offset ``o_i`` of a flat ``(S,)``
shard, and a ``(world, S)`` buffer holds every rank's shard, rank after rank. Every step
copies between that layout and the parameters' whole values, in both directions:

- *copy-out* after the all-gather: parameter ``i``'s ``(world, n_i)`` columns of the
  gathered buffer go, rank after rank, to ``world * o_i`` of an unsharded buffer of the same
  size, where its first ``numel`` elements are the whole value (a contiguous view);
- *packing* before the reduce-scatter: the whole gradient goes into those columns of a
  ``(world, S)`` buffer (zeros past its last row and for a parameter without gradient);
- *take*: parameter ``i``'s sharded gradient is a ``local_shape`` view of the reduced
  ``(S,)`` buffer at ``o_i``.

Shapes never change after ``fully_shard``, so the plan keeps every such geometry as plain
numbers, and a step only describes its fresh buffers with them: one ``as_strided`` per piece
(no indexing, reshape or dispatch per parameter), and each direction's copies are one call
of the fused op ``multi_tensor_copy_`` (a loop of the backend's ``copy_`` where the backend
has no kernel of that name: torch FSDP2's ``split_with_sizes_copy`` and ``chunk_cat``). No
view outlives the buffer it was made from: the buffers are new each step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from genesis.fused_op import fused
from genesis.ops.views import make_view
from genesis.tensor import geometry, is_contiguous_geometry


def multi_tensor_copy_(b, dsts: Sequence, srcs: Sequence) -> None:
    """The composite of the ``multi_tensor_copy_`` kernel: ``dst[...] = src`` for each pair
    of arrays of one shape (any strides, a zero stride in ``src`` broadcasts, dtypes may
    differ: cast). The pairs do not overlap one another (a kernel copies them all at once:
    genesis-cuda's, ``genesis_cuda.kernels.multi_tensor_copy``). Returns None."""
    for dst, src in zip(dsts, srcs):
        b.copy_(dst, src)


MULTI_TENSOR_COPY = fused("multi_tensor_copy_", multi_tensor_copy_)


def _copy_out_runs(sizes: Sequence[int], offsets: Sequence[int], world: int,
                   numel: int) -> list:
    """The copy-out as few strided copies as the layout allows: ``[(source, destination)]``
    geometries, one per run of chunks of one size ``n`` at evenly spaced offsets (``k``
    chunks ``step`` apart: ``(k, world, n)`` in the gathered buffer, strides ``(step, S,
    1)``; the same rank after rank in the unsharded one, strides ``(world * step, n, 1)``).
    ``FSDPParamGroup`` lays equal sizes side by side, so a block's same-shaped projections
    take one copy."""
    order = sorted(range(len(sizes)), key=offsets.__getitem__)
    runs, i = [], 0
    while i < len(order):
        first = order[i]
        n, off, k, step = sizes[first], offsets[first], 1, 0
        if i + 1 < len(order) and sizes[order[i + 1]] == n:
            step = offsets[order[i + 1]] - off
            while (i + k < len(order) and sizes[order[i + k]] == n
                   and offsets[order[i + k]] == off + k * step):
                k += 1
        runs.append((((k, world, n), (step, numel, 1), off),
                     ((k, world, n), (world * step, n, 1), world * off)))
        i += k
    return runs


def _contiguous_strides(shape: tuple) -> tuple:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


class CopyPlan:
    """Where each parameter of a group sits in the group's buffers, and the copies between
    them (see the module docstring).

    Args:
        layouts: each parameter's ``ShardLayout``, in the group's order.
        offsets: each parameter's chunk offset ``o_i`` in the flat shard.
        world: the number of ranks.
        numel: ``S``, the flat shard's length (aligned offsets included).

    Example:
        >>> plan = CopyPlan(layouts, offsets, world=2, numel=S)
        >>> wholes = plan.copy_out(gathered, genesis.empty(2 * S, dtype=gathered.dtype))
    """

    def __init__(self, layouts: Sequence, offsets: Sequence[int], world: int,
                 numel: int) -> None:
        self.world, self.numel = world, numel
        self.columns = []  # (shape, strides, offset): (world, n_i) in a (world, S) buffer
        self.wholes = []  # the whole value, in the unsharded buffer
        self.shards = []  # the padded chunk, in a flat (S,) buffer
        self.grad_numel = []  # elements of the whole value (and gradient)
        for lay, off in zip(layouts, offsets):
            n = lay.local_numel
            self.columns.append(((world, n), (numel, 1), off))
            self.wholes.append((lay.global_shape, _contiguous_strides(lay.global_shape),
                                world * off))
            self.shards.append((lay.local_shape, _contiguous_strides(lay.local_shape), off))
            self.grad_numel.append(math.prod(lay.global_shape))
        self.runs = _copy_out_runs([lay.local_numel for lay in layouts], offsets, world, numel)

    def copy_out(self, gathered, unsharded) -> list:
        """Copy every parameter's columns of ``gathered`` (world, S) into ``unsharded``
        (world * S,), rank after rank; the parameters' whole values, views of ``unsharded``.

        Args:
            gathered: the all-gathered ``(world, S)`` buffer.
            unsharded: a new contiguous buffer of ``world * S`` elements, the same dtype.

        Returns:
            one tensor a parameter, of its global shape, viewing ``unsharded``.
        """
        b = gathered._backend
        src, dst = gathered._data, unsharded._data
        src_at, dst_at = geometry(gathered)[1], geometry(unsharded)[1]
        srcs = [b.as_strided(src, shape, strides, src_at + off)
                for (shape, strides, off), _ in self.runs]
        dsts = [b.as_strided(dst, shape, strides, dst_at + off)
                for _, (shape, strides, off) in self.runs]
        MULTI_TENSOR_COPY.forward(b, dsts, srcs)
        return [make_view(unsharded, shape, strides, dst_at + off)
                for shape, strides, off in self.wholes]

    def pack(self, grads: Sequence, packed, zero) -> None:
        """Write each whole gradient into its columns of ``packed`` (world, S), casting to
        ``packed``'s dtype; zeros where a gradient has no rows (padding) or is None. The
        alignment gaps between chunks are left as they are (never read back).

        Args:
            grads: one tensor (the whole gradient, of the global shape) or None a parameter.
            packed: the ``(world, S)`` buffer to fill.
            zero: a one-element zero tensor on ``packed``'s device (broadcast for the zeros).
        """
        b, out = packed._backend, packed._data
        out_at = geometry(packed)[1]
        zero_data, zero_at = zero._data, geometry(zero)[1]
        dsts, srcs = [], []
        for (shape, strides, off), numel, grad in zip(self.columns, self.grad_numel, grads):
            world, n = shape
            if n == 0:
                continue
            full = rest = 0
            if grad is not None and numel:
                full, rest = divmod(numel, n)  # ranks whose rows are all there; then rows
                g_strides, g_at = geometry(grad)
                if not is_contiguous_geometry(grad.shape, g_strides):
                    grad = grad.contiguous()
                    g_at = geometry(grad)[1]
                g = grad._data
            if full:
                dsts.append(b.as_strided(out, (full, n), strides, out_at + off))
                srcs.append(b.as_strided(g, (full, n), (n, 1), g_at))
            if rest:  # the first rank with padding rows: its rows, then zeros
                at = out_at + off + full * self.numel
                dsts.append(b.as_strided(out, (rest,), (1,), at))
                srcs.append(b.as_strided(g, (rest,), (1,), g_at + full * n))
                dsts.append(b.as_strided(out, (n - rest,), (1,), at + rest))
                srcs.append(b.as_strided(zero_data, (n - rest,), (0,), zero_at))
                full += 1
            if full < world:  # ranks holding padding only (or no gradient at all)
                dsts.append(b.as_strided(out, (world - full, n), strides,
                                         out_at + off + full * self.numel))
                srcs.append(b.as_strided(zero_data, (world - full, n), (0, 0), zero_at))
        MULTI_TENSOR_COPY.forward(b, dsts, srcs)

    def shard_views(self, flat, which: Sequence[int]) -> list:
        """Views of the flat ``(S,)`` buffer ``flat``: parameter ``i``'s padded chunk for
        each ``i`` in ``which``."""
        at = geometry(flat)[1]
        return [make_view(flat, *self.shards[i][:2], at + self.shards[i][2]) for i in which]
