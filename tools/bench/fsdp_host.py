"""genesis FSDP's CUDA step with no GPU: its allocations, cross-stream frees and event queries.

    python tools/bench/fsdp_host.py [--model qwen2.5-0.5b] [--seq 2048] [--steps 3]
                                    [--lags 5,50,500] [--query-us 0] [--json PATH]

``tools/bench/fsdp.py``'s genesis FSDP step (the decoder sharded block by block with
``fully_shard``, bf16 parameters, fp32 reduction, fused AdamW, gradient clipping) runs on
``tools/bench/cuda_host.py``'s *null device* (driver calls that do nothing, kernels that
never run, the real caching allocator on fake addresses) in a world of one whose NCCL is a
stand-in (CuPy's ``NcclCommunicator`` replaced by calls that do nothing). Everything else
is the code a GPU run executes: the FSDP hooks, the parameter group's copies, the NCCL
backend's communication stream, ``record_stream`` on every collective's buffers, and the
caching allocator's cross-stream frees.

The allocator's driver is ``allocator_pending.LaggingOps``: an event recorded at a free
completes ``lag`` allocations later, as if the GPU ran that far behind the host (on two
ranks, a collective's event completes only once the slower rank has reached it too). Per
lag, a table of the step's counts: requests, pool searches (requests that missed the held
chunks), cross-stream frees (events recorded), ``event_query`` calls, frees still pending at
the step's end, reserved and peak allocated memory, and the step's host ms (CPU time of this
process; ``--query-us`` busy-waits that long in each query, as cuda-python's
``cuEventQuery`` costs ~1 µs). In a world of one the shards are whole, so the buffers are
those of two ranks except the shard itself (twice as large); the sequence of requests and
frees is the same.

The counts are exact on any machine; the host ms only compare runs on one machine. Run it
on two checkouts to compare allocators (``PYTHONPATH`` first).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import allocator_pending  # noqa: E402 - LaggingOps, ClockedAllocator
import cuda_host  # noqa: E402 - the null device
import fsdp  # noqa: E402 - the models and genesis's FSDP build
import train  # noqa: E402 - the training step

COMM_STREAM = 7  # the stand-in communication stream's handle


def install_stand_in_nccl() -> None:
    """CuPy's NCCL as calls that do nothing, and a communication stream and events on the
    null device (its driver module answers every call with success and no value)."""
    from genesis_cuda import streams

    nccl = types.ModuleType("cupy.cuda.nccl")
    nccl.available = True
    nccl.get_unique_id = lambda: (0,)
    nccl.groupStart = nccl.groupEnd = lambda: None

    class Communicator:
        def __init__(self, *args):
            pass

        def __getattr__(self, name):  # allGather, reduceScatter, check_async_error ...
            return lambda *args, **kwargs: None

    nccl.NcclCommunicator = Communicator
    runtime = types.ModuleType("cupy.cuda.runtime")
    runtime.setDevice = lambda index: None
    cuda = types.ModuleType("cupy.cuda")
    cuda.nccl, cuda.runtime = nccl, runtime
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda
    sys.modules.update({"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.nccl": nccl,
                        "cupy.cuda.runtime": runtime})
    streams._pooled_stream = lambda index, priority: COMM_STREAM

    def create(self, index):
        self._raw, self.device = 1, index

    streams.Event._create = create
    streams.Event.query = lambda self: True  # the NCCL works' events (not the allocator's)


def run(args, lag: int) -> dict:
    """Build the sharded model on a fresh allocator lagging ``lag`` requests; step it."""
    from genesis_cuda import memory

    ops = allocator_pending.LaggingOps(lag, args.query_us)
    alloc = allocator_pending.ClockedAllocator(ops)
    memory._allocators[0] = alloc
    cfg = fsdp.MODELS[args.model]
    lib, model, params, amp = fsdp.build("genesis", cfg, args.seq, "cuda", True, fill=False)
    opt = lib.optim.AdamW(params, lr=1e-4, weight_decay=0.1, fused=True)
    tokens = np.random.default_rng(0).integers(0, cfg.vocab, size=(1, args.seq + 1))
    data = [(lib.from_numpy(tokens[:, :-1].copy()).to("cuda"),
             lib.from_numpy(tokens[:, 1:].copy()).to("cuda"))]
    step = train.training_step(lib, model, opt, params, data, amp)
    for i in range(2):  # warm-up: optimizer state, plans, segments
        step(i)
    alloc.reset_peak_stats()
    per: dict = {k: [] for k in ("ms", "requests", "searches", "frees", "queries")}
    gc.collect()
    gc.disable()
    try:
        for i in range(args.steps):
            n0, s0, r0, q0 = alloc.num_allocs, alloc.searches, ops.records, ops.queries
            t0 = time.process_time()
            step(i)
            per["ms"].append((time.process_time() - t0) * 1e3)
            per["requests"].append(alloc.num_allocs - n0)
            per["searches"].append(alloc.searches - s0)
            per["frees"].append(ops.records - r0)
            per["queries"].append(ops.queries - q0)
    finally:
        gc.enable()
    row = {k: statistics.median(v) for k, v in per.items()}
    row.update(lag=lag, pending=alloc.stats()["num_pending_frees"],
               reserved_gib=alloc.reserved_bytes / 2**30,
               peak_gib=alloc.peak_allocated / 2**30)
    del model, opt, params, data, step
    gc.collect()  # (sharded modules and their hooks form cycles)
    return row


def main(argv=None) -> list:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(fsdp.MODELS), default="qwen2.5-0.5b")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--lags", default="5,50,500", help="GPU lags in requests, comma-separated")
    ap.add_argument("--query-us", type=float, default=0.0,
                    help="host µs each event_query busy-waits (cuEventQuery: ~1)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    cuda_host.install_null_device()
    install_stand_in_nccl()
    from torch import distributed as tdist

    import genesis.distributed as dist

    os.environ.setdefault("LOCAL_RANK", "0")
    dist.init_process_group("nccl", store=tdist.HashStore(), rank=0, world_size=1)
    try:
        rows = [run(args, int(lag)) for lag in args.lags.split(",")]
    finally:
        dist.destroy_process_group()
    where = sys.modules[allocator_pending.CachingAllocator.__module__].__file__
    print(f"genesis FSDP on a null CUDA device: {args.model}, 1 x {args.seq} tokens, world of "
          f"one (stand-in NCCL), event_query {args.query_us:g} µs; medians of {args.steps} "
          f"steps; {where}")
    print(f"{'lag':>5} {'requests':>8} {'searches':>8} {'x-stream':>8} {'queries':>8} "
          f"{'pending':>7} {'reserved':>8} {'peak':>6} {'host ms':>8}")
    for r in rows:
        print(f"{r['lag']:>5} {r['requests']:>8.0f} {r['searches']:>8.0f} {r['frees']:>8.0f} "
              f"{r['queries']:>8.0f} {r['pending']:>7} {r['reserved_gib']:>7.2f}G "
              f"{r['peak_gib']:>5.2f}G {r['ms']:>8.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    return rows


if __name__ == "__main__":
    main()
