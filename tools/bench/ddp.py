"""Distributed benchmark: genesis.distributed vs torch.distributed on the same GPUs, same run.

Two measurements:

1. all_reduce (fp32 SUM, in place) from 1 MiB to 1 GiB: genesis (NCCL through CuPy, on
   genesis memory and streams) vs torch.distributed (its own NCCL). Reported as time, the
   algorithm bandwidth (bytes / time) and the bus bandwidth (algbw * 2 (n - 1) / n, what
   nccl-tests print; 0 for one rank, where NCCL only copies locally).
2. A DDP training step (forward, backward, SGD step) of an MLP, with and without the
   DistributedDataParallel wrapper (gradient_as_bucket_view, zero_grad keeping the grads):
   the wrapper's overhead in percent (target: at most 3 %).
3. DDP training of ``tools/bench/decoder.py``'s model (``--train-model``, default the
   Qwen2.5-0.5B shape) under genesis and torch, the same code and float32 weights for both:
   ``--train-batch`` x ``--train-seq`` tokens per rank, bf16 autocast, fused AdamW,
   ``clip_grad_norm_(1.0)``; median step time of ``--train-steps`` synchronised steps after
   three untimed ones, tokens/s over all ranks, each framework's peak memory. Scaling is the
   two-GPU run's tokens/s over the one-GPU run's (two invocations; ``--no-train`` skips it).

Usage (GPU machine, repository root):

    python tools/bench/ddp.py                                  # one GPU, world of one
    torchrun --nproc_per_node=2 tools/bench/ddp.py             # two GPUs
    python tools/bench/ddp.py --quick --out /tmp/ddp.json

Rank 0 prints a table and writes JSON (default docs/bench/ddp.json).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

MiB = 1 << 20


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="docs/bench/ddp.json")
    p.add_argument("--quick", action="store_true", help="fewer sizes and iterations")
    p.add_argument("--width", type=int, default=4096, help="DDP model: hidden width")
    p.add_argument("--depth", type=int, default=8, help="DDP model: linear layers")
    p.add_argument("--batch", type=int, default=2048, help="DDP model: rows per rank")
    p.add_argument("--no-train", action="store_true", help="skip the decoder's DDP training")
    p.add_argument("--train-model", default="qwen2.5-0.5b", help="a tools/bench/decoder.py model")
    p.add_argument("--train-batch", type=int, default=8, help="decoder: sequences per rank")
    p.add_argument("--train-seq", type=int, default=1024)
    p.add_argument("--train-steps", type=int, default=10, help="decoder: timed steps")
    return p.parse_args(argv)


def setup(device: str = "cuda"):
    """Meet the other ranks once; genesis and torch each get their own key space (NCCL on
    ``device="cuda"``, Gloo on ``"cpu"``); without torchrun, a world of one."""
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT", "29561"))
    import torch
    from torch import distributed as tdist

    import genesis
    import genesis.distributed as dist
    from genesis.distributed.rendezvous import rendezvous

    timeout = datetime.timedelta(minutes=5)
    where = rendezvous(None, None, None, timeout)
    backend, extra = "gloo", {}
    if device == "cuda":
        torch.cuda.set_device(where.local_rank)
        backend, extra = "nccl", {"device_id": torch.device("cuda", where.local_rank)}
    dist.init_process_group(backend, store=tdist.PrefixStore("genesis", where.store),
                            rank=where.rank, world_size=where.world_size, timeout=timeout)
    tdist.init_process_group(backend, store=tdist.PrefixStore("torch", where.store),
                             rank=where.rank, world_size=where.world_size, timeout=timeout,
                             **extra)
    return genesis, dist, torch, tdist, where


def time_cuda(genesis, torch, fn, iters: int, use_torch: bool) -> float:
    """Seconds per call of ``fn`` on the current stream (events around ``iters`` calls)."""
    for _ in range(3):
        fn()
    if use_torch:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    else:
        start = genesis.cuda.Event(enable_timing=True)
        end = genesis.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def bench_all_reduce(genesis, dist, torch, tdist, world: int, quick: bool) -> list[dict]:
    sizes = [1, 16, 256] if quick else [1, 4, 16, 64, 256, 1024]
    rows = []
    for mib in sizes:
        n = mib * MiB // 4
        iters = max(5, min(50, 2048 // mib))
        g = genesis.ones(n, device="cuda")
        t = torch.ones(n, device="cuda")
        tdist.barrier()
        g_s = time_cuda(genesis, torch, lambda g=g: dist.all_reduce(g), iters, False)
        t_s = time_cuda(genesis, torch, lambda t=t: tdist.all_reduce(t), iters, True)
        factor = 2 * (world - 1) / world
        rows.append({
            "bytes": mib * MiB, "genesis_us": g_s * 1e6, "torch_us": t_s * 1e6,
            "genesis_algbw_GBps": mib * MiB / g_s / 1e9, "torch_algbw_GBps": mib * MiB / t_s / 1e9,
            "genesis_busbw_GBps": factor * mib * MiB / g_s / 1e9,
            "torch_busbw_GBps": factor * mib * MiB / t_s / 1e9,
            "ratio_torch_over_genesis": t_s / g_s,
        })
    return rows


def bench_ddp_step(genesis, dist, torch, args) -> dict:
    import genesis.optim
    from genesis import nn

    def model():
        genesis.manual_seed(0)
        layers = []
        for _ in range(args.depth - 1):
            layers += [nn.Linear(args.width, args.width), nn.GELU()]
        return nn.Sequential(*layers, nn.Linear(args.width, 1)).to("cuda")

    x = genesis.randn(args.batch, args.width, device="cuda")
    results = {}
    iters = 5 if args.quick else 20
    for name in ("plain", "ddp"):
        net = model()
        if name == "ddp":
            net = dist.DistributedDataParallel(net, gradient_as_bucket_view=True)
        opt = genesis.optim.SGD(net.parameters(), lr=1e-4)

        def step(net=net, opt=opt):
            net(x).square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=False)

        seconds = time_cuda(genesis, torch, step, iters, False)
        results[f"{name}_ms"] = seconds * 1e3
    results["overhead_pct"] = 100 * (results["ddp_ms"] / results["plain_ms"] - 1)
    results["params_M"] = (args.width * args.width * (args.depth - 1) + args.width) / 1e6
    return results


def bench_ddp_train(dist, torch, args, where) -> dict:
    """Tokens/s of DDP training of decoder.py's model, genesis then torch (section 3)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import decoder
    import train

    cfg = decoder.MODELS[args.train_model]
    weights = decoder.init_weights(cfg, args.train_seq, seed=0)
    rng = np.random.default_rng(1 + where.rank)  # each rank its own batches
    batches = [rng.integers(0, cfg.vocab, (args.train_batch, args.train_seq + 1))
               for _ in range(3)]
    results = {}
    for name in ("genesis", "torch"):
        lib = train.import_framework(name)
        model = train.load_model(lib, cfg, weights, args.train_seq, "cuda")
        if name == "genesis":
            ddp = dist.DistributedDataParallel(model)
        else:
            ddp = torch.nn.parallel.DistributedDataParallel(model,
                                                            device_ids=[where.local_rank])
        params = list(model.parameters())
        opt = lib.optim.AdamW(params, lr=1e-4, weight_decay=0.1, fused=True)
        data = [(lib.from_numpy(b[:, :-1].copy()).to("cuda"),
                 lib.from_numpy(b[:, 1:].copy()).to("cuda")) for b in batches]
        step = train.training_step(lib, ddp, opt, params, data,
                                   lib.autocast("cuda", dtype=lib.bfloat16))
        losses = [float(step(i).item()) for i in range(3)]
        lib.cuda.reset_peak_memory_stats()
        times, _, timed_losses = train.timed_steps(lib, "cuda", step, 3, args.train_steps)
        step_s = statistics.median(times)
        results[name] = {
            "step_ms": step_s * 1e3,
            "tok_per_s": where.world_size * args.train_batch * args.train_seq / step_s,
            "peak_mem_gib": lib.cuda.max_memory_allocated() / 2**30,
            "losses": losses + timed_losses}
        del ddp, model, opt, params, data, step
        lib.cuda.empty_cache()
    results["genesis_over_torch"] = (results["genesis"]["tok_per_s"]
                                     / results["torch"]["tok_per_s"])
    results["model"] = args.train_model
    return results


def main(argv=None) -> None:
    args = parse_args(argv)
    genesis, dist, torch, tdist, where = setup()
    rows = bench_all_reduce(genesis, dist, torch, tdist, where.world_size, args.quick)
    step = bench_ddp_step(genesis, dist, torch, args)
    if where.rank == 0:  # printed before the (long) training section
        print(f"all_reduce fp32 SUM, {where.world_size} rank(s), "
              f"{torch.cuda.get_device_name()}")
        print(f"{'size':>8} {'genesis us':>11} {'torch us':>10} {'gen busbw':>10} "
              f"{'torch busbw':>12} {'gen algbw':>10} {'torch/gen':>10}")
        for r in rows:
            print(f"{r['bytes'] // MiB:>6}MB {r['genesis_us']:>11.1f} {r['torch_us']:>10.1f} "
                  f"{r['genesis_busbw_GBps']:>10.1f} {r['torch_busbw_GBps']:>12.1f} "
                  f"{r['genesis_algbw_GBps']:>10.1f} {r['ratio_torch_over_genesis']:>10.2f}")
        print(f"DDP step ({step['params_M']:.0f} M params, batch {args.batch}): plain "
              f"{step['plain_ms']:.2f} ms, DDP {step['ddp_ms']:.2f} ms, overhead "
              f"{step['overhead_pct']:+.2f} %", flush=True)
    train = None if args.no_train else bench_ddp_train(dist, torch, args, where)
    if where.rank == 0:
        if train is not None:
            print(f"DDP training, {args.train_model}, {where.world_size} rank(s) x "
                  f"{args.train_batch} x {args.train_seq} tokens, bf16 autocast, fused AdamW:")
            for name in ("genesis", "torch"):
                r = train[name]
                print(f"  {name:8s} {r['step_ms']:8.1f} ms/step {r['tok_per_s']:10,.0f} tok/s "
                      f" peak {r['peak_mem_gib']:.2f} GiB  loss {r['losses'][0]:.4f} -> "
                      f"{r['losses'][-1]:.4f}")
            print(f"  genesis / torch tok/s: {train['genesis_over_torch']:.2f}x")
        report = {"date": time.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(),
                  "world_size": where.world_size, "python": platform.python_version(),
                  "all_reduce": rows, "ddp_step": step, "ddp_train": train,
                  "args": vars(args)}
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {args.out}")
    tdist.destroy_process_group()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
