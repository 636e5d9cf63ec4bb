"""Bodies of the multi-process tests in tests/distributed (run by dist_harness.run_ranks).

They live here, not in the test files, because spawned processes must import them by name.
Each returns plain Python/numpy values; the tests compare them with numpy references.
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np

DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "int16", "int8",
          "uint8", "bool"]
OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX"]


def rank_values(rank: int, shape=(2, 3)) -> np.ndarray:
    """Rank ``rank``'s input: small integers (1..3), exact in every dtype after reduction."""
    n = int(np.prod(shape))
    return ((np.arange(n) * 7 + rank * 5) % 3 + 1).reshape(shape)


def make(values: np.ndarray, dtype: str):
    import genesis

    dt = getattr(genesis, "bool_" if dtype == "bool" else dtype)
    if dtype == "bool":
        return genesis.tensor(values > 1)
    return genesis.tensor(values.astype(np.float64)).to(dt)


def out(t) -> np.ndarray:
    import genesis

    return (t.float() if t.dtype is genesis.bfloat16 else t).numpy().copy()


def collectives(rank: int, n: int) -> dict:
    """Every collective, every dtype and op, sync and async."""
    import genesis
    import genesis.distributed as dist

    res: dict = {"rank": dist.get_rank(), "size": dist.get_world_size(),
                 "backend": dist.get_backend()}
    for dtype in DTYPES:
        for op in OPS:
            if dtype == "bool" and op == "AVG":
                continue
            t = make(rank_values(rank), dtype)
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
            res[f"all_reduce/{dtype}/{op}"] = out(t)
    for dtype in ("float32", "bfloat16", "int64", "int16"):
        base = make(rank_values(rank, (4, 2)), dtype)
        t = base.clone()
        dist.broadcast(t, src=n - 1)
        res[f"broadcast/{dtype}"] = out(t)
        t = base.clone()
        dist.reduce(t, dst=1, op=dist.ReduceOp.SUM)
        res[f"reduce/{dtype}"] = out(t)
        parts = [genesis.zeros(base.shape, dtype=base.dtype) for _ in range(n)]
        dist.all_gather(parts, base)
        res[f"all_gather/{dtype}"] = np.stack([out(p) for p in parts])
        flat = genesis.zeros((n * 4, 2), dtype=base.dtype)
        dist.all_gather_into_tensor(flat, base)
        res[f"all_gather_into_tensor/{dtype}"] = out(flat)
        stacked = genesis.zeros((n, 4, 2), dtype=base.dtype)
        dist.all_gather_into_tensor(stacked, base)
        res[f"all_gather_into_tensor_stacked/{dtype}"] = out(stacked)
        big = make(rank_values(rank, (n * 2, 3)), dtype)
        o = genesis.zeros((2, 3), dtype=base.dtype)
        dist.reduce_scatter_tensor(o, big, op=dist.ReduceOp.SUM)
        res[f"reduce_scatter_tensor/{dtype}"] = out(o)
        o = genesis.zeros((2, 3), dtype=base.dtype)
        dist.reduce_scatter(o, list(big.chunk(n)), op=dist.ReduceOp.MAX)
        res[f"reduce_scatter/{dtype}"] = out(o)
        src = make(rank_values(rank, (n * 2, 2)), dtype)
        o = genesis.zeros((n * 2, 2), dtype=base.dtype)
        dist.all_to_all_single(o, src)
        res[f"all_to_all_single/{dtype}"] = out(o)
    # uneven all_to_all: rank r sends j + 1 rows to rank j, receives r + 1 rows from each
    src = genesis.tensor(np.arange(sum(j + 1 for j in range(n)), dtype=np.float32) + 100 * rank)
    o = genesis.zeros(n * (rank + 1))
    dist.all_to_all_single(o, src, output_split_sizes=[rank + 1] * n,
                           input_split_sizes=[j + 1 for j in range(n)])
    res["all_to_all_uneven"] = out(o)
    # async handles
    t = make(rank_values(rank), "float32")
    work = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)
    res["async_all_reduce_work"] = type(work).__name__
    work.wait()
    res["async_all_reduce"] = out(t)
    res["async_completed"] = work.is_completed()
    parts = [genesis.zeros(3) for _ in range(n)]
    w = dist.all_gather(parts, genesis.full((3,), float(rank)), async_op=True)
    w.wait()
    res["async_all_gather"] = np.stack([out(p) for p in parts])
    # point to point around the ring
    right, left = (rank + 1) % n, (rank - 1) % n
    send = genesis.full((5,), float(rank))
    got = genesis.zeros(5)
    if rank % 2 == 0:
        dist.send(send, right)
        sender = dist.recv(got, left)
    else:
        sender = dist.recv(got, left)
        dist.send(send, right)
    res["recv"] = (sender, out(got))
    got = genesis.zeros(5)
    works = [dist.isend(send, right), dist.irecv(got, left)]
    for w in works:
        w.wait()
    res["irecv"] = out(got)
    got16 = genesis.zeros(5, dtype=genesis.int16)
    works = [dist.isend(send.to(genesis.int16), right), dist.irecv(got16, left)]
    for w in works:
        w.wait()
    res["irecv_int16"] = out(got16)
    if rank == 0:
        got = genesis.zeros(5)
        res["recv_any"] = sorted(int(dist.recv(got)) for _ in range(n - 1))
    else:
        dist.send(genesis.full((5,), float(rank)), 0)
    dist.barrier()
    # a sub-group of the even ranks
    group = dist.new_group([r for r in range(n) if r % 2 == 0])
    t = genesis.full((2,), float(rank + 1))
    res["subgroup_result"] = dist.all_reduce(t, group=group)
    res["subgroup"] = (dist.get_rank(group), dist.get_world_size(group), out(t))
    if rank % 2 == 0:
        dist.broadcast(t, src=n - 1 if (n - 1) % 2 == 0 else 0, group=group)
    dist.destroy_process_group(group)
    # zero-size tensors are no-ops
    empty = genesis.zeros(0)
    dist.all_reduce(empty)
    res["empty"] = tuple(empty.shape)
    # bad input is refused with the shapes in the message
    errors = {}
    try:
        dist.all_reduce(genesis.zeros(4, 4)[:, 1])
    except ValueError as exc:
        errors["non_contiguous"] = str(exc)
    try:
        dist.all_gather_into_tensor(genesis.zeros(3), genesis.zeros(2))
    except ValueError as exc:
        errors["gather_size"] = str(exc)
    try:
        dist.all_reduce(genesis.zeros(2), op="sum")
    except TypeError as exc:
        errors["op"] = str(exc)
    try:
        dist.all_reduce(genesis.zeros(2, dtype=genesis.bool_), op=dist.ReduceOp.AVG)
    except TypeError as exc:
        errors["bool_avg"] = str(exc)
    try:
        dist.broadcast(genesis.zeros(2), src=n)
    except ValueError as exc:
        errors["src"] = str(exc)
    res["errors"] = errors
    return res


# --------------------------------------------------------------------------- DDP
def _mlp(seed: int, out_features: int = 3):
    import genesis
    from genesis import nn

    genesis.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, out_features))


def _batch(total: int = 24):
    import genesis

    rng = np.random.default_rng(0)
    x = genesis.tensor(rng.standard_normal((total, 5)).astype(np.float32))
    y = genesis.tensor(rng.standard_normal((total, 3)).astype(np.float32))
    return x, y


def _loss(model, x, y):
    return ((model(x) - y) ** 2).mean()


def _grads(model) -> list:
    """Each parameter's gradient as a numpy array on the host (None where it has none)."""
    return [None if p.grad is None else p.grad.cpu().numpy().copy()
            for p in model.parameters()]


def _grad_diff(model, reference) -> float:
    """The largest absolute difference between the two models' gradients."""
    return max(float(np.abs(a - b).max()) for a, b in zip(_grads(model), _grads(reference)))


def ddp_matches_full_batch(rank: int, n: int, bucket_cap_mb: float, as_view: bool) -> dict:
    """DDP on shards == one process on the whole batch; replicas stay equal after steps."""
    import genesis
    import genesis.distributed as dist
    import genesis.optim

    x, y = _batch()
    shard = slice(rank * len(x) // n, (rank + 1) * len(x) // n)
    reference = _mlp(seed=0)  # every rank builds the same reference model
    model = dist.DistributedDataParallel(_mlp(seed=rank + 10), bucket_cap_mb=bucket_cap_mb,
                                         gradient_as_bucket_view=as_view)
    # the wrap broadcast rank 0's parameters (seed 10): copy them into the reference
    with genesis.no_grad():
        for p_ref, p in zip(reference.parameters(), model.module.parameters()):
            p_ref.copy_(p)
    res = {"buckets": len(model.reducer.buckets)}
    diffs = []
    opt = genesis.optim.SGD(model.parameters(), lr=0.1)
    opt_ref = genesis.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        opt_ref.zero_grad()
        _loss(model, x[shard], y[shard]).backward()
        _loss(reference, x, y).backward()
        diffs.append(_grad_diff(model.module, reference))
        opt.step()
        opt_ref.step()
    res["grad_diff"] = max(diffs)
    res["params"] = [p.detach().numpy().copy() for p in model.module.parameters()]
    res["state_keys"] = sorted(model.state_dict())[:2]
    return res


def ddp_no_sync(rank: int, n: int, device: str = "cpu") -> dict:
    """Two micro-batches, the first under no_sync: the gradient is the mean over ranks of
    the accumulated gradients (== the reference's on both micro-batches). ``device``:
    where the models and the batch live ("cuda" on the NCCL backend)."""
    import genesis.distributed as dist

    x, y = (t.to(device) for t in _batch(32))
    half = len(x) // 2
    reference = _mlp(seed=0).to(device)
    model = dist.DistributedDataParallel(_mlp(seed=0).to(device), bucket_cap_mb=0.0001)
    per = half // n
    micro = [slice(k * half + rank * per, k * half + (rank + 1) * per) for k in range(2)]
    with model.no_sync():
        _loss(model, x[micro[0]], y[micro[0]]).backward()
    local_after_no_sync = _grads(model.module)
    _loss(model, x[micro[1]], y[micro[1]]).backward()
    _loss(reference, x[:half], y[:half]).backward()
    _loss(reference, x[half:], y[half:]).backward()
    return {"local": local_after_no_sync, "diff": _grad_diff(model.module, reference)}


class _Branchy:
    """A model whose second head is used only where the caller says."""

    @staticmethod
    def make():
        from genesis import nn

        class Branchy(nn.Module):
            def __init__(self):
                super().__init__()
                self.trunk = nn.Linear(4, 4)
                self.head_a = nn.Linear(4, 1)
                self.head_b = nn.Linear(4, 1)
                self.never = nn.Linear(4, 1)

            def forward(self, x, use_b: bool):
                h = self.trunk(x)
                out = self.head_a(h)
                return out + self.head_b(h) if use_b else out

        return Branchy()


def ddp_unused(rank: int, n: int) -> dict:
    """find_unused_parameters: head_b used on rank 0 only, `never` on no rank."""
    import genesis
    import genesis.distributed as dist

    genesis.manual_seed(0)
    model = dist.DistributedDataParallel(_Branchy.make(), find_unused_parameters=True)
    x = genesis.ones(2, 4) * (rank + 1)
    model(x, use_b=(rank == 0)).sum().backward()
    res = {name: None if p.grad is None else p.grad.numpy().copy()
           for name, p in model.module.named_parameters()}
    # the same step, computed locally, without DDP: what each rank contributes
    genesis.manual_seed(0)
    local = _Branchy.make()
    local(x, use_b=(rank == 0)).sum().backward()
    res["local"] = {name: None if p.grad is None else p.grad.numpy().copy()
                    for name, p in local.named_parameters()}
    # without detection, an unused parameter makes the next forward raise (torch's error)
    strict = dist.DistributedDataParallel(_Branchy.make())
    strict(x, use_b=True).sum().backward()  # `never` gets no gradient
    try:
        strict(x, use_b=True)
    except RuntimeError as exc:
        res["strict_error"] = str(exc)
    return res


def ddp_shape_mismatch(rank: int, n: int, device: str = "cpu") -> str:
    """Rank 1's last layer has 3 outputs, the others' 2: wrapping must raise everywhere."""
    import genesis.distributed as dist
    from genesis import nn

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 3 if rank == 1 else 2)).to(device)
    try:
        dist.DistributedDataParallel(model)
    except RuntimeError as exc:
        return str(exc)
    return "no error"


def ddp_broadcast_buffers(rank: int, n: int) -> dict:
    import genesis
    import genesis.distributed as dist
    from genesis import nn

    genesis.manual_seed(rank)
    model = dist.DistributedDataParallel(nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)))
    model(genesis.randn(4, 3) + rank).sum().backward()
    bn = model.module[1]
    after_local_step = bn.running_mean.numpy().copy()  # each rank's own batch statistics
    model.eval()
    model(genesis.randn(4, 3))  # rank 0's buffers arrive before this forward
    return {"weight": model.module[0].weight.detach().numpy().copy(),
            "after_local_step": after_local_step,
            "after_next_forward": bn.running_mean.numpy().copy()}


def ddp_suite(rank: int, n: int) -> dict:
    """Every DDP case above, in one world (each leaves the world usable)."""
    return {
        "one_bucket_per_param": ddp_matches_full_batch(rank, n, 0.0001, False),
        "default_buckets": ddp_matches_full_batch(rank, n, 25, False),
        "bucket_view": ddp_matches_full_batch(rank, n, 25, True),
        "no_sync": ddp_no_sync(rank, n),
        "unused": ddp_unused(rank, n),
        "mismatch": ddp_shape_mismatch(rank, n),
        "buffers": ddp_broadcast_buffers(rank, n),
    }


# ------------------------------------------------------------------------- faults
def killed_peer(rank: int, n: int, device: str = "cpu") -> dict:
    """Rank n - 1 dies; the others' next collective must fail with a clear error.

    On NCCL (``device="cuda"``) a collective is only queued: the host learns of the dead
    peer when it waits (the barrier), once the watchdog has aborted the communicator after
    the group's timeout; should the abort let that wait finish, the next collective raises.
    """
    import genesis
    import genesis.distributed as dist

    t = genesis.ones(4, device=device)
    dist.all_reduce(t)
    dist.barrier()  # everyone is connected, and the all_reduce has finished everywhere
    if rank == n - 1:
        os._exit(3)
    start = time.monotonic()
    try:
        for _ in range(3):
            dist.all_reduce(t)
            dist.barrier()
        return {"error": None}
    except dist.DistBackendError as exc:
        return {"error": str(exc), "seconds": time.monotonic() - start}
    finally:
        dist.destroy_process_group()


def silent_peer(rank: int, n: int) -> dict:
    """Rank n - 1 stops calling collectives; the others time out with a clear error."""
    import genesis
    import genesis.distributed as dist

    t = genesis.ones(4)
    dist.all_reduce(t)
    if rank == n - 1:
        time.sleep(float(os.environ["GENESIS_TEST_TIMEOUT_S"]) + 0.5)
        return {"error": None}
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        return {"error": None}
    except dist.DistBackendError as exc:
        return {"error": str(exc), "seconds": time.monotonic() - start}


def stuck_rank(rank: int, n: int, how: str) -> dict:
    """After one all_reduce, rank n - 1 hangs in host code (``how="hang"``) or dies without
    a word (``how="die"``, or ``"kill"``: SIGKILLed), and the others raise (tests of the
    harness's report)."""
    import genesis
    import genesis.distributed as dist

    dist.all_reduce(genesis.ones(4))
    if rank == n - 1:
        if how == "die":
            os._exit(5)
        if how == "kill":  # as the out-of-memory killer does
            os.kill(os.getpid(), signal.SIGKILL)
        _waiting_for_nothing()
    raise RuntimeError(f"rank {rank} gives up")


def collects_garbage(rank: int, n: int) -> int:
    """Run a full garbage collection in the rank; returns the rank."""
    import gc

    gc.collect()
    return rank


def environment(rank: int, n: int) -> dict:
    """The rank's view of its environment: ``GENESIS_TEST_MARK`` and the working directory."""
    return {"mark": os.environ.get("GENESIS_TEST_MARK"), "cwd": os.getcwd()}


def _waiting_for_nothing() -> None:
    time.sleep(3600)  # (named, so that the report's stack can be checked)


def init_twice(rank: int, n: int) -> dict:
    """A second init raises; destroy releases; init works again afterwards."""
    import datetime

    from torch import distributed as tdist

    import genesis
    import genesis.distributed as dist

    res = {}
    try:
        dist.init_process_group("gloo", rank=rank, world_size=n)
    except RuntimeError as exc:
        res["second_init"] = str(exc)
    dist.destroy_process_group()
    res["after_destroy"] = dist.is_initialized()
    try:
        dist.get_rank()
    except RuntimeError as exc:
        res["uninitialized"] = str(exc)
    port = int(os.environ["GENESIS_TEST_STORE_PORT"])  # the harness's store server
    store = tdist.TCPStore("127.0.0.1", port, n, False, datetime.timedelta(seconds=20))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=20))
    t = genesis.ones(2)
    dist.all_reduce(t)
    res["again"] = t.tolist()
    return res


def checkpoint(rank: int, n: int, path: str) -> dict:
    import genesis
    import genesis.distributed as dist
    from genesis import nn

    genesis.manual_seed(rank)
    model = dist.DistributedDataParallel(nn.Linear(3, 2))
    dist.save_checkpoint({"model": model.module.state_dict(), "step": 7}, path)
    state = dist.load_checkpoint(path)
    fresh = nn.Linear(3, 2)
    fresh.load_state_dict(state["model"])
    return {"step": state["step"], "weight": fresh.weight.detach().numpy().copy(),
            "mine": model.module.weight.detach().numpy().copy()}


# --------------------------------------------------------------------- NCCL, 2+ GPUs
def nccl_suite(rank: int, n: int) -> dict:
    """The NCCL path across processes and GPUs: collectives on CUDA tensors, DDP's
    gradients, no_sync and the parameter-mismatch error (the world stays usable)."""
    import genesis
    import genesis.distributed as dist

    res: dict = {}
    for op in OPS:
        for dtype in ("float32", "bfloat16", "int16"):
            t = make(rank_values(rank), dtype).to("cuda")
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
            res[f"all_reduce/{dtype}/{op}"] = out(t.cpu())
    base = make(rank_values(rank, (4, 2)), "float32").to("cuda")
    t = base.clone()
    dist.broadcast(t, src=n - 1)
    res["broadcast"] = out(t.cpu())
    flat = genesis.zeros(n * 4, 2, device="cuda")
    dist.all_gather_into_tensor(flat, base)
    res["all_gather_into_tensor"] = out(flat.cpu())
    big = make(rank_values(rank, (n * 2, 3)), "float32").to("cuda")
    o = genesis.zeros(2, 3, device="cuda")
    dist.reduce_scatter_tensor(o, big)
    res["reduce_scatter_tensor"] = out(o.cpu())
    src = make(rank_values(rank, (n * 2, 2)), "float32").to("cuda")
    o = genesis.zeros(n * 2, 2, device="cuda")
    dist.all_to_all_single(o, src)
    res["all_to_all_single"] = out(o.cpu())
    right, left = (rank + 1) % n, (rank - 1) % n
    got = genesis.zeros(5, device="cuda")
    works = [dist.isend(genesis.full((5,), float(rank), device="cuda"), right),
             dist.irecv(got, left)]
    for w in works:
        w.wait()
    res["irecv"] = out(got.cpu())
    dist.barrier()
    res["ddp"] = _ddp_on_gpu(rank, n)
    res["no_sync"] = ddp_no_sync(rank, n, device="cuda")
    res["mismatch"] = ddp_shape_mismatch(rank, n, device="cuda")
    return res


def _ddp_on_gpu(rank: int, n: int) -> float:
    import genesis
    import genesis.distributed as dist

    x, y = (t.to("cuda") for t in _batch())
    shard = slice(rank * len(x) // n, (rank + 1) * len(x) // n)
    reference = _mlp(seed=0).to("cuda")
    model = dist.DistributedDataParallel(_mlp(seed=rank + 10).to("cuda"), bucket_cap_mb=0.0001)
    with genesis.no_grad():
        for p_ref, p in zip(reference.parameters(), model.module.parameters()):
            p_ref.copy_(p)
    _loss(model, x[shard], y[shard]).backward()
    _loss(reference, x, y).backward()
    return _grad_diff(model.module, reference)
