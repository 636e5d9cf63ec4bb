"""``FSDPParamGroup``: the parameters one ``fully_shard`` call manages, and their traffic.

The group keeps its parameters' shards in one flat buffer (``local_flat``: every
parameter's padded chunk, one after another, smaller ones first), so that a single
all-gather rebuilds them all and a single reduce-scatter splits all their gradients:

- *unshard*: ``local_flat`` (cast to the policy's ``param_dtype``) is all-gathered into a
  ``(world, S)`` buffer; each parameter's columns are copied out, rank after rank, into one
  unsharded buffer of the same size (the gathered one is freed then), where its whole
  value, a view, becomes the data of the group's *unsharded parameter* (a leaf that
  the module's forward reads and backward accumulates into). ``start_unshard`` only issues
  the collective, so a prefetch overlaps it with compute; ``finish_unshard`` waits and
  copies out. (A view of an unsharded parameter that autograd saves keeps the whole
  group's unsharded buffer alive until backward frees it.)
- *reshard*: the unsharded parameters' data is dropped (autograd keeps the same Python
  objects, so backward sees whatever data they hold when it runs: the group unshards again
  before the module's backward); with the last view gone, the unsharded buffer is freed.
- *reduce*: once backward has accumulated every unsharded gradient, they are packed into a
  ``(world, S)`` buffer in the policy's ``reduce_dtype``, reduce-scattered with an average,
  and this rank's chunk becomes (or is added to) the sharded parameters' ``.grad``.

Where each parameter sits in these buffers is computed once (``CopyPlan``): a step's copies
are one ``multi_tensor_copy_`` call each way, from geometry known in advance.

Collectives are ``async_op=True`` in every case. On NCCL they run on the group's
communication stream (a side stream ordered after the compute stream), so a prefetched
all-gather overlaps the compute of the block before it; on Gloo the same calls run on
Gloo's threads. The code path is one for both.
"""

from __future__ import annotations

from dataclasses import dataclass

import genesis
from genesis.distributed import collectives
from genesis.distributed.fsdp.copy_plan import CopyPlan
from genesis.distributed.fsdp.sharded_tensor import ShardedParameter, ShardLayout
from genesis.distributed.reduce_op import ReduceOp
from genesis.nn import Parameter

_ALIGN = 16  # elements: 64 bytes of float32, 32 of bfloat16


@dataclass(eq=False)  # identity: `in` must not compare tensors
class FSDPParam:
    """One managed parameter: where it lives in modules, its layout, its two tensors."""

    name: str  # its dotted name under the fully_shard'ed module (first one if tied)
    owners: list  # [(module, attribute name)], every place the parameter is registered
    layout: ShardLayout
    offset: int  # where its chunk starts in local_flat
    sharded: ShardedParameter
    unsharded: Parameter


class FSDPParamGroup:
    """The managed parameters of one ``fully_shard``'ed module (see the module docstring).

    Args:
        named: ``[(name, parameter, owners)]`` in registration order.
        group: the process group the parameters are sharded over.
        param_dtype: the dtype of the unsharded parameters (None: the parameters' own).
        reduce_dtype: the dtype gradients are reduced in (None: the unsharded dtype).
    """

    def __init__(self, named: list, group, param_dtype, reduce_dtype) -> None:
        self.group = group
        world, rank = group.size(), group.rank()
        first = named[0][1]
        for name, p, _ in named:
            if p.dtype is not first.dtype or p.device != first.device:
                raise ValueError(
                    f"fully_shard: parameter {name!r} is {p.dtype} on {p.device} but "
                    f"{named[0][0]!r} is {first.dtype} on {first.device}; the parameters of "
                    "one fully_shard call must share a dtype and device")
        self.dtype, self.device = first.dtype, first.device
        self.param_dtype = param_dtype or self.dtype
        self.reduce_dtype = reduce_dtype or self.param_dtype
        layouts = [ShardLayout(tuple(p.shape), world) for _, p, _ in named]
        # Chunks of one size lie side by side (the group's copy-out takes one strided copy
        # for them: CopyPlan), each starting aligned, as fused kernels' fast paths want.
        offsets, at = [0] * len(layouts), 0
        for i in sorted(range(len(layouts)), key=lambda i: layouts[i].local_numel):
            offsets[i] = at
            at += -(-layouts[i].local_numel // _ALIGN) * _ALIGN
        self.local_numel = at  # S
        self.local_flat = genesis.zeros(self.local_numel, dtype=self.dtype, device=self.device)
        self.params: list[FSDPParam] = []
        for (name, p, owners), layout, offset in zip(named, layouts, offsets):
            chunk = self.local_flat[offset:offset + layout.local_numel].view(layout.local_shape)
            with genesis.no_grad():
                chunk.copy_(layout.chunk_of(p.detach(), rank))
            sharded = ShardedParameter.wrap_chunk(chunk, layout, rank, group, p.requires_grad)
            unsharded = Parameter(genesis.empty(0, dtype=self.param_dtype, device=self.device),
                                  requires_grad=p.requires_grad)
            self.params.append(FSDPParam(name, owners, layout, offset, sharded, unsharded))
        self.trainable = [fp for fp in self.params if fp.sharded.requires_grad]
        self._trainable_set = set(self.trainable)
        self._trainable_at = [i for i, fp in enumerate(self.params) if fp.sharded.requires_grad]
        self.plan = CopyPlan(layouts, offsets, world, self.local_numel)
        # every (module's parameter dict, attribute) a parameter is registered under
        self._slots = [(module._parameters, attr, fp) for fp in self.params
                       for module, attr in fp.owners]
        self._empty = genesis.empty(0, dtype=self.param_dtype, device=self.device)
        self._zero = genesis.zeros(1, dtype=self.reduce_dtype, device=self.device)
        self.is_unsharded = False
        self._gather = None  # (work, output buffer) of an all-gather in flight
        self._grads_ready = 0
        self.on_grads_ready = None  # set by the module's state: (group) -> None
        for fp in self.trainable:
            fp.unsharded.register_post_accumulate_grad_hook(self._grad_accumulated)

    # ------------------------------------------------------------- parameters in modules
    def use_sharded(self) -> None:
        """Register the sharded parameters in their modules (outside forward)."""
        for registry, attr, fp in self._slots:
            registry[attr] = fp.sharded

    def use_unsharded(self) -> None:
        """Register the unsharded parameters in their modules (inside forward)."""
        for registry, attr, fp in self._slots:
            registry[attr] = fp.unsharded

    # ------------------------------------------------------------------ all-gather
    def start_unshard(self) -> None:
        """Issue the all-gather of every parameter (nothing if unsharded or in flight)."""
        if self.is_unsharded or self._gather is not None:
            return
        world = self.group.size()
        with genesis.no_grad():
            source = self.local_flat.to(self.param_dtype)  # (S,)
            gathered = genesis.empty((world, self.local_numel), dtype=self.param_dtype,
                                     device=self.device)
            work = collectives.all_gather_into_tensor(gathered, source, self.group,
                                                      async_op=True)
        self._gather = (work, gathered, source)

    def discard_prefetch(self) -> None:
        """Wait for and drop an all-gather that no forward or backward used: it read the
        shards before they changed (an optimizer step), so its values may be stale."""
        if self._gather is not None:
            work, self._gather = self._gather[0], None
            work.wait()

    def finish_unshard(self) -> None:
        """Wait for the all-gather and give each unsharded parameter its whole value."""
        if self.is_unsharded:
            return
        self.start_unshard()
        work, gathered, _ = self._gather
        self._gather = None
        work.wait()
        with genesis.no_grad():
            unsharded = genesis.empty(gathered.numel(), dtype=self.param_dtype,
                                      device=self.device)
            wholes = self.plan.copy_out(gathered, unsharded)
        for fp, whole in zip(self.params, wholes):
            fp.unsharded.data = whole
        self.is_unsharded = True

    def reshard(self) -> None:
        """Drop the unsharded parameters' data (their Python objects stay)."""
        if not self.is_unsharded:
            return
        for fp in self.params:
            fp.unsharded.data = self._empty
        self.is_unsharded = False

    # -------------------------------------------------------------- reduce-scatter
    def reset_backward(self) -> None:
        """Forget a previous backward's count (a new forward has run)."""
        self._grads_ready = 0

    def grads_pending(self) -> bool:
        """Whether backward has accumulated some, not all, of the unsharded gradients."""
        return self._grads_ready > 0

    def missing_grads(self) -> list[str]:
        """Names of trainable parameters whose unsharded gradient is still waiting."""
        return [fp.name for fp in self.trainable if fp.unsharded.grad is None]

    def _grad_accumulated(self, _param) -> None:
        self._grads_ready += 1
        if self._grads_ready == len(self.trainable):
            self._grads_ready = 0
            self.on_grads_ready(self)

    def start_reduce(self, reshard: bool):
        """Pack the unsharded gradients, issue their averaging reduce-scatter, free them.

        Args:
            reshard: free the unsharded parameters once their gradients are taken, before
                the packed buffer is made (torch FSDP2's order): the group's peak then holds
                the gradients and their packed copy, not the parameters as well.

        Returns:
            the collective's ``Work``; its ``wait()`` sets the sharded ``.grad``s.
        """
        world = self.group.size()
        trainable = self._trainable_set
        grads = []
        for fp in self.params:
            if fp in trainable:
                grads.append(fp.unsharded.grad)
                fp.unsharded.grad = None
            else:
                grads.append(None)
        if reshard:
            self.reshard()
        with genesis.no_grad():
            # (the alignment gaps between chunks are never read: left uninitialised)
            packed = genesis.empty((world, self.local_numel), dtype=self.reduce_dtype,
                                   device=self.device)
            self.plan.pack(grads, packed, self._zero)
            del grads  # (the unsharded gradients are freed once packed)
            out = genesis.empty(self.local_numel, dtype=self.reduce_dtype, device=self.device)
            work = collectives.reduce_scatter_tensor(out, packed.view(-1), ReduceOp.AVG,
                                                     self.group, async_op=True)
        return work.then(lambda: self._take_grads(out))

    def _take_grads(self, out) -> None:
        with genesis.no_grad():
            flat = out if out.dtype is self.dtype else out.to(self.dtype)
            chunks = self.plan.shard_views(flat, self._trainable_at)
            for fp, chunk in zip(self.trainable, chunks):
                if fp.sharded.grad is None:
                    fp.sharded.grad = chunk
                else:
                    fp.sharded.grad.add_(chunk)
