"""Host time of one tiny training step, per phase and per kernel: genesis vs torch on the CPU.

    python tools/bench/host_step.py [--steps 30] [--batch 2] [--seq 16] [--autocast]
                                    [--profile genesis|torch] [--json PATH]

The model is ``tools/bench/decoder.py``'s model (``--model tiny`` shape) built under both
frameworks from the same weights. With tiny float32 shapes the kernels cost little, so the
step's time is almost all host path: module calls, autocast, ``Function.apply``, graph
recording, the backward engine, ``clip_grad_norm_``, the optimizer and ``zero_grad``.

Each phase (forward, backward, clip, step, zero_grad) is timed on its own; a figure is the
median over ``--steps`` steps with the garbage collector paused. "kernels" counts the aten
ops that reach torch's dispatcher in that phase (genesis's CPU backend runs on torch
kernels, so both frameworks are counted alike), and "µs/kernel" is host µs per such call:
the figure to drive down. ``--profile`` prints the top of a cProfile of genesis's or
torch's steps (cumulative time) to find where the microseconds go.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decoder import MODELS, build_model, init_weights  # noqa: E402

PHASES = ("forward", "backward", "clip", "step", "zero_grad")


class _CountKernels(TorchDispatchMode):
    """Counts the aten ops that reach torch's dispatcher while active."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def _setup(name: str, cfg, weights: dict, batch: np.ndarray, args):
    """Model, optimizer and the step's phases (a list of (name, callable)) under ``name``."""
    lib = importlib.import_module(name)
    for sub in ("nn", "nn.functional", "nn.utils", "optim"):
        importlib.import_module(f"{name}.{sub}")
    lib.manual_seed(0)
    model = build_model(lib, cfg, args.seq)
    model.load_state_dict({k: lib.from_numpy(v.copy()) for k, v in weights.items()})
    params = list(model.parameters())
    opt = lib.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    x, y = lib.from_numpy(batch[0]), lib.from_numpy(batch[1])
    amp = lib.autocast("cpu", dtype=lib.bfloat16, enabled=args.autocast)
    state = {}

    def forward():
        with amp:
            state["loss"] = model(x, y)

    phases = [
        ("forward", forward),
        ("backward", lambda: state.pop("loss").backward()),
        ("clip", lambda: lib.nn.utils.clip_grad_norm_(params, 1.0)),
        ("step", opt.step),
        ("zero_grad", lambda: opt.zero_grad(set_to_none=True)),
    ]
    return phases


def _measure(phases, steps: int) -> dict:
    """Median µs per phase and kernels per phase."""
    for _ in range(3):  # warm-up: optimizer state, caches
        for _, fn in phases:
            fn()
    counts = {}
    for ph, fn in phases:
        with _CountKernels() as c:
            fn()
        counts[ph] = c.count
    times: dict = {ph: [] for ph, _ in phases}
    gc.collect()
    gc.disable()
    try:
        for _ in range(steps):
            for ph, fn in phases:
                t0 = time.perf_counter()
                fn()
                times[ph].append((time.perf_counter() - t0) * 1e6)
    finally:
        gc.enable()
    return {ph: {"us": statistics.median(times[ph]), "kernels": counts[ph]} for ph, _ in phases}


def _profile(phases, steps: int, top: int) -> None:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        for _, fn in phases:
            fn()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--autocast", action="store_true", help="bf16 autocast on (default off)")
    ap.add_argument("--profile", choices=("genesis", "torch"), default=None)
    ap.add_argument("--top", type=int, default=40, help="rows of the --profile table")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    cfg = MODELS["tiny"]
    weights = init_weights(cfg, args.seq, seed=0)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, cfg.vocab, size=(args.batch, args.seq + 1))
    batch = (tokens[:, :-1].copy(), tokens[:, 1:].copy())
    if args.profile:
        _profile(_setup(args.profile, cfg, weights, batch, args), args.steps, args.top)
        return {}
    res = {name: _measure(_setup(name, cfg, weights, batch, args), args.steps)
           for name in ("genesis", "torch")}
    print(f"tiny decoder, batch {args.batch} x {args.seq}, CPU, autocast "
          f"{'bf16' if args.autocast else 'off'}; medians of {args.steps} steps")
    print(f"{'phase':<10} {'genesis µs':>11} {'torch µs':>9} {'ratio':>6} "
          f"{'g kernels':>9} {'t kernels':>9} {'g µs/k':>7} {'t µs/k':>7}")
    total = {n: {"us": 0.0, "kernels": 0} for n in res}
    for ph in PHASES + ("total",):
        if ph == "total":
            g, t = total["genesis"], total["torch"]
        else:
            g, t = res["genesis"][ph], res["torch"][ph]
            for n in res:
                total[n]["us"] += res[n][ph]["us"]
                total[n]["kernels"] += res[n][ph]["kernels"]
        gk = g["us"] / g["kernels"] if g["kernels"] else float("nan")
        tk = t["us"] / t["kernels"] if t["kernels"] else float("nan")
        print(f"{ph:<10} {g['us']:>11.0f} {t['us']:>9.0f} {g['us'] / t['us']:>6.2f} "
              f"{g['kernels']:>9} {t['kernels']:>9} {gk:>7.1f} {tk:>7.1f}")
    res["total"] = total
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    torch.set_num_threads(1)  # tiny kernels: more threads only add wake-ups to the figures
    main()
