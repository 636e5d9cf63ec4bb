"""Allocator benchmark: genesis's caching allocator vs torch's, same GPU, same run.

Two measurements:

1. Hot path: allocate + free of one array, repeated (4 MiB, 64 KiB, 1 KiB). Genesis:
   ``genesis_cuda.array.empty`` + ``del`` (the CudaArray included) and the bare allocator
   (``malloc`` + ``del``); torch: ``torch.empty`` + ``del``. The raw driver
   (``cuMemAlloc`` + ``cuMemFree``) is shown for scale.
2. Trace replay: the allocation trace of a transformer training step (a GPT-style model,
   synthesised below in execution order: embeddings, attention and MLP per layer with the
   activations autograd saves, the loss, backward in reverse freeing saved activations and
   accumulating gradients, then an AdamW step), replayed three times through each
   allocator. Compared: wall time and peak reserved memory.

Usage (on the GPU machine):  python tools/bench/memory.py [--out docs/bench/memory.json]
Prints a table; writes JSON. Ratios are torch time / genesis time (above 1: genesis faster)
and genesis peak reserved / torch peak reserved (at most 1: genesis uses no more).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import time
import timeit
from dataclasses import asdict, dataclass

MiB = 1 << 20


# ------------------------------------------------------------------ the trace
@dataclass
class ModelConfig:
    """A GPT-like decoder; bf16 activations and parameters, fp32 AdamW state and logits."""

    vocab: int = 32000
    dim: int = 1024
    layers: int = 8
    heads: int = 16
    seq: int = 1024
    batch: int = 8
    act_bytes: int = 2  # bf16
    steps: int = 3


def transformer_trace(cfg: ModelConfig) -> list[tuple]:
    """Allocation events ``("a", id, nbytes)`` / ``("f", id)`` of ``cfg.steps`` steps."""
    ev: list[tuple] = []
    next_id = [0]

    def alloc(nbytes: int) -> int:
        next_id[0] += 1
        ev.append(("a", next_id[0], int(nbytes)))
        return next_id[0]

    def free(*ids) -> None:
        for i in ids:
            if i is not None:
                ev.append(("f", i))

    b, s, d, h, v, a = cfg.batch, cfg.seq, cfg.dim, cfg.heads, cfg.vocab, cfg.act_bytes
    tokens = b * s
    # Parameters (persist).
    shapes = [v * d]  # token embedding (tied with the LM head)
    for _ in range(cfg.layers):
        shapes += [d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d, 4 * d * d, d]
    shapes += [d, d]  # final norm
    params = [alloc(n * a) for n in shapes]
    adam_state: list[int] = []

    for step in range(cfg.steps):
        saved: list[list[int]] = []
        ids = alloc(tokens * 8)  # int64 token ids
        x = alloc(tokens * d * a)  # embedding lookup
        for _ in range(cfg.layers):
            keep = []
            ln1 = alloc(tokens * d * a)
            stats1 = alloc(tokens * 4 * 2)  # mean, rstd (fp32)
            qkv = alloc(tokens * 3 * d * a)
            scores = alloc(b * h * s * s * a)  # q @ k^T
            probs = alloc(b * h * s * s * a)  # softmax
            free(scores)
            attn = alloc(tokens * d * a)  # probs @ v
            proj = alloc(tokens * d * a)
            x2 = alloc(tokens * d * a)  # residual
            free(proj)
            ln2 = alloc(tokens * d * a)
            stats2 = alloc(tokens * 4 * 2)
            up = alloc(tokens * 4 * d * a)
            act = alloc(tokens * 4 * d * a)  # gelu
            down = alloc(tokens * d * a)
            x3 = alloc(tokens * d * a)
            free(down)
            keep += [x, ln1, stats1, qkv, probs, attn, x2, ln2, stats2, up, act]
            saved.append(keep)
            x = x3
        lnf = alloc(tokens * d * a)
        statsf = alloc(tokens * 4 * 2)
        logits = alloc(tokens * v * 4)  # fp32 logits
        lse = alloc(tokens * 4)
        loss = alloc(4)
        # Backward.
        g_logits = alloc(tokens * v * 4)
        free(loss, lse)
        grads: dict[int, int] = {}
        g_emb = alloc(v * d * a)  # LM-head weight grad (tied)
        grads[0] = g_emb
        g = alloc(tokens * d * a)  # grad wrt lnf
        free(g_logits, logits)
        g_x = alloc(tokens * d * a)
        free(g, lnf, statsf, x)
        for layer in reversed(range(cfg.layers)):
            x_in, ln1, stats1, qkv, probs, attn, x2, ln2, stats2, up, act = saved[layer]
            base = 1 + layer * 12
            g_act = alloc(tokens * 4 * d * a)
            grads[base + 10] = alloc(4 * d * d * a)  # w_down grad
            grads[base + 11] = alloc(d * a)
            g_up = alloc(tokens * 4 * d * a)
            free(g_act, act)
            grads[base + 8] = alloc(4 * d * d * a)
            grads[base + 9] = alloc(4 * d * a)
            g_ln2 = alloc(tokens * d * a)
            free(g_up, up)
            g_x2 = alloc(tokens * d * a)
            grads[base + 6] = alloc(d * a)
            grads[base + 7] = alloc(d * a)
            free(g_ln2, ln2, stats2)
            g_sum = alloc(tokens * d * a)  # residual: g_x + g_x2
            free(g_x, g_x2)
            g_attn = alloc(tokens * d * a)
            grads[base + 4] = alloc(d * d * a)
            grads[base + 5] = alloc(d * a)
            g_probs = alloc(b * h * s * s * a)
            g_v = alloc(tokens * d * a)
            g_scores = alloc(b * h * s * s * a)
            free(g_probs, probs, g_attn, attn)
            g_qk = alloc(tokens * 2 * d * a)
            free(g_scores)
            g_qkv = alloc(tokens * 3 * d * a)
            free(g_qk, g_v)
            grads[base + 2] = alloc(3 * d * d * a)
            grads[base + 3] = alloc(3 * d * a)
            g_ln1 = alloc(tokens * d * a)
            free(g_qkv, qkv)
            g_in = alloc(tokens * d * a)
            grads[base + 0] = alloc(d * a)
            grads[base + 1] = alloc(d * a)
            free(g_ln1, ln1, stats1, x2)
            g_x = alloc(tokens * d * a)
            free(g_sum, g_in, x_in)
        grads[len(shapes) - 2] = alloc(d * a)
        grads[len(shapes) - 1] = alloc(d * a)
        tmp = alloc(v * d * a)  # embedding backward (index_add) adds into the tied grad
        free(tmp, g_x, ids)
        # AdamW: fp32 m and v on the first step, then a few temporaries per parameter.
        if step == 0:
            adam_state = [alloc(n * 4) for n in shapes for _ in range(2)]
        for n in shapes:
            t1 = alloc(n * 4)
            t2 = alloc(n * 4)
            free(t1)
            t3 = alloc(n * a)
            free(t2, t3)
        free(*[grads[k] for k in sorted(grads)])  # zero_grad(set_to_none=True)
    free(*params, *adam_state)
    return ev


# ------------------------------------------------------------------- timing
def best_us(fn, number: int, repeat: int = 5) -> float:
    fn()
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def hot_path(torch) -> list[dict]:
    from genesis import dtypes as D
    from genesis_cuda import array, memory

    alloc = memory.allocator(0)
    rows = []
    for label, nbytes in (("4 MiB", 4 * MiB), ("64 KiB", 64 << 10), ("1 KiB", 1 << 10)):
        n = nbytes // 4

        def g_empty(n=n):
            x = array.empty((n,), D.float32, 0)
            del x

        def g_malloc(nbytes=nbytes):
            s = alloc.malloc(nbytes)
            del s

        def t_empty(n=n):
            x = torch.empty(n, dtype=torch.float32, device="cuda")
            del x

        number = 20000
        t = best_us(t_empty, number)
        g = best_us(g_empty, number)
        m = best_us(g_malloc, number)
        rows.append({"size": label, "torch_us": t, "genesis_empty_us": g,
                     "genesis_malloc_us": m, "genesis_over_torch": g / t})
    return rows


def driver_alloc_us() -> float:
    from genesis_cuda import driver

    cu = driver.driver()

    def raw():
        err, ptr = cu.cuMemAlloc(4 * MiB)
        cu.cuMemFree(ptr)

    return best_us(raw, 200, 3)


def replay_genesis(trace) -> tuple[float, int]:
    from genesis_cuda import api, memory

    alloc = memory.allocator(0)
    api.empty_cache()
    api.synchronize()
    api.reset_peak_memory_stats()
    live = {}
    malloc = alloc.malloc
    t0 = time.perf_counter()
    for e in trace:
        if e[0] == "a":
            live[e[1]] = malloc(e[2])
        else:
            del live[e[1]]
    elapsed = time.perf_counter() - t0
    peak = api.max_memory_reserved()
    live.clear()
    api.empty_cache()
    return elapsed, peak


def replay_torch(torch, trace) -> tuple[float, int]:
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    live = {}
    empty, u8 = torch.empty, torch.uint8
    t0 = time.perf_counter()
    for e in trace:
        if e[0] == "a":
            live[e[1]] = empty(e[2], dtype=u8, device="cuda")
        else:
            del live[e[1]]
    elapsed = time.perf_counter() - t0
    peak = torch.cuda.max_memory_reserved()
    live.clear()
    torch.cuda.empty_cache()
    return elapsed, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="docs/bench/memory.json")
    parser.add_argument("--repeat", type=int, default=3, help="trace replays per allocator")
    args = parser.parse_args()

    import torch

    from genesis import dtypes as D
    from genesis_cuda import api, array

    array.empty((1,), D.float32, 0)  # initialise genesis on device 0
    torch.empty(1, device="cuda")  # and torch
    gc.disable()  # neither allocator should pay for a collection inside a timed loop
    hot = hot_path(torch)
    raw = driver_alloc_us()

    cfg = ModelConfig()
    trace = transformer_trace(cfg)
    n_alloc = sum(1 for e in trace if e[0] == "a")
    g_best, t_best, g_peak, t_peak = float("inf"), float("inf"), 0, 0
    for _ in range(args.repeat):  # alternate, keep the best time of each
        t, p = replay_torch(torch, trace)
        t_best, t_peak = min(t_best, t), max(t_peak, p)
        t, p = replay_genesis(trace)
        g_best, g_peak = min(g_best, t), max(g_peak, p)
    gc.enable()

    print(f"\nAllocator benchmark on {api.get_device_name(0)} (torch {torch.__version__})")
    print(f"{'allocate+free':<16}{'torch.empty':>14}{'genesis empty':>15}{'genesis malloc':>16}"
          f"{'genesis/torch':>15}")
    for r in hot:
        print(f"{r['size']:<16}{r['torch_us']:>12.2f}us{r['genesis_empty_us']:>13.2f}us"
              f"{r['genesis_malloc_us']:>14.2f}us{r['genesis_over_torch']:>14.2f}x")
    print(f"{'(cuMemAlloc+cuMemFree 4 MiB: ' + format(raw, '.1f') + ' us)'}")
    print(f"\nTrace replay: GPT-like step x{cfg.steps} ({cfg.layers} layers, d={cfg.dim}, "
          f"batch {cfg.batch}x{cfg.seq}), {n_alloc} allocations")
    print(f"{'':<16}{'torch':>14}{'genesis':>14}{'ratio':>10}")
    print(f"{'time':<16}{t_best * 1e3:>12.2f}ms{g_best * 1e3:>12.2f}ms"
          f"{t_best / g_best:>9.2f}x  (torch time / genesis time)")
    print(f"{'peak reserved':<16}{t_peak / MiB:>11.0f}MiB{g_peak / MiB:>11.0f}MiB"
          f"{g_peak / t_peak:>9.2f}x  (genesis / torch)")

    result = {
        "device": api.get_device_name(0), "torch": torch.__version__,
        "python": platform.python_version(),
        "hot_path": hot, "driver_alloc_free_4MiB_us": raw,
        "trace": {"model": asdict(cfg), "allocations": n_alloc,
                  "torch_ms": t_best * 1e3, "genesis_ms": g_best * 1e3,
                  "speed_ratio_torch_over_genesis": t_best / g_best,
                  "torch_peak_reserved": t_peak, "genesis_peak_reserved": g_peak,
                  "reserved_ratio_genesis_over_torch": g_peak / t_peak},
        "targets": {"hot_path_max_ratio": 1.5, "trace_min_speed_ratio": 1.0,
                    "trace_max_reserved_ratio": 1.0},
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
