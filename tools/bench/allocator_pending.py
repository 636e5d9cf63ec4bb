"""Host cost of the caching allocator while cross-stream frees are waiting (FSDP's step).

    python tools/bench/allocator_pending.py [--steps 5] [--lags 0,5,50,500,3000]
                                            [--query-us 1.0] [--json PATH]

FSDP and DDP run their collectives on a communication stream and mark the buffers those
read or write as used there (``record_stream``): when such a buffer is freed, the allocator
records an event on the communication stream and keeps the chunk back until the event has
completed. With collectives issued all through a step, some of those frees are nearly
always waiting, so whatever the allocator does per request *because* frees are waiting is
paid by every one of the step's ~3,000 allocations.

This tool runs the allocator (``genesis_cuda.allocator.CachingAllocator``, whichever one is
on ``PYTHONPATH``: run it on two checkouts to compare) on a fake driver through a synthetic
step shaped like ``tools/bench/fsdp.py``'s Qwen2.5-0.5B step on two ranks (bf16
parameters, fp32 reduction, 2048 tokens), with no GPU:

* 24 blocks; per block in forward an all-gather (its output and bf16 source marked used on
  the communication stream), the copy-out into the unsharded buffer, and 50 activation
  requests (a third saved for backward, the rest freed at once); in backward the same
  all-gather, 78 requests, the packed gradients and the reduce-scatter's output (both marked
  used on the communication stream; the packed buffer is freed when the next block's
  reduction is waited for, the output at ``zero_grad``). The request counts are those of
  genesis's own step on the null device (``tools/bench/cuda_host.py``, 1,189 + 1,861
  requests over 24 blocks), the sizes those of the 0.5B shape.
* The fake GPU runs ``lag`` allocations behind the host: an event completes once that many
  more requests have been made since it was recorded (so events on one stream complete in
  order, as on a GPU). ``lag`` 0 is a GPU that keeps up with the host; thousands, a GPU a
  block or more behind (a bigger model).
* ``event_query`` busy-waits ``--query-us`` (default 1 µs, cuda-python's ``cuEventQuery``
  from Python) so the driver's share shows in the time.

It prints, per lag, the step's host ms (median, CPU time of this process), µs per request,
pool searches (requests that missed the exact-size held chunks), ``event_query`` calls per
step and per request, the most frees waiting at once (sampled in
a warm-up step), and the memory reserved at the end (it depends on the order in which
chunks are reused, so a change of policy shows there too). Host time only; the GPU never
enters. Not a test: nothing is asserted (``tests/cuda/test_allocator_pending.py`` tests the
behaviour).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

from genesis_cuda.allocator import CachingAllocator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_host import NullOps  # noqa: E402

COMPUTE, COMM = 0, 7  # stream handles
MiB = 1 << 20
LAYERS, FORWARD_REQUESTS, BACKWARD_REQUESTS = 24, 50, 78
TOKENS, DIM, KV, FFN = 2048, 896, 128, 4864
LAYER_PARAMS = 2 * DIM * DIM + 2 * KV * DIM + 3 * DIM * FFN + DIM + 2 * KV + 2 * DIM
SHARD = LAYER_PARAMS // 2  # elements a rank holds (world of two)
# the activation sizes a block requests, cycled (bf16 hidden and MLP, fp32 statistics,
# q/k/v, the attention's log-sum-exp), bytes
ACTIVATIONS = [TOKENS * DIM * 2, TOKENS * 4, TOKENS * DIM * 2, TOKENS * KV * 2,
               TOKENS * KV * 2, 14 * TOKENS * 4, TOKENS * DIM * 2, TOKENS * DIM * 4,
               TOKENS * FFN * 2, TOKENS * FFN * 2, TOKENS * FFN * 2, TOKENS * DIM * 2]


class LaggingOps(NullOps):
    """``allocator.DriverOps`` on fake addresses whose GPU runs ``lag`` requests behind."""

    def __init__(self, lag: int, query_us: float):
        super().__init__()
        self.lag, self.query_s = lag, query_us * 1e-6
        self.clock = 0  # requests made so far (the host's progress)
        self.queries = 0  # event_query calls
        self.records = 0  # event_record calls: one per stream a freed chunk was used on

    def event_create(self):
        return [0]

    def event_record(self, event, stream):
        self.records += 1
        event[0] = self.clock + self.lag  # completes when the host gets there

    def event_query(self, event):
        self.queries += 1
        end = time.perf_counter() + self.query_s
        while time.perf_counter() < end:  # the driver call's cost
            pass
        return self.clock >= event[0]

    def event_synchronize(self, event):
        self.clock = max(self.clock, event[0])


class ClockedAllocator(CachingAllocator):
    """The caching allocator on ``LaggingOps`` whose every request moves the host's clock
    on by one; ``searches`` counts the requests that searched the pools (missed a held
    chunk; a request may search twice, before and after merging its stream's held chunks).
    """

    def __init__(self, ops: LaggingOps):
        super().__init__(ops, 0, MemoryError)
        self.searches = 0

    def malloc(self, nbytes: int, stream: int | None = None):
        self.ops.clock += 1
        return super().malloc(nbytes, stream)

    def _best_fit(self, size: int, stream: int, small: bool):
        self.searches += 1
        return super()._best_fit(size, stream, small)


class FakeStep:
    """The synthetic FSDP step (module docstring) on one allocator."""

    def __init__(self, alloc: CachingAllocator, ops: LaggingOps):
        self.alloc, self.ops = alloc, ops
        self.grads: list = []  # reduce-scatter outputs: the sharded gradients
        self.sample = False  # sample the frees waiting (in untimed steps)
        self.peak_pending = 0

    def malloc(self, nbytes: int):
        if self.sample:
            pending = self.alloc.stats()["num_pending_frees"]
            self.peak_pending = max(self.peak_pending, pending)
        return self.alloc.malloc(nbytes)

    def all_gather(self):
        source = self.malloc(SHARD * 2)  # local shard cast to bf16
        gathered = self.malloc(2 * SHARD * 2)
        source.record_stream(COMM)
        gathered.record_stream(COMM)
        unsharded = self.malloc(2 * SHARD * 2)  # copy-out
        return unsharded  # source and gathered are freed here (events on COMM)

    def forward(self, saved: list) -> None:
        for _ in range(LAYERS):
            unsharded = self.all_gather()
            kept = []
            for i in range(FORWARD_REQUESTS):
                t = self.malloc(ACTIVATIONS[i % len(ACTIVATIONS)])
                if i % 3 == 0:
                    kept.append(t)  # saved for backward; the others die at once
            saved.append(kept)
            del unsharded  # reshard after forward

    def backward(self, saved: list) -> None:
        in_flight = None  # the packed gradients of the reduction still in flight
        for _ in range(LAYERS):
            unsharded = self.all_gather()
            grads = []
            for i in range(BACKWARD_REQUESTS):
                t = self.malloc(ACTIVATIONS[-1 - i % len(ACTIVATIONS)])
                if i % 8 == 0:
                    grads.append(t)  # parameter gradients, until packed
            saved.pop()
            packed = self.malloc(2 * SHARD * 4)
            del grads
            out = self.malloc(SHARD * 4)
            packed.record_stream(COMM)
            out.record_stream(COMM)
            in_flight = packed  # the previous block's packed buffer is freed (waited for)
            self.grads.append(out)
            del unsharded
        del in_flight

    def step(self) -> None:
        saved: list = []
        self.forward(saved)
        self.backward(saved)
        for _ in range(60):  # clipping and the optimizer's few requests
            self.malloc(SHARD * 4)
        self.grads.clear()  # zero_grad(set_to_none=True)


def run(lag: int, steps: int, query_us: float) -> dict:
    """Host figures of ``steps`` synthetic steps at GPU lag ``lag`` (module docstring)."""
    ops = LaggingOps(lag, query_us)
    alloc = ClockedAllocator(ops)
    alloc.current_stream = COMPUTE
    fake = FakeStep(alloc, ops)
    for sample in (False, True):  # warm-up: segments reserved, sizes held
        fake.sample = sample
        fake.step()
    fake.sample = False
    times, queries, requests, searches = [], [], [], []
    gc.collect()
    gc.disable()
    try:
        for _ in range(steps):
            q0, n0, s0 = ops.queries, alloc.num_allocs, alloc.searches
            t0 = time.process_time()  # this process's CPU time: other work on the machine
            fake.step()  # does not count (the busy-waited queries do)
            times.append(time.process_time() - t0)
            queries.append(ops.queries - q0)
            requests.append(alloc.num_allocs - n0)
            searches.append(alloc.searches - s0)
    finally:
        gc.enable()
    ms = statistics.median(times) * 1e3
    n = statistics.median(requests)
    return {"lag": lag, "host_ms": ms, "us_per_request": ms * 1e3 / n, "requests": n,
            "searches": statistics.median(searches), "queries": statistics.median(queries),
            "queries_per_request": statistics.median(queries) / n,
            "peak_pending": fake.peak_pending, "reserved_gib": alloc.reserved_bytes / 2**30}


def main(argv=None) -> list:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lags", default="0,5,50,500,3000",
                    help="GPU lags to run, in requests (comma-separated)")
    ap.add_argument("--query-us", type=float, default=1.0,
                    help="host µs each event_query costs (busy-waited)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = [run(int(lag), args.steps, args.query_us) for lag in args.lags.split(",")]
    print(f"caching allocator, synthetic FSDP step (0.5B shape, 2 ranks), event_query "
          f"{args.query_us:g} µs; {sys.modules[CachingAllocator.__module__].__file__}")
    print(f"{'lag':>6} {'host ms':>8} {'µs/req':>7} {'requests':>8} {'searches':>8} "
          f"{'queries':>8} {'q/req':>6} {'pending':>7} {'GiB':>6}")
    for r in rows:
        print(f"{r['lag']:>6} {r['host_ms']:>8.2f} {r['us_per_request']:>7.2f} "
              f"{r['requests']:>8.0f} {r['searches']:>8.0f} {r['queries']:>8.0f} "
              f"{r['queries_per_request']:>6.2f} {r['peak_pending']:>7} "
              f"{r['reserved_gib']:>6.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"query_us": args.query_us, "rows": rows},
                                              indent=2))
    return rows


if __name__ == "__main__":
    main()
