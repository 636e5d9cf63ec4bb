"""Host time of genesis's CUDA training step with no GPU: the device is replaced by nothing.

    python tools/bench/cuda_host.py [--model tiny|0.2b] [--batch 8] [--seq 1024] [--steps 10]
                                    [--autocast] [--profile] [--top 40] [--instructions]
                                    [--json PATH]

Eager genesis on a GPU is host-bound: the Python path around each launch (op wrappers,
autograd, dispatch, launch planning, the caching allocator, Triton's launcher) decides the
step time. This tool runs that whole path on a machine without a GPU: genesis_cuda is set up
on a *null device* (one device whose driver calls do nothing, the real caching allocator on
fake addresses, and Triton launches that compile nothing and run nothing: the first call of
a kernel returns a stand-in compiled kernel whose launcher does nothing). Everything else is
the code a GPU run executes, so the figures show where the host microseconds go:

* per phase (forward, backward, clip, optimizer step, zero_grad): median host ms over
  ``--steps`` steps with the garbage collector paused, launches per phase, host µs per
  launch;
* launches that took Triton's own JIT path (``kernel[grid](...)``: argument binding and a
  specialisation key per call, ~8 µs on the GPU machine's host), which this tool replaces
  by a null call, so their real cost is *not* in the figures; listed so they can be moved
  to the direct launch path.

The model is ``tools/bench/decoder.py``'s model (same shapes for ``--model 0.2b``), with
randomly initialised weights (no values are ever computed). Kernel time, values and memory
use are not measured: that needs the GPU (``train.py``). ``--profile`` prints a cProfile of
the steps.

``--instructions`` counts machine instructions instead of time: the script runs itself
under valgrind's callgrind, which writes its counts to a new file each time ``os.getppid``
is entered; the child brackets every timed phase with that call, and each phase's figure is
the least of its ``--steps`` counts (``cuda_host_instructions.py``). A host time on a shared
machine moves by tens of per cent from run to run; an instruction count by 1 to 3 %, so two
trees compare in one call each (about four minutes for ``--model 0.2b --steps 2``).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_host_instructions import count_instructions, run_bracketed  # noqa: E402
from decoder import MODELS, build_model  # noqa: E402

PHASES = ("forward", "backward", "clip", "step", "zero_grad")


class NullOps:
    """``allocator.DriverOps`` handing out fake addresses (nothing is ever read or written)."""

    def __init__(self):
        self.next_ptr = 1 << 40

    def malloc(self, nbytes):
        ptr = self.next_ptr
        self.next_ptr += (nbytes + (1 << 21)) & ~511  # segments never adjacent, 512-aligned
        return ptr

    def free(self, ptr):
        pass

    def mem_info(self):
        return 1 << 40, 1 << 40

    def event_create(self):
        return object()

    def event_record(self, event, stream):
        pass

    def event_query(self, event):
        return True

    def event_synchronize(self, event):
        pass

    def synchronize(self):
        pass


class _Counts:
    direct = 0  # launches through a cached compiled kernel (genesis's direct path)
    jit: Counter = Counter()  # launches through Triton's JIT path, by kernel name


class _Compiled:
    """What Triton's JIT returns for a compiled kernel: here a launcher that does nothing."""

    function = None
    packed_metadata = None

    @staticmethod
    def run(*args):
        _Counts.direct += 1


class _NullDriverModule:
    """The few ``cuda.bindings.driver`` calls genesis makes outside the kernels: succeed."""

    def __getattr__(self, name):
        def call(*args, **kwargs):
            # a device allocation outside the caching allocator (the index-error word) gets
            # a fake address; everything else just succeeds
            return (0, 1 << 40) if name == "cuMemAlloc" else (0,)

        return call


class _NullTritonDriver:
    """Triton's active driver as genesis's kernels query it."""

    class utils:  # noqa: N801 - Triton's attribute name
        @staticmethod
        def get_device_properties(index):
            return {"multiprocessor_count": 132, "max_shared_mem": 232448}

    def get_current_stream(self, device=None):
        return 0

    def get_current_device(self):
        return 0

    def get_device_capability(self, device=None):
        return (9, 0)


def install_null_device() -> None:
    """Point genesis_cuda at the null device (call before any CUDA tensor is made)."""
    from triton.runtime import driver as triton_driver
    from triton.runtime.jit import JITFunction

    from genesis.cuda import OutOfMemoryError
    from genesis_cuda import device, driver, memory, transfer, triton_hooks
    from genesis_cuda.allocator import CachingAllocator
    from genesis_cuda.array import empty
    from genesis_cuda.kernels import matmul_tuning

    driver._cu, driver._count = _NullDriverModule(), 1
    driver._contexts[0] = object()
    driver._tls.device = 0
    device._initialized.add(0)
    # what the kernels' planning asks of the device (an H100's figures)
    device._props[0] = device.DeviceProperties(
        name="null device", major=9, minor=0, total_memory=80 << 30, multi_processor_count=132,
        l2_cache_size=50 << 20, max_threads_per_multi_processor=2048, warp_size=32,
        regs_per_multiprocessor=65536, shared_memory_per_block_optin=232448,
        clock_rate_khz=1_980_000, memory_clock_rate_khz=2_619_000, memory_bus_width=5120)
    memory._allocators[0] = CachingAllocator(NullOps(), 0, OutOfMemoryError)
    triton_hooks._installed = True
    triton_driver.set_active(_NullTritonDriver())

    def from_numpy(data, index):
        from genesis_cuda.transfer import genesis_dtype_of_numpy

        data = np.asarray(data)
        return empty(tuple(data.shape), genesis_dtype_of_numpy(data.dtype), index)

    transfer.from_numpy = from_numpy
    transfer.to_numpy = lambda a: np.zeros(a.shape, transfer._TO_NUMPY.get(a.dtype, np.float32))
    transfer.item = lambda a: 0.0 if a.dtype.is_floating_point else 0
    # the matmul autotuner's GPU timing: every candidate takes the same time (the first wins)
    matmul_tuning._seconds_per_call = lambda launch, reps: 1.0

    def run(self, *args, grid=None, warmup=False, **kwargs):
        _Counts.jit[self.__name__] += 1
        return _Compiled

    JITFunction.run = run


def _setup(cfg, args):
    """The step's phases (a list of (name, callable)) of genesis on the null device."""
    import genesis
    import genesis.nn
    import genesis.nn.functional  # noqa: F401
    import genesis.nn.utils  # noqa: F401
    import genesis.optim

    genesis.manual_seed(0)
    model = build_model(genesis, cfg, args.seq).to("cuda")
    params = list(model.parameters())
    opt = genesis.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, cfg.vocab, size=(args.batch, args.seq + 1))
    x = genesis.from_numpy(tokens[:, :-1].copy()).to("cuda")
    y = genesis.from_numpy(tokens[:, 1:].copy()).to("cuda")
    amp = genesis.autocast("cuda", dtype=genesis.bfloat16, enabled=args.autocast)
    state = {}

    def forward():
        with amp:
            state["loss"] = model(x, y)

    return [
        ("forward", forward),
        ("backward", lambda: state.pop("loss").backward()),
        ("clip", lambda: genesis.nn.utils.clip_grad_norm_(params, 1.0)),
        ("step", opt.step),
        ("zero_grad", lambda: opt.zero_grad(set_to_none=True)),
    ]


def warm_up(phases) -> None:
    """Three steps: optimizer state, plan caches and the matmul autotuner are made."""
    for _ in range(3):
        for _, fn in phases:
            fn()


def launches(fn) -> tuple[int, Counter]:
    """Run ``fn`` once: the launches it made through the direct path, and through Triton's
    JIT path by kernel name."""
    d0, j0 = _Counts.direct, Counter(_Counts.jit)
    fn()
    return _Counts.direct - d0, _Counts.jit - j0


def measure(phases, steps: int, clock=time.process_time) -> dict:
    """Median host µs, launches and JIT-path launches per phase. The default clock is this
    process's CPU time: on a machine shared with other work it counts only our own cycles
    (``time.perf_counter`` for wall time)."""
    warm_up(phases)
    counts = {ph: launches(fn) for ph, fn in phases}
    times: dict = {ph: [] for ph, _ in phases}
    gc.collect()
    gc.disable()
    try:
        for _ in range(steps):
            for ph, fn in phases:
                t0 = clock()
                fn()
                times[ph].append((clock() - t0) * 1e6)
    finally:
        gc.enable()
    return {ph: {"us": statistics.median(times[ph]),
                 "launches": counts[ph][0] + sum(counts[ph][1].values()),
                 "jit_launches": dict(counts[ph][1])} for ph, _ in phases}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="tiny")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--autocast", action="store_true", help="bf16 autocast on (default off)")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of the steps")
    ap.add_argument("--top", type=int, default=40, help="rows of the --profile table")
    ap.add_argument("--wall", action="store_true",
                    help="time with the wall clock (default: this process's CPU time)")
    ap.add_argument("--instructions", action="store_true",
                    help="count machine instructions under valgrind's callgrind, not time")
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.instructions and not args.child:
        out = count_instructions(__file__, args)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2))
        return out
    install_null_device()
    cfg = MODELS[args.model]
    phases = _setup(cfg, args)
    if args.child:  # (run by --instructions under callgrind)
        warm_up(phases)
        counts = {ph: launches(fn) for ph, fn in phases}
        run_bracketed(phases, args.steps, args.child,
                      {ph: n + sum(jit.values()) for ph, (n, jit) in counts.items()})
        return {}
    if args.profile:
        warm_up(phases)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.steps):
            for _, fn in phases:
                fn()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
        return {}
    res = measure(phases, args.steps, time.perf_counter if args.wall else time.process_time)
    print(f"genesis on a null CUDA device: {args.model} decoder, batch {args.batch} x "
          f"{args.seq}, autocast {'bf16' if args.autocast else 'off'}; host "
          f"{'wall' if args.wall else 'CPU'} time, medians of {args.steps} steps")
    print(f"{'phase':<10} {'host ms':>8} {'launches':>8} {'µs/launch':>9} {'via JIT':>7}")
    total_us = total_n = total_jit = 0
    for ph in PHASES:
        r = res[ph]
        jit = sum(r["jit_launches"].values())
        total_us, total_n, total_jit = total_us + r["us"], total_n + r["launches"], \
            total_jit + jit
        per = r["us"] / r["launches"] if r["launches"] else float("nan")
        print(f"{ph:<10} {r['us'] / 1e3:>8.2f} {r['launches']:>8} {per:>9.1f} {jit:>7}")
    print(f"{'total':<10} {total_us / 1e3:>8.2f} {total_n:>8} "
          f"{total_us / max(total_n, 1):>9.1f} {total_jit:>7}")
    jit_names = Counter()
    for ph in PHASES:
        jit_names.update(res[ph]["jit_launches"])
    if jit_names:
        print("launches through Triton's JIT path per step (not timed here): "
              + ", ".join(f"{k} {v}" for k, v in jit_names.most_common()))
    out = {"model": args.model, "batch": args.batch, "seq": args.seq,
           "autocast": args.autocast, "phases": res}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
