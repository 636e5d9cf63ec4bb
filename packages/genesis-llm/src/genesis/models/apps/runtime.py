"""Where a run executes: its rank and world size, its device and its precision.

This is the one place that knows about several processes. A single process (no
``WORLD_SIZE`` or ``WORLD_SIZE=1``) never imports ``genesis.distributed``; under ``torchrun``
(``WORLD_SIZE>1``) it is imported here, lazily, the process group is set up from torchrun's
environment, the model is wrapped in ``DistributedDataParallel`` and numbers are summed
across ranks. With ``fsdp`` the model is sharded instead (``sft_fsdp``; a process group is
made even for one process, which then runs the sharded code path). The training loop only
asks this object.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import genesis
from genesis.models.apps import sft_fsdp

PRECISIONS = ("auto", "bf16", "fp32")


@dataclass
class Runtime:
    """The process's place in a run.

    Attributes:
        rank: this process's rank (0 alone).
        world_size: processes in the run.
        device: the genesis device this process computes on.
        autocast_dtype: ``genesis.bfloat16`` for bf16 autocast, None for float32.
    """

    rank: int
    world_size: int
    device: genesis.device
    autocast_dtype: object = None
    fsdp: bool = False

    @property
    def is_main(self) -> bool:
        """Whether this process writes files and prints (rank 0)."""
        return self.rank == 0

    def autocast(self):
        """The autocast context of the run's precision (does nothing in float32)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return genesis.autocast(self.device.type, dtype=self.autocast_dtype)

    def wrap(self, model):
        """The model to train: itself alone, DistributedDataParallel across ranks, itself
        sharded with ``fsdp``."""
        if self.fsdp:
            return sft_fsdp.shard_model(model)
        if self.world_size == 1:
            return model
        import genesis.distributed as dist

        return dist.DistributedDataParallel(model)

    def no_sync(self, model, enabled: bool = True):
        """Skip the gradient all-reduce while ``enabled`` (micro-batches before a step's last)."""
        if self.world_size == 1 or not enabled or self.fsdp:
            return contextlib.nullcontext()  # (FSDP reduces each micro-batch's gradients)
        return model.no_sync()

    def gather(self, model) -> None:
        """Make every parameter whole on every rank (``fsdp``; nothing otherwise), so that
        forwards need no traffic and rank 0 can ``save_pretrained`` (a collective)."""
        if self.fsdp:
            sft_fsdp.gather(model)

    def release(self, model) -> None:
        """Undo ``gather`` (back to the shards)."""
        if self.fsdp:
            sft_fsdp.release(model)

    def sum(self, value: float) -> float:
        """``value`` summed over all ranks."""
        if self.world_size == 1:
            return value
        import genesis.distributed as dist

        t = genesis.tensor([float(value)], dtype=genesis.float64, device=self.device)
        dist.all_reduce(t)
        return float(t.item())

    def shard(self, items: list) -> list:
        """This rank's share of ``items`` (every ``world_size``-th, from ``rank``)."""
        return items[self.rank::self.world_size]

    def barrier(self) -> None:
        """Wait for every rank (nothing alone)."""
        if self.world_size > 1:
            import genesis.distributed as dist

            dist.barrier()


def setup_runtime(device: str | None = None, precision: str = "auto",
                  fsdp: bool = False) -> Runtime:
    """The runtime of this process, from torchrun's environment and the user's flags.

    Args:
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``; default the GPU when genesis-cuda finds
            one, else the CPU. Under torchrun each rank takes GPU ``LOCAL_RANK``.
        precision: ``"auto"`` (bf16 autocast on the GPU, float32 on the CPU), ``"bf16"`` or
            ``"fp32"``.
        fsdp: shard the model over the ranks (``genesis.distributed.fsdp``).

    Returns:
        A ``Runtime``.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if device is None:
        device = "cuda" if genesis.cuda.is_available() else "cpu"
    dev = genesis.device(device)
    if world_size > 1 or fsdp:
        import genesis.distributed as dist

        if dev.type == "cuda":
            dev = genesis.device("cuda", int(os.environ.get("LOCAL_RANK", dev.index or 0)))
        if not dist.is_initialized():
            if "WORLD_SIZE" in os.environ:
                dist.init_process_group()
            else:  # one process outside torchrun: a world of one, in memory
                from torch.distributed import HashStore

                dist.init_process_group(store=HashStore(), rank=0, world_size=1,
                                        device_id=dev.index if dev.type == "cuda" else None)
    use_bf16 = precision == "bf16" or (precision == "auto" and dev.type == "cuda")
    return Runtime(rank, world_size, dev, genesis.bfloat16 if use_bf16 else None, fsdp)
