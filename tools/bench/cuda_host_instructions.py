"""Machine instructions per phase of the null-device training step: ``cuda_host.py --instructions``.

A host time on a machine shared with other work moves by tens of per cent from run to run
(other work on the same cores slows their caches, even in this process's CPU time). A count
of the machine instructions the step executes moves by 1 to 3 % (the memory layout moves
between runs, and with it hashes by address and dict probes), so two trees compare in one
call each, whenever they run. It is a proxy: an instruction is not a fixed time, but on the
interpreter's host path the two follow each other (docs/benchmarks.md, 2026-11-29).

How: ``cuda_host.py`` runs itself (``--child``) under ``valgrind --tool=callgrind
--dump-before=os_getppid*``: callgrind writes its counts so far to a new file each time
``os.getppid`` is entered. The child warms the step up, pauses the garbage collector (as the
timed run does), then calls ``os.getppid`` before every phase of every step and once after
the last, so each phase's count is in a file of its own (``run_bracketed``). A phase's figure
is the least of its ``--steps`` counts (``phase_instructions``); the files are read by
``host_instructions.counts_of``.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_instructions import counts_of, run_under_callgrind  # noqa: E402


def run_bracketed(phases, steps: int, info_path: str, launches: dict) -> None:
    """Run ``steps`` steps of ``phases`` (``(name, callable)`` pairs, warmed up) with an
    ``os.getppid`` call before each phase and after the last (the dumps' triggers), then
    write the phases' names, ``steps`` and ``launches`` (per phase) to ``info_path`` (JSON).

    Example:
        >>> run_bracketed([("forward", fwd), ("backward", bwd)], 2, "info.json", counts)
    """
    gc.collect()
    gc.disable()
    try:
        for _ in range(steps):
            for _, fn in phases:
                os.getppid()  # (a dump of the counts so far: the previous phase's)
                fn()
        os.getppid()
    finally:
        gc.enable()
    with open(info_path, "w") as f:
        json.dump({"phases": [name for name, _ in phases], "steps": steps,
                   "launches": launches}, f)


def phase_instructions(totals: list[int], names: list[str], steps: int) -> dict:
    """The least count of each phase over the steps.

    Args:
        totals: the dumps' instruction counts in the order they were written (see
            ``counts_of``); the last ``len(names) * steps`` are the phases', step by step,
            in ``names``' order (those before are startup, however many dumps it made).
        names: the phases' names, in the order each step ran them.
        steps: how many steps were bracketed.

    Returns:
        ``{phase: instructions}``.

    Example:
        >>> phase_instructions([10**9, 5, 7, 4, 8], ["forward", "backward"], 2)
        {'forward': 4, 'backward': 7}
    """
    need = len(names) * steps
    if need == 0 or len(totals) < need + 1:  # (+1: at least one dump of the startup)
        raise RuntimeError(f"expected {need} phase counts after the startup's, got "
                           f"{max(len(totals) - 1, 0)}: did the child run under callgrind?")
    per = totals[len(totals) - need:]
    return {name: min(per[i::len(names)]) for i, name in enumerate(names)}


def count_instructions(script: str, args) -> dict:
    """Run ``script`` (``cuda_host.py``) as its child under callgrind with ``args``'s model,
    batch, sequence, steps and autocast; print and return instructions per phase and per
    launch: ``{"model", "batch", "seq", "autocast", "steps", "phases": {phase:
    {"instructions", "launches"}}}``."""
    with tempfile.TemporaryDirectory() as folder:
        info_path = os.path.join(folder, "phases.json")
        cmd = [sys.executable, os.path.abspath(script), "--model", args.model, "--batch",
               str(args.batch), "--seq", str(args.seq), "--steps", str(args.steps),
               "--child", info_path] + (["--autocast"] if args.autocast else [])
        run_under_callgrind(cmd, folder)
        with open(info_path) as f:
            info = json.load(f)
        counts = phase_instructions(counts_of(folder), info["phases"], info["steps"])
    phases = {ph: {"instructions": counts[ph], "launches": info["launches"][ph]}
              for ph in info["phases"]}
    print(report(phases, args))
    return {"model": args.model, "batch": args.batch, "seq": args.seq,
            "autocast": args.autocast, "steps": args.steps, "phases": phases}


def report(phases: dict, args) -> str:
    """The table ``count_instructions`` prints: millions of instructions and launches per
    phase, and instructions per launch (``phases``: as ``count_instructions`` returns)."""
    lines = [f"genesis on a null CUDA device: {args.model} decoder, batch {args.batch} x "
             f"{args.seq}, autocast {'bf16' if args.autocast else 'off'}; machine "
             f"instructions (callgrind), least of {args.steps} steps",
             f"{'phase':<10} {'M instr':>8} {'launches':>8} {'instr/launch':>12}"]
    total = launched = 0
    for ph, r in phases.items():
        n, k = r["instructions"], r["launches"]
        total, launched = total + n, launched + k
        per = f"{n / k:>12,.0f}" if k else f"{'-':>12}"
        lines.append(f"{ph:<10} {n / 1e6:>8.2f} {k:>8} {per}")
    lines.append(f"{'total':<10} {total / 1e6:>8.2f} {launched:>8} "
                 f"{total / max(launched, 1):>12,.0f}")
    return "\n".join(lines)
