"""One training step of a plain-torch-style decoder layer: eager vs ``genesis.compile``.

    python tools/bench/compile_step.py [--batch 8] [--seq 1024] [--dim 1024] [--iters 20]
    python tools/bench/compile_step.py --device cpu --batch 2 --seq 32 --dim 64 \
        --no-autocast --clock cpu --threads 1 --rounds 5

The layer is written the ordinary way (RMSNorm written out, separate q/k/v ``Linear``s,
composite RoPE ``x * cos + cat(-x2, x1) * sin``, SDPA, ``silu(gate) * up``), in bf16
autocast (``--no-autocast``: float32), and timed forward + backward (median of ``--iters``
steps after warm-up) in three ways on CUDA: eager, compiled without CUDA graphs (fused
kernels only) and compiled with them (the default mode). On the CPU the two compiled modes
are the same (core's replay), so it times eager against compiled. ``--rounds`` alternates
the modes that many times and reports the median of the rounds' medians and their range;
``--clock cpu`` counts the process's CPU time instead of wall time (a machine shared with
other work). The first compiled step's time (trace and compilation) is reported too. A
benchmark, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import time

import genesis
import genesis.nn as nn
import genesis.nn.functional as F


class Layer(nn.Module):
    def __init__(self, d: int, heads: int, sdpa: bool = True):
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.norm1 = nn.Parameter(genesis.ones(d))
        self.norm2 = nn.Parameter(genesis.ones(d))
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.gate = nn.Linear(d, 4 * d, bias=False)
        self.up = nn.Linear(d, 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)

    @staticmethod
    def rms(x, w):
        h = x.float()
        return (h * genesis.rsqrt((h * h).mean(-1, keepdim=True) + 1e-6) * w).to(x.dtype)

    @staticmethod
    def rope(x, cos, sin):  # (B, H, S, D)
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return x * cos + genesis.cat([-x2, x1], dim=-1) * sin

    def forward(self, x, cos, sin):  # (B, S, d)
        b, s, d = x.shape
        h = self.rms(x, self.norm1)
        q, k, v = (p(h).view(b, s, self.heads, -1).transpose(1, 2)
                   for p in (self.q, self.k, self.v))
        q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        if self.sdpa:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = q * k + v
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        h = self.rms(x, self.norm2)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def _sync(device: str) -> None:
    if device == "cuda":
        genesis.cuda.synchronize()


def _time(step, iters: int, device: str, clock) -> float:
    times = []
    for _ in range(iters):
        _sync(device)
        t = clock()
        step()
        _sync(device)
        times.append(clock() - t)
    return statistics.median(times) * 1e3


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--rounds", type=int, default=1, help="alternate the modes this many times")
    p.add_argument("--device", default="cuda")
    p.add_argument("--no-autocast", action="store_true", help="float32 (default: bf16 autocast)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="cpu: the process's CPU time (time.process_time)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU backend: intra-op threads (genesis.set_num_threads); with "
                        "--clock cpu, 1 keeps idle threads' spinning out of the figure")
    p.add_argument("--no-sdpa", action="store_true",
                   help="q * k + v in place of attention (the step without its one fused "
                        "kernel: only matmuls and what the compiler fuses)")
    a = p.parse_args(argv)
    dev = a.device
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    if a.threads is not None:
        genesis.set_num_threads(a.threads)
    genesis.manual_seed(0)
    layer = Layer(a.dim, a.heads, not a.no_sdpa).to(dev)
    x = genesis.randn(a.batch, a.seq, a.dim, device=dev)
    hd = a.dim // a.heads
    cos, sin = genesis.randn(a.seq, hd, device=dev), genesis.randn(a.seq, hd, device=dev)
    modes = [("eager", layer)]
    if dev == "cuda":
        modes.append(("compiled, no CUDA graph",
                      genesis.compile(layer, mode="max-autotune-no-cudagraphs")))
    modes.append(("compiled (default: CUDA graph)" if dev == "cuda" else "compiled",
                  genesis.compile(layer)))
    steps, first = {}, {}
    for name, run in modes:
        def step(run=run):
            with genesis.autocast(dev, dtype=genesis.bfloat16, enabled=not a.no_autocast):
                loss = run(x, cos, sin).float().pow(2).mean()
            loss.backward()

        t0 = time.perf_counter()
        step()
        _sync(dev)
        first[name] = (time.perf_counter() - t0) * 1e3
        for _ in range(3):
            step()
        steps[name] = step
    times: dict = {name: [] for name, _ in modes}
    for _ in range(a.rounds):
        for name, _ in modes:
            times[name].append(_time(steps[name], a.iters, dev, clock))
    base = statistics.median(times["eager"])
    print(f"{'mode':<32}{'step ms':>10}{'range':>18}{'vs eager':>10}{'first step ms':>16}"
          f"   ({a.clock} clock, {a.rounds} round(s) of {a.iters} steps)")
    for name, _ in modes:
        ms = statistics.median(times[name])
        spread = f"{min(times[name]):.2f}-{max(times[name]):.2f}"
        print(f"{name:<32}{ms:>10.2f}{spread:>18}{base / ms:>10.2f}{first[name]:>16.0f}")


if __name__ == "__main__":
    main()
