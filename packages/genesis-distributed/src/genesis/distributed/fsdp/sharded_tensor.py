"""Sharded tensors: one rank's rows of a tensor split on dim 0 across a process group.

A tensor of ``n`` rows is split into ``world`` chunks of ``c = ceil(n / world)`` rows; rank
``r`` owns rows ``[r * c, min((r + 1) * c, n))``. Every rank stores a full chunk of ``c``
rows (the last ranks' missing rows are zero padding), so that one all-gather of equal pieces
rebuilds the whole tensor and one reduce-scatter splits a gradient. Padding rows stay zero
through training: their gradient is zero, and AdamW's update of a zero weight with a zero
gradient and zero moments is zero.

``ShardedTensor`` is such a chunk with what is needed to rebuild the whole (``full_tensor``)
or to see only the owned rows (``to_local``); ``ShardedParameter`` is the ``nn.Parameter``
that ``fully_shard`` leaves in a module, the one optimizers step on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import genesis
from genesis import Tensor
from genesis.distributed import collectives
from genesis.distributed.reduce_op import ReduceOp
from genesis.nn import Parameter


@dataclass(frozen=True)
class ShardLayout:
    """How a tensor of ``global_shape`` splits on dim 0 over ``world`` ranks.

    Attributes:
        global_shape: the whole tensor's shape (a 0-d tensor is treated as one row).
        world: the number of ranks.
    """

    global_shape: tuple
    world: int

    @property
    def rows(self) -> int:
        """Rows of the whole tensor (1 for a 0-d tensor)."""
        return self.global_shape[0] if self.global_shape else 1

    @property
    def row_shape(self) -> tuple:
        """The shape of one row."""
        return tuple(self.global_shape[1:])

    @property
    def chunk_rows(self) -> int:
        """Rows every rank stores (owned rows plus padding)."""
        return max(math.ceil(self.rows / self.world), 1)

    @property
    def local_shape(self) -> tuple:
        """The shape of one rank's stored (padded) chunk."""
        return (self.chunk_rows, *self.row_shape)

    @property
    def local_numel(self) -> int:
        """Elements of one rank's stored chunk."""
        return math.prod(self.local_shape)

    def owned_rows(self, rank: int) -> tuple[int, int]:
        """``(first, stop)``: the global rows rank ``rank`` owns (empty past the end)."""
        first = min(rank * self.chunk_rows, self.rows)
        return first, min(first + self.chunk_rows, self.rows)

    def chunk_of(self, full: Tensor, rank: int) -> Tensor:
        """Rank ``rank``'s padded chunk of the whole tensor ``full`` (a new tensor)."""
        first, stop = self.owned_rows(rank)
        rows = full.reshape(self.rows, *self.row_shape)
        chunk = genesis.zeros(self.local_shape, dtype=full.dtype, device=full.device)
        if stop > first:
            chunk[:stop - first] = rows[first:stop]
        return chunk


class ShardedTensor(Tensor):
    """One rank's padded chunk of a tensor sharded on dim 0 (what a sharded model's
    ``state_dict()`` holds). Its own shape is the chunk's; ``global_shape`` is the whole's.

    Example:
        >>> sd = model.state_dict()                  # after fully_shard(model)
        >>> w = sd["0.weight"]
        >>> w.global_shape, w.to_local().shape       # whole shape, this rank's rows
        >>> w.full_tensor()                          # the whole value (a collective)
    """

    __slots__ = ()

    def _init_shard(self, layout: ShardLayout, rank: int, group) -> None:
        self.__dict__["layout"] = layout
        self.__dict__["shard_rank"] = rank
        self.__dict__["shard_group"] = group

    @classmethod
    def wrap_chunk(cls, chunk: Tensor, layout: ShardLayout, rank: int, group,
                   requires_grad: bool = False) -> ShardedTensor:
        """A ``cls`` sharing ``chunk``'s memory, described by ``layout`` (internal)."""
        if tuple(chunk.shape) != layout.local_shape:
            raise ValueError(f"a shard of {layout.global_shape} over {layout.world} ranks has "
                             f"shape {layout.local_shape}, got {tuple(chunk.shape)}")
        t = Tensor._make_subclass(cls, chunk, requires_grad)
        t._init_shard(layout, rank, group)
        return t

    @property
    def global_shape(self) -> genesis.Size:
        """The shape of the whole (unsharded) tensor."""
        return genesis.Size(self.layout.global_shape)

    def to_local(self) -> Tensor:
        """This rank's owned rows (a view, without the padding rows).

        Returns:
            a ``(owned_rows, *global_shape[1:])`` tensor sharing this shard's memory.
        """
        first, stop = self.layout.owned_rows(self.shard_rank)
        return Tensor.detach(self)[:stop - first]

    def full_tensor(self) -> Tensor:
        """The whole tensor, gathered from every rank (every rank of the group must call it).

        Returns:
            a new tensor of ``global_shape`` (not sharded).
        """
        layout = self.layout
        gathered = genesis.empty((layout.world * layout.chunk_rows, *layout.row_shape),
                                 dtype=self.dtype, device=self.device)
        with genesis.no_grad():
            collectives.all_gather_into_tensor(gathered, Tensor.detach(self),
                                               self.shard_group)
        return gathered[:layout.rows].reshape(layout.global_shape)

    def detach(self) -> ShardedTensor:
        """A ``ShardedTensor`` sharing this shard's memory, cut off from the graph (so a
        sharded model's ``state_dict()`` holds sharded values)."""
        return ShardedTensor.wrap_chunk(Tensor.detach(self), self.layout, self.shard_rank,
                                        self.shard_group)

    def __repr__(self) -> str:
        return (f"ShardedTensor(global_shape={list(self.layout.global_shape)}, rank="
                f"{self.shard_rank} of {self.layout.world}, local=\n{Tensor.__repr__(self)})")


class ShardedParameter(Parameter, ShardedTensor):
    """The parameter ``fully_shard`` leaves in a module: this rank's padded chunk, stepped
    on by optimizers; its ``.grad`` is this rank's chunk of the averaged gradient.

    ``genesis.nn.utils.clip_grad_norm_`` asks a parameter's ``grad_norm_reducer`` to turn
    the norm of this rank's gradient chunks into the norm over every rank (genesis.nn does
    not import genesis.distributed: the parameter brings the collective with it).
    """

    __slots__ = ()

    def __new__(cls, *args, **kwargs):
        raise TypeError("ShardedParameter is made by fully_shard, not directly")

    def detach(self) -> ShardedTensor:
        return ShardedTensor.detach(self)

    @property
    def grad_norm_reducer(self):
        """A function ``(local_norm, norm_type) -> global_norm`` over the shard group."""
        return _norm_reducer(self.shard_group)

    def __repr__(self) -> str:
        return "Sharded" + Parameter.__repr__(self)


_REDUCERS: dict = {}


def _norm_reducer(group):
    """One reducer per group, so clip_grad_norm_ reduces each group's norm once."""
    key = id(group)
    reducer = _REDUCERS.get(key)
    if reducer is None or reducer.group is not group:
        reducer = _REDUCERS[key] = GradNormReducer(group)
    return reducer


class GradNormReducer:
    """Combines per-rank norms of gradient shards into the norm over the whole gradient:
    a sum of ``norm ** p`` across ranks for a p-norm, a max for the inf-norm."""

    def __init__(self, group) -> None:
        self.group = group

    def __call__(self, local_norm: Tensor, norm_type: float) -> Tensor:
        with genesis.no_grad():
            if math.isinf(norm_type):
                total = local_norm.clone()
                collectives.all_reduce(total, ReduceOp.MAX, self.group)
                return total
            total = local_norm.float() ** norm_type
            collectives.all_reduce(total, ReduceOp.SUM, self.group)
            return (total ** (1.0 / norm_type)).to(local_norm.dtype)
