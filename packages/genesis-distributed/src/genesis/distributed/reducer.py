"""The gradient reducer behind DistributedDataParallel: buckets, hooks and the all-reduce.

Parameters are packed, in reverse registration order (roughly the order backward produces
their gradients), into flat *buckets* of at most ``bucket_cap_mb`` of one dtype and device.
A hook after each parameter's gradient accumulation copies the gradient into its bucket
slot; when a bucket is full it starts an asynchronous averaging all-reduce while backward
goes on. Buckets start in index order on every rank (collectives must be issued in the same
order everywhere). When the last bucket has started, the reducer waits for all of them and
writes the averages back into ``.grad``.

With ``find_unused_parameters`` the graph is walked at forward time; parameters it does not
reach are marked ready at once (their slot holds their existing gradient, or zeros), and a
``used`` count is all-reduced with the buckets, so that a parameter unused on every rank
keeps its ``.grad`` untouched, as in torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import genesis
from genesis.distributed import collectives
from genesis.distributed.group import get_rank
from genesis.distributed.reduce_op import ReduceOp


@dataclass
class _Bucket:
    flat: object  # 1-d genesis tensor holding every slot
    members: list[int]  # parameter indices, in slot order
    views: list = field(default_factory=list)  # per member: its slot, shaped like the param
    pending: int = 0
    work: object = None


def _collect_tensors(obj, out: list) -> list:
    if isinstance(obj, genesis.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _collect_tensors(x, out)
    elif isinstance(obj, dict):
        for x in obj.values():
            _collect_tensors(x, out)
    return out


def reachable_leaves(outputs) -> set[int]:
    """Ids of the leaf tensors whose gradients backward from ``outputs`` would reach."""
    leaves, seen = set(), set()
    stack = []
    for t in _collect_tensors(outputs, []):
        if t.grad_fn is not None:
            stack.append(t.grad_fn)
        elif t.requires_grad:
            leaves.add(id(t))
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if variable is not None:  # AccumulateGrad: the sink of a leaf
            leaves.add(id(variable))
        for edge in node.next_functions:
            if edge is not None:
                stack.append(edge[0])
    return leaves


class Reducer:
    """Averages the gradients of ``params`` over ``group`` during backward."""

    def __init__(self, named_params: list[tuple[str, object]], group, bucket_cap_mb: float,
                 find_unused_parameters: bool, gradient_as_bucket_view: bool) -> None:
        self.names = [n for n, _ in named_params]
        self.params = [p for _, p in named_params]
        self.group = group
        self.find_unused = find_unused_parameters
        self.as_view = gradient_as_bucket_view
        self.buckets = self._make_buckets(max(int(bucket_cap_mb * 2**20), 1))
        self.slot_of = {}  # param index -> (bucket index, position)
        for b, bucket in enumerate(self.buckets):
            for pos, i in enumerate(bucket.members):
                self.slot_of[i] = (b, pos)
        self.armed = False
        self.hooks_fired = False  # a backward has started reducing this iteration
        self.ready = [False] * len(self.params)
        self.next_bucket = 0
        self.used = None
        self._handles = [p.register_post_accumulate_grad_hook(self._hook(i))
                         for i, p in enumerate(self.params)]

    def _make_buckets(self, cap_bytes: int) -> list[_Bucket]:
        buckets: list[_Bucket] = []
        open_by_kind: dict = {}  # (dtype, device) -> (members, bytes so far)
        for i in reversed(range(len(self.params))):
            p = self.params[i]
            kind = (p.dtype, p.device)
            members, size = open_by_kind.get(kind, ([], 0))
            if members and size + p.nbytes > cap_bytes:
                buckets.append(self._new_bucket(members))
                members, size = [], 0
            members.append(i)
            open_by_kind[kind] = (members, size + p.nbytes)
        buckets += [self._new_bucket(m) for m, _ in open_by_kind.values() if m]
        return buckets

    def _new_bucket(self, members: list[int]) -> _Bucket:
        first = self.params[members[0]]
        total = sum(self.params[i].numel() for i in members)
        flat = genesis.zeros(total, dtype=first.dtype, device=first.device)
        bucket = _Bucket(flat, members)
        offset = 0
        for i in members:
            p = self.params[i]
            bucket.views.append(flat[offset:offset + p.numel()].view(p.shape))
            offset += p.numel()
        return bucket

    # ------------------------------------------------------------- per iteration
    def prepare_for_backward(self, outputs) -> None:
        """Arm the hooks for the backward of this forward's ``outputs``."""
        if self.armed and self.hooks_fired:
            self._raise_unfinished()  # a backward ran but left parameters without gradients
        self.armed = True
        self.hooks_fired = False
        self.ready = [False] * len(self.params)
        self.next_bucket = 0
        for bucket in self.buckets:
            bucket.pending = len(bucket.members)
            bucket.work = None
        if self.find_unused:
            self.used = genesis.zeros(len(self.params), dtype=genesis.int32,
                                      device=self.params[0].device)
            reached = reachable_leaves(outputs)
            for i, p in enumerate(self.params):
                if id(p) not in reached:
                    self._mark_ready(i)

    def disarm(self) -> None:
        """Forget an armed iteration (a forward under no_sync or no_grad follows)."""
        self.armed = False

    def _raise_unfinished(self) -> None:
        missing = [f"{i} ({self.names[i]})" for i, r in enumerate(self.ready) if not r]
        raise RuntimeError(
            "Expected to have finished reduction in the prior iteration before starting a new "
            "one. This error indicates that your module has parameters that were not used in "
            "producing loss. You can enable unused parameter detection by passing the keyword "
            "argument `find_unused_parameters=True` to DistributedDataParallel, and by making "
            "sure all `forward` function outputs participate in calculating loss. Parameter "
            f"indices which did not receive grad for rank {get_rank(self.group)}: "
            f"{', '.join(missing)}")

    def _hook(self, i: int):
        def on_grad_accumulated(param) -> None:
            if not self.armed:
                return
            self.hooks_fired = True
            if self.ready[i]:
                raise RuntimeError(
                    f"Expected to mark a variable ready only once: parameter {i} "
                    f"({self.names[i]}) got its gradient twice in one DistributedDataParallel "
                    "iteration (a second backward through the same forward?)")
            self._mark_ready(i)

        return on_grad_accumulated

    def _mark_ready(self, i: int) -> None:
        self.ready[i] = True
        b, pos = self.slot_of[i]
        bucket = self.buckets[b]
        slot, grad = bucket.views[pos], self.params[i].grad
        if grad is None:
            slot.zero_()
        else:
            if self.used is not None:
                self.used[i] = 1
            if grad.data_ptr() != slot.data_ptr():
                slot.copy_(grad)
        bucket.pending -= 1
        while self.next_bucket < len(self.buckets) and \
                self.buckets[self.next_bucket].pending == 0:
            started = self.buckets[self.next_bucket]
            started.work = collectives.all_reduce(started.flat, ReduceOp.AVG, self.group,
                                                  async_op=True)
            self.next_bucket += 1
        if self.next_bucket == len(self.buckets):
            self._finalize()

    def _finalize(self) -> None:
        self.armed = False
        globally_used = None
        if self.used is not None:
            collectives.all_reduce(self.used, ReduceOp.MAX, self.group)
            globally_used = self.used.tolist()
        for bucket in self.buckets:
            bucket.work.wait()
            for i, view in zip(bucket.members, bucket.views):
                if globally_used is not None and not globally_used[i]:
                    continue  # no rank produced a gradient: .grad stays as it is
                p = self.params[i]
                if self.as_view:
                    if p.grad is None or p.grad.data_ptr() != view.data_ptr():
                        p.grad = view
                elif p.grad is None:
                    p.grad = view.clone()
                else:
                    p.grad.copy_(view)

    def remove_hooks(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

