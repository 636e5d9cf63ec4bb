"""``genesis.distributed``: process groups, collectives and DistributedDataParallel.

The API follows ``torch.distributed``. Launch with ``torchrun`` (no genesis launcher):

    torchrun --nproc_per_node=2 train.py

Inside ``train.py``:

    >>> import genesis.distributed as dist
    >>> dist.init_process_group()                  # gloo on CPUs; nccl too when GPUs exist
    >>> model = dist.DistributedDataParallel(model)
    >>> dist.all_reduce(t, op=dist.ReduceOp.AVG)
    >>> dist.destroy_process_group()

CPU tensors travel through Gloo (torch.distributed's ProcessGroupGloo, on the CPU backend's
torch storage); CUDA tensors through NCCL (CuPy's bindings, on genesis's own device memory and
streams; CuPy is imported only when NCCL is used). Ranks meet through torch's ``TCPStore``.
"""

import genesis.nn.parallel  # noqa: E402,F401  (torch's spelling of DDP: genesis.nn.parallel)
from genesis.distributed.agreement import CollectiveMismatchError
from genesis.distributed.checkpoint import load_checkpoint, save_checkpoint
from genesis.distributed.collectives import (
    all_gather,
    all_gather_into_tensor,
    all_reduce,
    all_to_all_single,
    barrier,
    broadcast,
    irecv,
    isend,
    recv,
    reduce,
    reduce_scatter,
    reduce_scatter_tensor,
    send,
)
from genesis.distributed.ddp import DistributedDataParallel
from genesis.distributed.group import (
    GroupMember,
    ProcessGroup,
    destroy_process_group,
    get_backend,
    get_rank,
    get_world_size,
    init_process_group,
    is_available,
    is_initialized,
    new_group,
)
from genesis.distributed.reduce_op import DistBackendError, ReduceOp
from genesis.distributed.work import Work
from genesis.utils.data import sampler as _sampler


def _world_of_the_process_group():
    return (get_world_size(), get_rank()) if is_initialized() else None


_sampler.set_world_provider(_world_of_the_process_group)  # DistributedSampler's defaults

__all__ = [
    "CollectiveMismatchError", "DistBackendError", "DistributedDataParallel", "GroupMember",
    "ProcessGroup", "ReduceOp",
    "Work", "all_gather", "all_gather_into_tensor", "all_reduce", "all_to_all_single",
    "barrier", "broadcast", "destroy_process_group", "get_backend", "get_rank",
    "get_world_size", "init_process_group", "irecv", "is_available", "is_initialized",
    "isend", "load_checkpoint", "new_group", "recv", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "save_checkpoint", "send",
]
