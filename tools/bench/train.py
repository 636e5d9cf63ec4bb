"""End-to-end training benchmark: one Qwen-style decoder, run under genesis and torch.

    python tools/bench/train.py [--model 0.2b|qwen2.5-0.5b|tiny] [--batch 8] [--seq 1024]
                                [--steps 20] [--warmup 3] [--frameworks torch,genesis]
                                [--device cuda] [--gpu h200|h100] [--compile] [--profile]
                                [--no-recompute] [--out FILE]

The model is ``decoder.py``'s, written once against a torch-like module ``lib`` (``import
genesis as lib`` or ``import torch as lib``): a Qwen-style decoder written the plain torch way
(separate q/k/v ``Linear``s, RoPE composed with ``cat``, ``F.silu(gate) * up``). Both
frameworks start from the same float32 weights (initialised once with numpy), see the same
random token batches, and train with bf16 autocast, AdamW and ``clip_grad_norm_(1.0)``.

Printed per framework and as genesis/torch ratios:

* tokens/s and step time (median of the timed steps, each synchronised);
* peak device memory (each framework's own allocator; genesis's is not torch's): the peak
  of memory allocated to tensors, and the peak the allocator reserved from the driver. The
  second counts what a CUDA graph's private pool holds between replays (the graph's
  temporaries are free chunks of its pool, not allocated tensors), so it is the fair
  figure when one side replays CUDA graphs;
* MFU: model FLOPs per step / step time / the GPU's dense bf16 peak (``--gpu``,
  ``--peak-tflops``), with ``decoder.flops_per_token``;
* kernel launches per step and summed kernel time vs the step's wall time, from one step run
  under ``torch.profiler`` (its CUDA activity is CUPTI's, which sees every kernel in the
  process: Triton kernels launched by genesis included). ``--profile`` prints the per-kernel
  table;
* host time per kernel launch: the host time of a step up to its last launch returning (the
  step's call, before the synchronise; median of the timed steps) divided by the kernel
  launches of the profiled step — what the eager host path costs per kernel it feeds the GPU
  (n/a on the CPU, where no launch is counted);
* the losses of the first steps side by side (they start from the same weights and data,
  so they agree to bf16 rounding);
* with ``--compile``, each framework trains its compiled model (``genesis.compile(model)``,
  ``torch.compile(model)``; the optimizer step stays eager) and the first step's wall time
  is reported as the compile time (it traces, and for torch generates code). genesis also
  reports what its compiled forward keeps for the backward (``saved_bytes()``);
  ``--no-recompute`` makes it keep everything eager autograd keeps, for an A/B of memory.

``--device cpu --model tiny`` runs everything but the GPU figures on the CPU (a smoke test).
Results go to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decoder import MODELS, PEAK_BF16, ModelConfig, build_model, flops_per_token, init_weights  # noqa: E402
from kernel_profile import profile_step  # noqa: E402


# ------------------------------------------------------------------------ one framework
def _sync(lib, device):
    if device == "cuda":
        lib.cuda.synchronize()


def import_framework(name: str):
    """``genesis`` or ``torch`` with the sub-packages a training step uses."""
    lib = importlib.import_module(name)
    for sub in ("nn", "nn.functional", "nn.utils", "optim"):
        importlib.import_module(f"{name}.{sub}")  # genesis adds these as separate packages
    return lib


def load_model(lib, cfg: ModelConfig, weights: dict, seq: int, device: str):
    """The decoder under ``lib`` with ``weights`` (from ``init_weights``), on ``device``."""
    model = build_model(lib, cfg, seq)
    model.load_state_dict({k: lib.from_numpy(v.copy()) for k, v in weights.items()})
    model.to(device)
    return model


def training_step(lib, model, opt, params: list, data: list, amp):
    """``step(i)``: forward on batch ``i`` (cycling through ``data``) under ``amp``,
    backward, ``clip_grad_norm_(1.0)``, the optimizer step; returns the loss tensor."""

    def step(i):
        x, y = data[i % len(data)]
        with amp:
            loss = model(x, y)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def timed_steps(lib, device: str, step, first: int, count: int) -> tuple[list, list, list]:
    """Wall seconds of steps ``first .. first + count - 1``, each synchronised; their host
    seconds (until the step's call returns, its last launch issued, before the synchronise);
    and their losses."""
    times, host_times, losses = [], [], []
    for i in range(first, first + count):
        _sync(lib, device)
        t0 = time.perf_counter()
        loss = step(i)
        host_times.append(time.perf_counter() - t0)
        _sync(lib, device)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.item()))
    return times, host_times, losses


def make_batches(cfg: ModelConfig, batch: int, seq: int, seed: int, count: int = 4) -> list:
    """``count`` random (tokens, next tokens) int64 batches of ``batch`` x ``seq``, as numpy,
    drawn from ``numpy.random.default_rng(seed + 1)``."""
    rng = np.random.default_rng(seed + 1)
    batches = []
    for _ in range(count):
        tok = rng.integers(0, cfg.vocab, (batch, seq + 1), dtype=np.int64)
        batches.append((np.ascontiguousarray(tok[:, :-1]), np.ascontiguousarray(tok[:, 1:])))
    return batches


def setup_framework(name: str, cfg: ModelConfig, weights: dict, batches: list, args,
                    capturable: bool = False) -> tuple:
    """``(lib, model, opt, params, data, amp)`` for framework ``name``: seeded, the decoder
    with ``weights`` on ``args.device``, AdamW over its parameters (``capturable``: its step
    count kept on the device, as a captured step needs), the batches on the device and the
    bf16 autocast context (off with ``args.no_autocast``)."""
    lib = import_framework(name)
    device = args.device
    lib.manual_seed(args.seed)
    model = load_model(lib, cfg, weights, args.seq, device)
    opt = lib.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1,
                          **({"capturable": True} if capturable else {}))
    data = [(lib.from_numpy(x).to(device), lib.from_numpy(y).to(device)) for x, y in batches]
    amp = lib.autocast(device, dtype=lib.bfloat16, enabled=not args.no_autocast)
    return lib, model, opt, list(model.parameters()), data, amp


def run_framework(name: str, cfg: ModelConfig, weights: dict, batches: list, args) -> tuple:
    """Train ``args.warmup + args.steps`` steps under framework ``name``; return its figures
    and ``profile()``, which runs one more step under the profiler (``profile_step``)."""
    device = args.device
    graphed = args.graph and name == "genesis" and device == "cuda"
    lib, model, opt, params, data, amp = setup_framework(name, cfg, weights, batches, args,
                                                         capturable=graphed)
    # (--no-recompute: genesis's compiled forward keeps all eager autograd keeps, for an A/B)
    kw = {"options": {"recompute": False}} if args.no_recompute and name == "genesis" else {}
    run_model = lib.compile(model, **kw) if args.compile else model  # (shares the parameters)
    step = training_step(lib, run_model, opt, params, data, amp)
    report = args.memory_report and name == "genesis" and device == "cuda"
    if report:
        lib.cuda.record_memory_history(max_frames=16)
    _sync(lib, device)
    t0 = time.perf_counter()
    losses = [float(step(0).item())]
    first_step_s = time.perf_counter() - t0  # with --compile: tracing and code generation
    losses += [float(step(i).item()) for i in range(1, args.warmup)]
    if graphed:
        step = _graphed_step(lib, model, opt, params, data, amp)
    if device == "cuda":
        lib.cuda.reset_peak_memory_stats()
    times, host_times, timed_losses = timed_steps(lib, device, step, args.warmup, args.steps)
    losses += timed_losses
    step_s = statistics.median(times)
    tokens = args.batch * args.seq
    res = {"framework": name, "compiled": args.compile, "step_ms": step_s * 1e3,
           "tok_per_s": tokens / step_s, "host_ms": statistics.median(host_times) * 1e3,
           "first_step_s": first_step_s, "losses": losses}
    res["mfu"] = (flops_per_token(cfg, args.seq) * tokens / step_s / args.peak) \
        if device == "cuda" else None
    res["peak_mem_gib"] = lib.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    res["peak_reserved_gib"] = (lib.cuda.max_memory_reserved() / 2**30 if device == "cuda"
                                else None)
    if args.compile and name == "genesis":  # what each compiled region keeps for backward
        res["saved_for_backward"] = [str(r) for r in run_model.saved_bytes()]
    if report:  # (the record restarted at reset_peak_memory_stats: its peak is the timed one)
        res["memory_report"] = [lib.cuda.memory_history_report(top=args.memory_report, frames=10,
                                                               at=at) for at in ("peak", "now")]
        lib.cuda.record_memory_history(enabled=False)
    return res, lambda: profile_step(lambda: step(args.warmup + args.steps), device, args.profile)


def _graphed_step(lib, model, opt, params, data, amp):
    """The whole step (forward, backward, gradient clipping and the capturable AdamW step)
    captured as one CUDA graph, in torch's whole-network capture pattern: static inputs,
    gradients allocated inside the capture and rewritten by every replay, optimizer state
    made by the eager warm-up steps; each step is then two input copies and one replay."""
    static_x, static_y = (t.clone() for t in data[0])
    opt.zero_grad(set_to_none=True)
    graph = lib.cuda.CUDAGraph()
    with lib.cuda.graph(graph):
        with amp:
            static_loss = model(static_x, static_y)
        static_loss.backward()
        lib.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    def step(i):
        x, y = data[i % len(data)]
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        return static_loss

    return step


# ------------------------------------------------------------------------ driver
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="0.2b")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--frameworks", default="torch,genesis",
                    help="comma-separated, run in this order")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--gpu", choices=sorted(PEAK_BF16), default="h200",
                    help="GPU whose dense bf16 peak the MFU is taken against")
    ap.add_argument("--peak-tflops", type=float, default=None, help="overrides --gpu")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-autocast", action="store_true", help="train in float32")
    ap.add_argument("--profile", action="store_true", help="print the per-kernel table")
    ap.add_argument("--graph", action="store_true",
                    help="genesis on CUDA: capture the whole step (forward, backward, clip, "
                         "capturable AdamW) as a CUDA graph after the warm-up and replay it")
    ap.add_argument("--compile", action="store_true",
                    help="train genesis.compile(model) / torch.compile(model); the first "
                         "step's time is reported as the compile time")
    ap.add_argument("--no-recompute", action="store_true",
                    help="with --compile: genesis's compiled forward keeps every intermediate "
                         "eager autograd keeps (options={'recompute': False}), for an A/B")
    ap.add_argument("--memory-report", type=int, default=0, metavar="N",
                    help="genesis on CUDA: record every allocation's Python stack from the "
                         "first step on and print the N largest allocating stacks of the "
                         "memory alive at the timed steps' peak and after them (a "
                         "diagnosis: the stack walks slow the host, so times don't compare)")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    if args.no_recompute and not args.compile:
        ap.error("--no-recompute is an option of --compile")
    if args.compile and args.graph:
        ap.error("--compile and --graph are two ways of replaying the step: choose one")
    if args.warmup < 1:  # (--graph also needs the optimizer state an eager step makes)
        ap.error("--warmup must be >= 1: the first step is reported as the compile time")
    args.peak = args.peak_tflops * 1e12 if args.peak_tflops else PEAK_BF16[args.gpu]
    return args


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def main(argv=None) -> dict:
    args = parse_args(argv)
    cfg = MODELS[args.model]
    batches = make_batches(cfg, args.batch, args.seq, args.seed)
    weights = init_weights(cfg, args.seq, args.seed)
    n_params = sum(w.size for w in weights.values())
    print(f"model {args.model}: {n_params / 1e6:.1f}M parameters {asdict(cfg)}; batch "
          f"{args.batch} x {args.seq}; {args.device}; bf16 autocast "
          f"{'off' if args.no_autocast else 'on'}{'; compiled' if args.compile else ''}",
          flush=True)
    results, profilers = {}, {}
    for name in args.frameworks.split(","):
        print(f"-- {name}", flush=True)
        r, profilers[name] = run_framework(name, cfg, weights, batches, args)
        results[name] = r
        print(f"  step {r['step_ms']:.1f} ms  {r['tok_per_s']:,.0f} tok/s  "
              f"MFU {_fmt(r['mfu'] and 100 * r['mfu'], '.1f')}%  "
              f"peak {_fmt(r['peak_mem_gib'], '.2f')} GiB "
              f"(reserved {_fmt(r['peak_reserved_gib'], '.2f')})  "
              f"first step {r['first_step_s']:.2f} s"
              f"{' (compile)' if args.compile else ''}", flush=True)
        for line in r.get("saved_for_backward", ()):
            print(f"  {line}", flush=True)
        for text in r.get("memory_report", ()):
            print(text, flush=True)
        if name == "torch" and args.device == "cuda":
            import torch

            torch.cuda.empty_cache()
    # Every framework is timed before any is profiled: the profiler leaves CUPTI attached to
    # the process, and every later kernel launch pays for it (genesis's 0.2B step: 52.9 ms,
    # then 77.7 ms after one profiled step, in one process on one H100 machine).
    for name, profile in profilers.items():
        r = results[name]
        r.update(profile())
        r["host_us_per_launch"] = host_us_per_launch(r["host_ms"], r["launches"])
        if r["launches"] is not None:
            print(f"-- {name}, one step under the profiler: launches/step "
                  f"{r['launches']}  kernel {r['kernel_ms']:.1f} ms of "
                  f"{r['profiled_wall_ms']:.1f} ms wall", flush=True)
        print(f"-- {name}: host {r['host_ms']:.1f} ms/step until its last launch returns, "
              f"{_fmt(r['host_us_per_launch'], '.2f')} µs per kernel launch", flush=True)
    doc = {"model": args.model, "compile": args.compile, "config": asdict(cfg),
           "params": int(n_params),
           "batch": args.batch, "seq": args.seq, "device": args.device,
           "peak_flops": args.peak, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "results": results}
    if args.device == "cuda":
        import torch

        doc["gpu_name"] = torch.cuda.get_device_name(0)
    if "torch" in results and "genesis" in results:
        doc["ratios"] = report_ratios(results["genesis"], results["torch"])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
    return doc


def host_us_per_launch(host_ms: float, launches: int | None) -> float | None:
    """Host µs of a step (until its last launch returns) per kernel it launched; None when
    no launch was counted (the CPU).

    Example:
        >>> host_us_per_launch(12.0, 1500)
        8.0
    """
    return host_ms * 1e3 / launches if launches else None


def report_ratios(g: dict, t: dict) -> dict:
    """Print and return the genesis/torch ratios and the first losses side by side."""
    ratios = {}
    for key in ("tok_per_s", "step_ms", "host_ms", "peak_mem_gib", "peak_reserved_gib",
                "first_step_s", "launches",
                "kernel_ms", "host_us_per_launch"):
        if g[key] is not None and t[key]:
            ratios[key] = g[key] / t[key]
    print("genesis / torch: " + "  ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    n = min(len(g["losses"]), len(t["losses"]), 8)
    diffs = [abs(a - b) for a, b in zip(g["losses"][:n], t["losses"][:n])]
    print("loss  step: " + " ".join(f"{i:>8d}" for i in range(n)))
    print("     torch: " + " ".join(f"{v:8.4f}" for v in t["losses"][:n]))
    print("   genesis: " + " ".join(f"{v:8.4f}" for v in g["losses"][:n]))
    ratios["max_loss_diff"] = max(diffs) if diffs else None
    print(f"max |loss difference| over the first {n} steps: {_fmt(ratios['max_loss_diff'], '.4g')}")
    if any(math.isnan(v) for v in g["losses"] + t["losses"]):
        print("warning: NaN loss", file=sys.stderr)
    return ratios


if __name__ == "__main__":
    main()
