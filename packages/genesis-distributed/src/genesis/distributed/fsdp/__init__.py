"""``genesis.distributed.fsdp``: fully sharded data parallel (torch FSDP2's API).

Parameters, gradients and optimizer state are split on dim 0 across the ranks, so each GPU
holds about ``1/world`` of them; a block's parameters are all-gathered just in time for its
forward and backward and freed after. See ``fully_shard``.

    >>> from genesis.distributed.fsdp import fully_shard, MixedPrecisionPolicy
    >>> for layer in model.model.layers:
    ...     fully_shard(layer)
    >>> fully_shard(model)
"""

from genesis.distributed.fsdp.fully_shard import FSDPModule, MixedPrecisionPolicy, fully_shard
from genesis.distributed.fsdp.shard_files import IncompleteCheckpointError
from genesis.distributed.fsdp.sharded_checkpoint import (
    consolidate_sharded_checkpoint,
    load_sharded_checkpoint,
    save_sharded_checkpoint,
    verify_sharded_checkpoint,
)
from genesis.distributed.fsdp.sharded_tensor import ShardedParameter, ShardedTensor

__all__ = ["FSDPModule", "IncompleteCheckpointError", "MixedPrecisionPolicy",
           "ShardedParameter", "ShardedTensor", "consolidate_sharded_checkpoint", "fully_shard",
           "load_sharded_checkpoint", "save_sharded_checkpoint", "verify_sharded_checkpoint"]
