"""Collectives on genesis tensors (torch.distributed's names, arguments and semantics).

Each function checks its tensors (contiguous, matching dtypes/devices/sizes — errors name
the shapes), finds the group's backend for the tensors' device and runs it. With
``async_op=True`` it returns a ``Work`` to ``wait()`` on; otherwise it finishes first and
returns ``None``. Ranks given as ``src``/``dst`` are global ranks, as in torch. On a rank
outside ``group`` every collective does nothing and returns ``None``.

Before a collective moves data the ranks check that they agree on it (``agreement.py``: the
same collective, dtypes and sizes; set by ``GENESIS_DISTRIBUTED_DEBUG``), so a mismatch
raises ``CollectiveMismatchError`` on every rank instead of pairing up different calls. An
empty tensor takes part in that check like any other; only when every rank's is empty
(which the check guarantees where it runs) is the transfer itself skipped.
"""

from __future__ import annotations

import genesis
from genesis.distributed.agreement import agree
from genesis.distributed.group import ProcessGroup, resolve
from genesis.distributed.reduce_op import ReduceOp
from genesis.distributed.work import Work, completed


def _check(t, name: str = "tensor") -> None:
    if not isinstance(t, genesis.Tensor):
        raise TypeError(f"{name} must be a genesis.Tensor, got {type(t).__name__}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (shape {tuple(t.shape)}, strides "
                         f"{t.stride()}): call .contiguous() first")


def _same_kind(a, b, what: str) -> None:
    if a.dtype is not b.dtype or a.device != b.device:
        raise ValueError(f"{what}: output is {a.dtype} on {a.device} but input is {b.dtype} "
                         f"on {b.device}; they must match")


def _op(op, t) -> ReduceOp:
    if not isinstance(op, ReduceOp):
        raise TypeError(f"op must be a genesis.distributed.ReduceOp, got {op!r}")
    if op is ReduceOp.AVG and t.dtype is genesis.bool_:
        raise TypeError("ReduceOp.AVG is not defined for bool tensors")
    return op


# Neither Gloo nor NCCL has int16: such tensors travel widened to int32, and the results are
# narrowed back into the caller's tensors when the work is waited for.
_WIDENED = {genesis.int16: genesis.int32}


def _run(g: ProcessGroup, method: str, outs: tuple, ins: tuple, *args) -> Work:
    """The group's backend for the tensors' device runs ``method(*outs, *ins, *args)``;
    ``outs`` are written (in-place ones included), ``ins`` only read."""
    first = (outs or ins)[0]
    run = getattr(g.impl(first.device.type), method)
    wide = _WIDENED.get(first.dtype)
    if wide is None:
        return run(*outs, *ins, *args)
    wide_outs = [t.to(wide) for t in outs]
    work = run(*wide_outs, *(t.to(wide) for t in ins), *args)
    for t, w in zip(outs, wide_outs):
        work.then(lambda t=t, w=w: t.copy_(w))
    return work


def _finish(work: Work, async_op: bool) -> Work | None:
    if async_op:
        return work
    work.wait()
    return None


def all_reduce(tensor, op: ReduceOp = ReduceOp.SUM, group: ProcessGroup | None = None,
               async_op: bool = False):
    """Combine ``tensor`` across the group's ranks, in place on every rank.

    Args:
        tensor: the tensor to combine; overwritten with the result on every rank.
        op: how to combine (a ``ReduceOp``: SUM, AVG, PRODUCT, MIN, MAX).
        group: the process group; the default (world) group when None.
        async_op: return a ``Work`` to wait on instead of waiting here.

    Returns:
        A ``Work`` when ``async_op``, else None (also None on ranks outside ``group``).

    Example:
        >>> t = genesis.ones(3) * (dist.get_rank() + 1)
        >>> dist.all_reduce(t, op=dist.ReduceOp.SUM)   # 1 + 2 + ... on every rank
    """
    _check(tensor)
    g = resolve(group)
    if g is None:
        return None
    op = _op(op, tensor)
    agree(g, tensor.device.type, "all_reduce", (("tensor", tensor),), (f"op={op.name}",))
    if tensor.numel() == 0:
        return _finish(completed("all_reduce"), async_op)
    return _finish(_run(g, "all_reduce", (tensor,), (), op), async_op)


def broadcast(tensor, src: int, group: ProcessGroup | None = None, async_op: bool = False):
    """Copy rank ``src``'s ``tensor`` into ``tensor`` on every rank.

    Args:
        tensor: the data on ``src``; overwritten on the other ranks.
        src: the global rank to copy from.
        group: the process group; the default (world) group when None.
        async_op: return a ``Work`` to wait on instead of waiting here.

    Returns:
        A ``Work`` when ``async_op``, else None (also None on ranks outside ``group``).
    """
    _check(tensor)
    g = resolve(group)
    if g is None:
        return None
    root = g.group_rank(src)
    agree(g, tensor.device.type, "broadcast", (("tensor", tensor),), (f"src={src}",))
    if tensor.numel() == 0:
        return _finish(completed("broadcast"), async_op)
    return _finish(_run(g, "broadcast", (tensor,), (), root), async_op)


def reduce(tensor, dst: int, op: ReduceOp = ReduceOp.SUM, group: ProcessGroup | None = None,
           async_op: bool = False):
    """Combine ``tensor`` across ranks into rank ``dst``'s ``tensor`` (others keep theirs).

    Args:
        tensor: the tensor to combine; the result lands in ``dst``'s.
        dst: the global rank that receives the result.
        op: how to combine (a ``ReduceOp``: SUM, AVG, PRODUCT, MIN, MAX).
        group: the process group; the default (world) group when None.
        async_op: return a ``Work`` to wait on instead of waiting here.

    Returns:
        A ``Work`` when ``async_op``, else None (also None on ranks outside ``group``).
    """
    _check(tensor)
    g = resolve(group)
    if g is None:
        return None
    root = g.group_rank(dst)
    op = _op(op, tensor)
    agree(g, tensor.device.type, "reduce", (("tensor", tensor),), (f"dst={dst}", f"op={op.name}"))
    if tensor.numel() == 0:
        return _finish(completed("reduce"), async_op)
    return _finish(_run(g, "reduce", (tensor,), (), root, op), async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group: ProcessGroup | None = None,
                           async_op: bool = False):
    """Every rank's ``input_tensor``, concatenated in rank order, into ``output_tensor``.

    Shape:
        output: ``(world * n, ...)`` or ``(world, n, ...)`` for an input of ``(n, ...)``.

    Args:
        output_tensor: the result, shaped as under Shape.
        input_tensor: this rank's contribution.
        group: the process group; the default (world) group when None.
        async_op: return a ``Work`` to wait on instead of waiting here.

    Returns:
        A ``Work`` when ``async_op``, else None (also None on ranks outside ``group``).
    """
    _check(output_tensor, "output_tensor")
    _check(input_tensor, "input_tensor")
    _same_kind(output_tensor, input_tensor, "all_gather_into_tensor")
    g = resolve(group)
    if g is None:
        return None
    if output_tensor.numel() != input_tensor.numel() * g.size():
        raise ValueError(
            f"all_gather_into_tensor: output shape {tuple(output_tensor.shape)} must hold "
            f"{g.size()} x input shape {tuple(input_tensor.shape)}")
    agree(g, input_tensor.device.type, "all_gather_into_tensor",
          (("output_tensor", output_tensor), ("input_tensor", input_tensor)))
    if input_tensor.numel() == 0:
        return _finish(completed("all_gather_into_tensor"), async_op)
    work = _run(g, "all_gather_into_tensor", (output_tensor,), (input_tensor,))
    return _finish(work, async_op)


def all_gather(tensor_list: list, tensor, group: ProcessGroup | None = None,
               async_op: bool = False):
    """``tensor_list[r]`` receives rank ``r``'s ``tensor`` (one entry per rank).

    Args:
        tensor_list: one tensor per rank, each of ``tensor``'s shape and dtype (filled in).
        tensor: this rank's contribution.
        group: the process group; the default (world) group when None.
        async_op: return a ``Work`` to wait on instead of waiting here.

    Returns:
        A ``Work`` when ``async_op``, else None (also None on ranks outside ``group``).
    """
    _check(tensor)
    g = resolve(group)
    if g is None:
        return None
    if len(tensor_list) != g.size():
        raise ValueError(f"all_gather: tensor_list has {len(tensor_list)} tensors for a group "
                         f"of {g.size()} ranks")
    for i, t in enumerate(tensor_list):
        _check(t, f"tensor_list[{i}]")
        _same_kind(t, tensor, "all_gather")
        if t.shape != tensor.shape:
            raise ValueError(f"all_gather: tensor_list[{i}] has shape {tuple(t.shape)}, the "
                             f"input has shape {tuple(tensor.shape)}")
    agree(g, tensor.device.type, "all_gather", (("tensor", tensor),))
    flat = genesis.empty((g.size(), *tensor.shape), dtype=tensor.dtype, device=tensor.device)
    work = (completed("all_gather") if tensor.numel() == 0 else
            _run(g, "all_gather_into_tensor", (flat,), (tensor,)))

    def scatter_out() -> None:
        for i, t in enumerate(tensor_list):
            t.copy_(flat[i])

    return _finish(work.then(scatter_out), async_op)


def reduce_scatter_tensor(output, input, op: ReduceOp = ReduceOp.SUM,
                          group: ProcessGroup | None = None, async_op: bool = False):
    """Reduce ``input`` across ranks; rank ``r`` keeps chunk ``r`` of the result in ``output``.

    Shape:
        input: ``(world * n, ...)`` or ``(world, n, ...)``; output: ``(n, ...)``.

    Args:
        output: this rank's chunk of the result.
        input: the tensor to reduce, shaped as under Shape.
        op: how to combine (a ``ReduceOp``: SUM, AVG, PRODUCT, MIN, MAX).
        group: the process group; the default (world) group when None.
        async_op: return a ``Work`` to wait on instead of waiting here.

    Returns:
        A ``Work`` when ``async_op``, else None (also None on ranks outside ``group``).
    """
    _check(output, "output")
    _check(input, "input")
    _same_kind(output, input, "reduce_scatter_tensor")
    g = resolve(group)
    if g is None:
        return None
    if input.numel() != output.numel() * g.size():
        raise ValueError(f"reduce_scatter_tensor: input shape {tuple(input.shape)} must hold "
                         f"{g.size()} x output shape {tuple(output.shape)}")
    op = _op(op, output)
    agree(g, output.device.type, "reduce_scatter_tensor", (("output", output), ("input", input)),
          (f"op={op.name}",))
    if output.numel() == 0:
        return _finish(completed("reduce_scatter_tensor"), async_op)
    work = _run(g, "reduce_scatter_tensor", (output,), (input,), op)
    return _finish(work, async_op)


def reduce_scatter(output, input_list: list, op: ReduceOp = ReduceOp.SUM,
                   group: ProcessGroup | None = None, async_op: bool = False):
    """``output`` on rank ``r`` gets the reduction over ranks of their ``input_list[r]``.

    Args:
        output: this rank's share of the result.
        input_list: one tensor per rank, each of ``output``'s shape.
        op: how to combine (a ``ReduceOp``: SUM, AVG, PRODUCT, MIN, MAX).
        group: the process group; the default (world) group when None.
        async_op: return a ``Work`` to wait on instead of waiting here.

    Returns:
        A ``Work`` when ``async_op``, else None (also None on ranks outside ``group``).
    """
    _check(output, "output")
    g = resolve(group)
    if g is None:
        return None
    if len(input_list) != g.size():
        raise ValueError(f"reduce_scatter: input_list has {len(input_list)} tensors for a "
                         f"group of {g.size()} ranks")
    for i, t in enumerate(input_list):
        _check(t, f"input_list[{i}]")
        _same_kind(output, t, "reduce_scatter")
        if t.shape != output.shape:
            raise ValueError(f"reduce_scatter: input_list[{i}] has shape {tuple(t.shape)}, "
                             f"the output has shape {tuple(output.shape)}")
    flat = genesis.stack(list(input_list))
    return reduce_scatter_tensor(output, flat, op, group, async_op)


def all_to_all_single(output, input, output_split_sizes: list[int] | None = None,
                      input_split_sizes: list[int] | None = None,
                      group: ProcessGroup | None = None, async_op: bool = False):
    """Rank ``r`` sends slice ``j`` of ``input`` (along dim 0) to rank ``j`` and receives
    slice ``r`` of theirs into slice ``j`` of ``output``; splits default to equal.

    Args:
        output: receives one slice from every rank, along dim 0.
        input: holds one slice for every rank, along dim 0.
        output_split_sizes: rows received from each rank; equal when None.
        input_split_sizes: rows sent to each rank; equal when None.
        group: the process group; the default (world) group when None.
        async_op: return a ``Work`` to wait on instead of waiting here.

    Returns:
        A ``Work`` when ``async_op``, else None (also None on ranks outside ``group``).
    """
    _check(output, "output")
    _check(input, "input")
    _same_kind(output, input, "all_to_all_single")
    g = resolve(group)
    if g is None:
        return None
    n = g.size()
    out_splits = _splits(output, output_split_sizes, n, "output")
    in_splits = _splits(input, input_split_sizes, n, "input")
    # Sizes legitimately differ between ranks here: the dtype and the call must agree. A
    # rank with nothing to send or receive still takes part (the others' splits for it are 0).
    agree(g, input.device.type, "all_to_all_single", (), (f"dtype={input.dtype.name}",))
    work = _run(g, "all_to_all_single", (output,), (input,), out_splits, in_splits)
    return _finish(work, async_op)


def _splits(t, sizes, n: int, name: str) -> list[int]:
    rows = t.shape[0] if t.ndim else 1
    if sizes is None or len(sizes) == 0:
        if rows % n:
            raise ValueError(f"all_to_all_single: {name} dim 0 ({rows}) does not split evenly "
                             f"over {n} ranks; pass {name}_split_sizes")
        return [rows // n] * n
    sizes = [int(s) for s in sizes]
    if len(sizes) != n or sum(sizes) != rows or min(sizes) < 0:
        raise ValueError(f"all_to_all_single: {name}_split_sizes {sizes} must be {n} "
                         f"non-negative sizes summing to dim 0 of {name} ({rows})")
    return sizes


def isend(tensor, dst: int, group: ProcessGroup | None = None, tag: int = 0) -> Work | None:
    """Start sending ``tensor`` to global rank ``dst``; returns a ``Work``.

    Args:
        tensor: the tensor to communicate.
        dst: the global rank to send to.
        group: the process group; the default (world) group when None.
        tag: a tag to match a send with its receive.

    Returns:
        A ``Work`` (None on ranks outside ``group``).
    """
    _check(tensor)
    g = resolve(group)
    if g is None:
        return None
    peer = g.group_rank(dst)
    if peer == g.rank():
        raise ValueError(f"send: dst {dst} is this rank")
    return _run(g, "send", (), (tensor,), peer, tag)


def send(tensor, dst: int, group: ProcessGroup | None = None, tag: int = 0) -> None:
    """Send ``tensor`` to global rank ``dst`` (which calls ``recv``).

    Args:
        tensor: the tensor to communicate.
        dst: the global rank to send to.
        group: the process group; the default (world) group when None.
        tag: a tag to match a send with its receive.
    """
    work = isend(tensor, dst, group, tag)
    if work is not None:
        work.wait()


def irecv(tensor, src: int | None = None, group: ProcessGroup | None = None,
          tag: int = 0) -> Work | None:
    """Start receiving into ``tensor`` from global rank ``src``; returns a ``Work``.

    Args:
        tensor: receives the data (its shape and dtype must match the sender's).
        src: the global rank to receive from; any rank when None (Gloo only).
        group: the process group; the default (world) group when None.
        tag: a tag to match a send with its receive.

    Returns:
        A ``Work`` (None on ranks outside ``group``).
    """
    return _recv(tensor, src, group, tag)[0]


def recv(tensor, src: int | None = None, group: ProcessGroup | None = None,
         tag: int = 0) -> int:
    """Receive into ``tensor`` from global rank ``src`` (any rank if ``None``, Gloo only);
    returns the sender's global rank (-1 outside the group).

    Args:
        tensor: receives the data (its shape and dtype must match the sender's).
        src: the global rank to receive from; any rank when None (Gloo only).
        group: the process group; the default (world) group when None.
        tag: a tag to match a send with its receive.

    Returns:
        The sender's global rank (-1 outside the group).
    """
    work, sender = _recv(tensor, src, group, tag)
    if work is None:
        return -1
    work.wait()
    g = resolve(group)
    return g.ranks[sender()]


def _recv(tensor, src, group, tag):
    _check(tensor)
    g = resolve(group)
    if g is None:
        return None, None
    peer = None if src is None else g.group_rank(src)
    if peer is not None and peer == g.rank():
        raise ValueError(f"recv: src {src} is this rank")
    wide = _WIDENED.get(tensor.dtype)
    staged = tensor if wide is None else tensor.to(wide)
    work, sender = g.impl(tensor.device.type).recv(staged, peer, tag)
    if staged is not tensor:
        work.then(lambda: tensor.copy_(staged))
    return work, sender


def barrier(group: ProcessGroup | None = None, async_op: bool = False, device_type=None):
    """Wait until every rank of the group has reached this call.

    Runs on the group's CUDA backend when it has one (as torch's NCCL barrier), else Gloo.

    Args:
        group: the process group; the default (world) group when None.
        async_op: return a ``Work`` to wait on instead of waiting here.
        device_type: ``'cpu'`` or ``'cuda'``: which backend runs the barrier; the group's CUDA
            backend when it has one.

    Returns:
        A ``Work`` when ``async_op``, else None (also None on ranks outside ``group``).
    """
    g = resolve(group)
    if g is None:
        return None
    if device_type is None:
        device_type = "cuda" if "cuda" in g.backends else "cpu"
    agree(g, device_type, "barrier")
    return _finish(g.impl(device_type).barrier(), async_op)
