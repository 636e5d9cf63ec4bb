"""``DistributedDataParallel``: one model replica per rank, gradients averaged in backward.

At wrap time the parameters' names, shapes and dtypes are compared across ranks (a
mismatch names the rank and the parameter, where torch would hang), then rank 0's
parameters and buffers are broadcast so every replica starts equal. During backward the
``Reducer`` averages gradients bucket by bucket, overlapping communication with the rest of
backward; after ``backward()`` every rank holds the same averaged ``.grad``, so identical
optimizer steps keep the replicas equal.
"""

from __future__ import annotations

import contextlib

import genesis
from genesis import nn
from genesis.distributed import collectives
from genesis.distributed.group import resolve
from genesis.distributed.reducer import Reducer


class DistributedDataParallel(nn.Module):
    """Data-parallel wrapper of ``module`` (torch.nn.parallel.DistributedDataParallel's API).

    Args:
        module: the model; its parameters live on this rank's device.
        device_ids: accepted for torch compatibility (one device per process:
            the module's own).
        output_device: like ``device_ids``.
        broadcast_buffers: copy rank 0's buffers to every rank at each forward.
        process_group: the group to average over (default: the world).
        bucket_cap_mb: the largest bucket of gradients reduced at once.
        find_unused_parameters: walk the graph at each forward and treat parameters it does
            not use as ready (otherwise such parameters make the next forward raise).
        gradient_as_bucket_view: make ``.grad`` views into the buckets (saves a copy and the
            memory of a second gradient).

    Example:
        >>> dist.init_process_group("gloo")
        >>> model = dist.DistributedDataParallel(nn.Linear(4, 2))
        >>> model(x).sum().backward()        # .grad is the mean over ranks
        >>> with model.no_sync():            # accumulate locally, no communication
        ...     model(x2).sum().backward()
    """

    def __init__(self, module: nn.Module, device_ids=None, output_device=None,
                 broadcast_buffers: bool = True, process_group=None,
                 bucket_cap_mb: float = 25, find_unused_parameters: bool = False,
                 gradient_as_bucket_view: bool = False) -> None:
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(f"DistributedDataParallel wraps an nn.Module, got "
                            f"{type(module).__name__}")
        group = resolve(process_group)
        if group is None:
            raise ValueError("DistributedDataParallel: this rank is not in process_group")
        self.module = module
        self.process_group = group
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.require_backward_grad_sync = True
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't "
                               "have any parameter that requires a gradient.")
        self._verify_across_ranks(module)
        self._sync_from_rank0(module)
        self.reducer = Reducer(named, group, bucket_cap_mb, find_unused_parameters,
                               gradient_as_bucket_view)

    # ----------------------------------------------------------------- wrap time
    def _verify_across_ranks(self, module: nn.Module) -> None:
        """Raise on every rank if any rank's parameters differ from rank 0's."""
        mine = [(n, tuple(p.shape), str(p.dtype)) for n, p in module.named_parameters()]
        everyone = self.process_group.exchange_objects(mine, "DistributedDataParallel")
        ref = everyone[0]
        for group_rank, theirs in enumerate(everyone[1:], start=1):
            rank = self.process_group.ranks[group_rank]
            if len(theirs) != len(ref):
                raise RuntimeError(
                    f"DistributedDataParallel: rank {rank} has {len(theirs)} parameters but "
                    f"rank 0 has {len(ref)}; every rank must wrap the same model")
            for (n0, s0, d0), (n, s, d) in zip(ref, theirs):
                if (n, s, d) != (n0, s0, d0):
                    raise RuntimeError(
                        f"DistributedDataParallel: parameter {n!r} on rank {rank} is "
                        f"{d} of shape {list(s)}, but rank 0's parameter {n0!r} is {d0} of "
                        f"shape {list(s0)}; every rank must wrap the same model")

    def _sync_from_rank0(self, module: nn.Module) -> None:
        src = self.process_group.ranks[0]
        with genesis.no_grad():
            for t in [*module.parameters(), *module.buffers()]:
                collectives.broadcast(t, src, self.process_group)

    # ------------------------------------------------------------------ per step
    def forward(self, *inputs, **kwargs):
        if self.broadcast_buffers and self.process_group.size() > 1:
            with genesis.no_grad():
                for buf in self.module.buffers():
                    collectives.broadcast(buf, self.process_group.ranks[0], self.process_group)
        out = self.module(*inputs, **kwargs)
        if genesis.is_grad_enabled() and self.require_backward_grad_sync:
            self.reducer.prepare_for_backward(out)
        else:
            self.reducer.disarm()
        return out

    @contextlib.contextmanager
    def no_sync(self):
        """Backward inside this block only accumulates ``.grad`` locally; the first backward
        after it averages the accumulated gradients.

        Example:
            >>> with ddp.no_sync():
            ...     ddp(x1).sum().backward()
            >>> ddp(x2).sum().backward()      # grads of x1 and x2, averaged over ranks
        """
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous
