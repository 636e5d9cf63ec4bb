"""Host time per tiny op: genesis vs torch, side by side (benchmark, not a test).

    python tools/bench/overhead.py [--device cpu|cuda] [--iters N] [--json PATH]

Each row times a loop of one op on 16-element tensors (CUDA: synchronised once at the end
of the loop, so the figure is the host cost per launch when the GPU keeps up).
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

import genesis


def _time_loop(fn, iters: int, sync) -> float:
    for _ in range(max(10, iters // 10)):  # warm-up: caches, kernel compilation
        fn()
    sync()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        best = min(best, (time.perf_counter() - start) / iters)
    return best * 1e6  # µs per op


def _cases(lib, device):
    a = lib.ones(16, device=device)
    b = lib.ones(16, device=device)
    m = lib.ones(4, 4, device=device)
    w = lib.ones(16, device=device, requires_grad=True)
    return {
        "add (a + b)": lambda: a + b,
        "mul by scalar (a * 2.0)": lambda: a * 2.0,
        "exp": lambda: a.exp(),
        "sum()": lambda: a.sum(),
        "matmul 4x4": lambda: m @ m,
        "view/reshape": lambda: a.view(4, 4),
        "slice a[2:10]": lambda: a[2:10],
        "in-place add_": lambda: a.add_(b),
        "add, graph recorded": lambda: w + b,
        "forward+backward (w*b).sum()": lambda: (w * b).sum().backward(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--json", default=None, help="also write the table as JSON here")
    args = parser.parse_args()

    if args.device.startswith("cuda"):
        sync_g, sync_t = genesis.cuda.synchronize, torch.cuda.synchronize
    else:
        sync_g = sync_t = lambda: None
    g_cases, t_cases = _cases(genesis, args.device), _cases(torch, args.device)
    rows = []
    for name in g_cases:
        tg = _time_loop(g_cases[name], args.iters, sync_g)
        tt = _time_loop(t_cases[name], args.iters, sync_t)
        rows.append({"op": name, "genesis_us": round(tg, 2), "torch_us": round(tt, 2),
                     "genesis_over_torch": round(tg / tt, 2)})
    print(f"host time per op, device={args.device}, torch {torch.__version__}, "
          f"{platform.processor() or platform.machine()}")
    print(f"| {'op':<30} | genesis µs | torch µs | genesis/torch |")
    print(f"|{'-' * 32}|-----------:|---------:|--------------:|")
    for r in rows:
        print(f"| {r['op']:<30} | {r['genesis_us']:>10.2f} | {r['torch_us']:>8.2f} | "
              f"{r['genesis_over_torch']:>13.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "torch": torch.__version__, "rows": rows}, f,
                      indent=2)


if __name__ == "__main__":
    main()
