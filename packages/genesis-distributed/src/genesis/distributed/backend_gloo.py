"""The Gloo backend: collectives on CPU tensors through torch.distributed's ProcessGroupGloo.

Genesis's CPU backend keeps its data in torch tensors, so a genesis CPU tensor is handed to
Gloo as a torch tensor sharing its memory (through DLPack: no copy). CUDA tensors never
reach Gloo: a group without a CUDA backend refuses them (``ProcessGroup.impl``).
"""

from __future__ import annotations

import datetime

import torch
from torch import distributed as tdist

from genesis.distributed.reduce_op import DistBackendError, ReduceOp
from genesis.distributed.work import Work

_TORCH_OPS = {
    ReduceOp.SUM: tdist.ReduceOp.SUM, ReduceOp.AVG: tdist.ReduceOp.SUM,
    ReduceOp.PRODUCT: tdist.ReduceOp.PRODUCT, ReduceOp.MIN: tdist.ReduceOp.MIN,
    ReduceOp.MAX: tdist.ReduceOp.MAX,
}
# On bools a sum is a logical or and a product a logical and (as torch's NCCL path does).
_BOOL_OPS = {
    ReduceOp.SUM: tdist.ReduceOp.MAX, ReduceOp.MAX: tdist.ReduceOp.MAX,
    ReduceOp.PRODUCT: tdist.ReduceOp.MIN, ReduceOp.MIN: tdist.ReduceOp.MIN,
}


class GlooBackend:
    """One Gloo communicator for a group's ranks (CPU tensors only)."""

    name = "gloo"
    device_type = "cpu"

    def __init__(self, store: tdist.Store, rank: int, size: int,
                 timeout: datetime.timedelta, describe: str) -> None:
        self.rank, self.size, self.timeout = rank, size, timeout
        self._describe = describe
        try:
            self._pg = tdist.ProcessGroupGloo(store, rank, size, timeout)
        except RuntimeError as exc:
            raise DistBackendError(f"{describe}: Gloo could not connect the ranks within "
                                   f"{timeout.total_seconds():g} s: {exc}") from exc

    # -- helpers
    @staticmethod
    def _torch(t) -> torch.Tensor:
        # only CPU tensors get here: ProcessGroup.impl dispatches on the device type
        return torch.from_dlpack(t.detach())  # shares memory; gradients are not ours

    def _work(self, what: str, torch_work, keep: tuple) -> Work:
        return Work(f"{what} on {self._describe} (gloo, timeout "
                    f"{self.timeout.total_seconds():g} s)", torch_work.wait,
                    torch_work.is_completed, keep)

    def _reduce_opts(self, cls, x: torch.Tensor, op: ReduceOp, root: int | None = None):
        opts = cls()
        opts.reduceOp = _BOOL_OPS[op] if x.dtype is torch.bool else _TORCH_OPS[op]
        if root is not None:
            opts.rootRank = root
        return opts

    def _then_average(self, work: Work, x: torch.Tensor, op: ReduceOp) -> Work:
        if op is ReduceOp.AVG:
            if x.is_floating_point():
                work.then(lambda: x.div_(self.size))
            else:
                work.then(lambda: x.copy_(torch.div(x, self.size, rounding_mode="trunc")))
        return work

    # -- collectives (ranks are group ranks; tensors are checked by the caller)
    def all_reduce(self, t, op: ReduceOp) -> Work:
        x = self._torch(t)
        w = self._pg.allreduce([x], self._reduce_opts(tdist.AllreduceOptions, x, op))
        return self._then_average(self._work("all_reduce", w, (x,)), x, op)

    def broadcast(self, t, root: int) -> Work:
        x = self._torch(t)
        opts = tdist.BroadcastOptions()
        opts.rootRank = root
        return self._work("broadcast", self._pg.broadcast([x], opts), (x,))

    def reduce(self, t, root: int, op: ReduceOp) -> Work:
        x = self._torch(t)
        w = self._pg.reduce([x], self._reduce_opts(tdist.ReduceOptions, x, op, root))
        work = self._work("reduce", w, (x,))
        return self._then_average(work, x, op) if self.rank == root else work

    def all_gather_into_tensor(self, out, inp) -> Work:
        # flat views: Gloo takes the (world * n) form only, genesis also the (world, n) form
        o, i = self._torch(out).view(-1), self._torch(inp).view(-1)
        return self._work("all_gather_into_tensor", self._pg._allgather_base(o, i), (o, i))

    def reduce_scatter_tensor(self, out, inp, op: ReduceOp) -> Work:
        o, i = self._torch(out).view(-1), self._torch(inp).view(-1)
        w = self._pg._reduce_scatter_base(o, i, self._reduce_opts(tdist.ReduceScatterOptions,
                                                                 o, op))
        return self._then_average(self._work("reduce_scatter_tensor", w, (o, i)), o, op)

    def all_to_all_single(self, out, inp, out_splits: list[int], in_splits: list[int]) -> Work:
        o, i = self._torch(out), self._torch(inp)
        w = self._pg.alltoall_base(o, i, out_splits, in_splits, tdist.AllToAllOptions())
        return self._work("all_to_all_single", w, (o, i))

    def send(self, t, peer: int, tag: int) -> Work:
        x = self._torch(t)
        return self._work(f"send to rank {peer}", self._pg.send([x], peer, tag), (x,))

    def recv(self, t, peer: int | None, tag: int) -> tuple[Work, object]:
        """Receive into ``t``; ``peer=None`` takes any sender. Returns the work and a function
        giving the sender's group rank once the work has finished."""
        x = self._torch(t)
        if peer is None:
            w = self._pg.recv_anysource([x], tag)
            return self._work("recv from any rank", w, (x,)), w.source_rank
        return self._work(f"recv from rank {peer}", self._pg.recv([x], peer, tag), (x,)), \
            lambda: peer

    def barrier(self) -> Work:
        return self._work("barrier", self._pg.barrier(tdist.BarrierOptions()), ())

    def shutdown(self, abort: bool = False) -> None:
        """Release the connections (destroy_process_group); Gloo always aborts (its pending
        operations fail at once)."""
        pg, self._pg = self._pg, None
        if pg is not None:
            try:
                pg.abort()
            except RuntimeError:
                pass  # already broken by a dead peer: nothing left to release
