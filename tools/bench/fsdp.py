"""FSDP benchmark: genesis ``fully_shard`` beside torch FSDP2, same model, same run.

The model is ``tools/bench/decoder.py``'s model (``--model``; default the Qwen2.5-7B shape,
which this file adds: 7.6 B parameters). Each framework builds it without initialising it
(on the host, untouched memory), moves and shards it block by block (``fully_shard`` on
every layer, then the root), then fills its shards with the same random values (a seeded
torch generator per parameter, ``N(0, 0.02)`` matrices, unit norms, zero biases), so both
frameworks train the same weights on the same batches:

- mixed precision: bf16 parameters for compute, gradients reduced in fp32, fp32 shards and
  AdamW (``fused``) state; ``clip_grad_norm_(1.0)``; ``--batch`` x ``--seq`` tokens a rank
  (default 1 x 2048), each rank its own tokens;
- ``--frameworks genesis,torch,genesis-ddp``: also genesis DDP on the same model and batches
  (float32 replicas under bf16 autocast), for FSDP's tokens/s against DDP's;
- median step time of ``--steps`` synchronised steps after ``--warmup`` untimed ones;
  tokens/s over all ranks; MFU (``decoder.flops_per_token``, per GPU, against ``--gpu``'s dense
  bf16 peak); each framework's peak memory per GPU (its own allocator).

Usage (GPU machine, repository root):

    torchrun --nproc_per_node=2 tools/bench/fsdp.py                       # 7B shape, 2 GPUs
    torchrun --nproc_per_node=2 tools/bench/fsdp.py --model qwen2.5-0.5b
    python tools/bench/fsdp.py --model qwen2.5-0.5b                       # one GPU, world 1
    torchrun --nproc_per_node=2 tools/bench/fsdp.py --model qwen2.5-0.5b \
        --frameworks genesis,torch,genesis-ddp --out docs/bench/fsdp_0.5b.json
    python tools/bench/fsdp.py --device cpu --model tiny --steps 1        # CPU smoke test
    python tools/bench/fsdp.py --device cpu --model narrow-0.5b --seq 16 \
        --frameworks genesis,genesis-ddp --profile 25                    # host cost, CPU

``narrow-0.5b`` is the 0.5B shape's 24 blocks and parameter list at width 64: compute is
negligible, so the step's time is the host path, FSDP's per-block and per-parameter work
beside DDP's. ``--profile N`` adds, per framework, the median host ms of each phase
(forward, backward, clipping, optimizer step) over ``--steps`` more steps, then rank 0's
cProfile of as many more: the top ``N`` functions by own time, and genesis.distributed's
top ``N`` (its hooks and collectives) by time including callees.

Rank 0 prints a table and writes JSON (default docs/bench/fsdp.json).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import platform
import statistics
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp  # noqa: E402 - setup(): both frameworks' worlds through one store
import decoder  # noqa: E402 - the model and its FLOP count
import train  # noqa: E402 - the step and timing helpers

MODELS = {
    **decoder.MODELS,
    "qwen2.5-7b": decoder.ModelConfig(vocab=152064, dim=3584, layers=28, q_heads=28,
                                      kv_heads=4, head_dim=128, ffn=18944, tied=False,
                                      qkv_bias=True, rope_theta=1000000.0),
    # the 0.5B shape's 24 blocks and parameter list at a width where compute is negligible:
    # FSDP's per-block, per-parameter host cost, measurable on the CPU (--device cpu)
    "narrow-0.5b": decoder.ModelConfig(vocab=256, dim=64, layers=24, q_heads=4, kv_heads=2,
                                       head_dim=16, ffn=160, tied=True, qkv_bias=True,
                                       rope_theta=1000000.0),
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="qwen2.5-7b")
    p.add_argument("--batch", type=int, default=1, help="sequences per rank")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--frameworks", default="genesis,torch",
                   help="run in this order: genesis, torch (fully sharded), genesis-ddp, "
                        "torch-ddp (replicas, bf16 autocast)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--gpu", choices=sorted(decoder.PEAK_BF16), default="h200")
    p.add_argument("--no-reshard-after-forward", action="store_true",
                   help="keep each block gathered from forward to backward")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="also time each phase's host ms and print rank 0's cProfile of "
                        "--steps more steps (top N functions)")
    p.add_argument("--memory-report", type=int, default=0, metavar="N",
                   help="genesis on CUDA: during the per-phase step, record every allocation's "
                        "stack and print (rank 0) the N largest allocating stacks alive at the "
                        "forward's and the backward's peak")
    p.add_argument("--out", default="docs/bench/fsdp.json")
    return p.parse_args(argv)


@contextlib.contextmanager
def uninitialised(lib):
    """Build modules without running their initialisers (the shards are filled later)."""
    init = lib.nn.init
    names = [n for n in vars(init) if n.endswith("_") and not n.startswith("_")]
    saved = {n: getattr(init, n) for n in names}
    try:
        for n in names:
            setattr(init, n, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for n, fn in saved.items():
            setattr(init, n, fn)


def reference_value(name: str, shape: tuple, device: str):
    """The value every framework gives parameter ``name``: a torch tensor made on
    ``device`` by a generator seeded from the name."""
    import torch

    if name.endswith("norm.weight"):
        return torch.ones(shape, device=device)
    if name.endswith(".bias"):
        return torch.zeros(shape, device=device)
    gen = torch.Generator(device=device).manual_seed(zlib.crc32(name.encode()))
    return torch.randn(shape, generator=gen, device=device) * 0.02


def _owned_rows(rows: int, world: int, rank: int) -> tuple[int, int]:
    chunk = -(-rows // world)  # torch's Shard(0) and genesis split alike
    first = min(rank * chunk, rows)
    return first, min(first + chunk, rows)


def _fill(lib, framework: str, model, device: str) -> None:
    """Give every parameter (or this rank's shard of it) its ``reference_value``."""
    import torch

    world, rank = torch.distributed.get_world_size(), torch.distributed.get_rank()
    for pname, p in model.named_parameters():
        sharded = hasattr(p, "to_local")
        shape = tuple(p.global_shape if framework == "genesis" and sharded else p.shape)
        first, stop = _owned_rows(shape[0] if shape else 1, world, rank) if sharded else \
            (0, shape[0] if shape else 1)
        value = reference_value(pname, shape, device).reshape(-1, *shape[1:])[first:stop]
        if device == "cuda":
            torch.cuda.synchronize()  # the value is made on torch's stream
        with lib.no_grad():
            local = p.to_local() if sharded else p
            if framework == "genesis":
                local.copy_(lib.from_dlpack(value.contiguous()).reshape(local.shape))
                if device == "cuda":
                    lib.cuda.synchronize()  # before torch may reuse the value's memory
            else:
                local.copy_(value.reshape(local.shape))


def build(name: str, cfg, seq: int, device: str, reshard: bool, fill: bool = True):
    """``(lib, model to call, its parameters, autocast context)`` for ``name``: ``genesis``
    and ``torch`` shard the decoder block by block (bf16 parameters, fp32 reduction);
    ``genesis-ddp`` and ``torch-ddp`` replicate it (fp32 weights, bf16 autocast). ``fill``
    off leaves the weights uninitialised (``fsdp_host.py``'s null device computes nothing)."""
    import torch

    framework, _, mode = name.partition("-")
    lib = train.import_framework(framework)
    with uninitialised(lib):
        model = decoder.build_model(lib, cfg, seq)
    if mode == "ddp":
        model.to(device)
        if fill:
            _fill(lib, framework, model, device)
        if framework == "genesis":
            import genesis.distributed as dist

            wrapped = dist.DistributedDataParallel(model)
        else:
            ids = [torch.cuda.current_device()] if device == "cuda" else None
            wrapped = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
        return lib, wrapped, list(model.parameters()), lib.autocast(device, dtype=lib.bfloat16)
    if framework == "genesis":
        from genesis.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=lib.bfloat16, reduce_dtype=lib.float32)
    else:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        layer.to(device)
        fully_shard(layer, mp_policy=policy, reshard_after_forward=reshard)
    for child_name, child in model.named_children():
        if child_name != "layers":
            child.to(device)
    for buf_name, buf in list(model.named_buffers(recurse=False)):
        setattr(model, buf_name, buf.to(device))
    fully_shard(model, mp_policy=policy)
    if fill:
        _fill(lib, framework, model, device)
    return lib, model, list(model.parameters()), contextlib.nullcontext()


def run_framework(name: str, cfg, batches: list, args, where) -> dict:
    """Build, warm up and time one framework; its figures."""
    lib, model, params, amp = build(name, cfg, args.seq, args.device,
                                    not args.no_reshard_after_forward)
    # (fused: the multi-tensor step on the CPU too, the path the GPU run takes)
    opt = lib.optim.AdamW(params, lr=1e-4, weight_decay=0.1, fused=True)
    data = [(lib.from_numpy(x.copy()).to(args.device), lib.from_numpy(y.copy()).to(args.device))
            for x, y in batches]
    step = train.training_step(lib, model, opt, params, data, amp)
    losses = [float(step(i).item()) for i in range(args.warmup)]
    if args.device == "cuda":
        lib.cuda.reset_peak_memory_stats()
    times, host, timed = train.timed_steps(lib, args.device, step, args.warmup, args.steps)
    step_s = statistics.median(times)
    tokens = where.world_size * args.batch * args.seq
    tok_s = tokens / step_s
    flops = decoder.flops_per_token(cfg, args.seq)
    result = {
        "step_ms": step_s * 1e3, "tok_per_s": tok_s,
        "mfu": (tok_s / where.world_size * flops / decoder.PEAK_BF16[args.gpu]
                if args.device == "cuda" else None),
        "peak_mem_gib": (lib.cuda.max_memory_allocated() / 2**30
                         if args.device == "cuda" else None),
        "host_ms": statistics.median(host) * 1e3,
        "losses": losses + timed,
        "local_params": sum((p.to_local() if hasattr(p, "to_local") else p).numel()
                            for p in params),
    }
    if args.device == "cuda":
        report = args.memory_report if name.startswith("genesis") else 0
        result["phase_gib"] = phase_memory(lib, model, opt, params, data[0], amp, report)
    if args.profile:
        result["phase_host_ms"] = phase_host(lib, args.device, model, opt, params, data, amp,
                                             args.steps, args.profile, where.rank == 0)
    del model, opt, params, data, step
    gc.collect()  # (sharded modules and their hooks form cycles)
    if args.device == "cuda":
        lib.cuda.empty_cache()  # the next framework gets the memory back
    return result


def phase_memory(lib, model, opt, params, batch, amp, report: int = 0) -> dict:
    """One more step split into forward, backward, clipping and the optimizer step: for
    each phase the peak and the end allocation (GiB), and the allocation before it starts,
    to show which phase sets the step's peak and what it holds. With ``report`` (genesis),
    the forward and the backward also get the ``report`` largest allocating stacks of the
    memory alive at their peaks (``genesis.cuda.memory_history_report``)."""
    x, y = batch
    phases = {}
    if report:
        lib.cuda.record_memory_history()

    def mark(name):
        lib.cuda.synchronize()
        phases[name] = {"peak": lib.cuda.max_memory_allocated() / 2**30,
                        "end": lib.cuda.memory_allocated() / 2**30}
        if report and name in ("forward", "backward"):
            phases[name]["report"] = lib.cuda.memory_history_report(top=report, frames=8)
        lib.cuda.reset_peak_memory_stats()  # (and restarts the record)

    mark("before")
    with amp:
        loss = model(x, y)
    mark("forward")
    loss.backward()
    mark("backward")
    lib.nn.utils.clip_grad_norm_(params, 1.0)
    mark("clip")
    opt.step()
    opt.zero_grad(set_to_none=True)
    mark("optimizer")
    if report:
        lib.cuda.record_memory_history(enabled=False)
    return phases


def phase_host(lib, device: str, model, opt, params, data, amp, steps: int, top: int,
               show: bool) -> dict:
    """Median host ms of each phase (until its Python returns) over ``steps`` more steps,
    the garbage collector paused; then ``steps`` more under cProfile, whose ``top``
    functions by own time are printed where ``show`` (every rank runs them alike)."""
    import cProfile
    import pstats

    names = ("forward", "backward", "clip", "optimizer")
    times = {n: [] for n in names}

    def one_step(i):
        x, y = data[i % len(data)]
        train._sync(lib, device)
        t = [time.perf_counter()]
        with amp:
            loss = model(x, y)
        t.append(time.perf_counter())
        loss.backward()
        t.append(time.perf_counter())
        lib.nn.utils.clip_grad_norm_(params, 1.0)
        t.append(time.perf_counter())
        opt.step()
        opt.zero_grad(set_to_none=True)
        t.append(time.perf_counter())
        train._sync(lib, device)
        return [(b - a) * 1e3 for a, b in zip(t, t[1:])]

    gc.collect()
    gc.disable()
    try:
        for i in range(steps):
            for n, ms in zip(names, one_step(i)):
                times[n].append(ms)
        prof = cProfile.Profile()
        for i in range(steps):
            prof.enable()
            one_step(i)
            prof.disable()
    finally:
        gc.enable()
    if show:
        stats = pstats.Stats(prof)
        stats.sort_stats("tottime").print_stats(top)
        # the hooks and collectives of genesis.distributed (FSDP's, DDP's), time included
        stats.sort_stats("cumulative").print_stats("genesis/distributed/", top)
    return {n: statistics.median(v) for n, v in times.items()}


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def main(argv=None) -> dict:
    args = parse_args(argv)
    _, dist, _, tdist, where = ddp.setup(args.device)
    cfg = MODELS[args.model]
    batches = train.make_batches(cfg, args.batch, args.seq, where.rank, count=3)  # per rank
    if where.rank == 0:
        print(f"FSDP training, {args.model}, {where.world_size} rank(s) x {args.batch} x "
              f"{args.seq} tokens, bf16 params / fp32 reduce, AdamW, {args.device}",
              flush=True)
    results = {}
    for name in args.frameworks.split(","):  # each line printed as it is measured
        r = results[name] = run_framework(name, cfg, batches, args, where)
        if where.rank == 0:
            print(f"  {name:11s} {r['step_ms']:8.1f} ms/step {r['tok_per_s']:10,.0f} tok/s  "
                  f"MFU {_fmt(r['mfu'] and 100 * r['mfu'], '.1f')}%  peak "
                  f"{_fmt(r['peak_mem_gib'], '.2f')} GiB/GPU  loss {r['losses'][0]:.4f} -> "
                  f"{r['losses'][-1]:.4f}  host {r['host_ms']:.1f} ms", flush=True)
            if r.get("phase_host_ms"):
                print("              host ms: " + "  ".join(
                    f"{k} {v:.1f}" for k, v in r["phase_host_ms"].items()), flush=True)
            if r.get("phase_gib"):
                print("              " + "  ".join(
                    f"{k} {v['peak']:.2f}/{v['end']:.2f}" for k, v in r["phase_gib"].items())
                    + "  (GiB peak/end per phase)", flush=True)
                for phase, v in r["phase_gib"].items():
                    if "report" in v:
                        print(f"  {phase}'s {v['report']}", flush=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "model": args.model, "config": dataclasses.asdict(cfg),
              "world_size": where.world_size, "device": args.device,
              "python": platform.python_version(), "results": results, "args": vars(args)}
    if where.rank == 0:
        if {"genesis", "torch"} <= results.keys():
            g, t = results["genesis"], results["torch"]
            report["genesis_over_torch_tok_per_s"] = g["tok_per_s"] / t["tok_per_s"]
            print(f"  genesis / torch tok/s: {report['genesis_over_torch_tok_per_s']:.2f}x")
        if args.device == "cuda":
            import torch

            report["gpu"] = torch.cuda.get_device_name()
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {args.out}")
    tdist.destroy_process_group()
    dist.destroy_process_group()
    return report


if __name__ == "__main__":
    main()
