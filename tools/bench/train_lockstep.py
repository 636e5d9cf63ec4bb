"""Two or more trees of genesis (and torch) trained in lockstep: one step each, in turn.

    python tools/bench/train_lockstep.py --trees A=.ab/A,B=. [--torch] [--copies 1]
        [--cpus 2,3] [--model 0.2b] [--batch 8] [--seq 1024] [--steps 30] [--warmup 3]
        [--device cuda] [--out FILE]

A before/after comparison of the eager training step (``decoder.py``'s model, ``train.py``'s
data, optimizer and step) for machines whose speed drifts: on the GPU machine one tree's step
moved by 1.6x between runs a minute apart (docs/benchmarks.md, eighth session), so two runs one
after the other, even alternated, compare the machine's moments as much as the trees. Here each
tree runs in a process of its own (``TREE/packages/*/src`` first on ``PYTHONPATH``; ``--torch``
adds torch as one more), all of them set up and warmed up first; then the coordinator asks one
process at a time for one synchronised step, round after round, each round in a random order
(seeded: no process always follows the same one). The processes waiting for their turn are idle
(blocked reading their input), so each step has the machine to itself, and the steps of one
round are at most a few hundred milliseconds apart.

Two processes of one tree can differ by 10 % or more on that machine for as long as they
run (where their memory landed, which cores they were given): ``--copies N`` runs N
processes of each tree, and ``--cpus`` pins every process to the same cores, so whichever
process runs, it runs there.

Printed per process: the median wall time of its steps with their range, the host time (until
the step's call returns, before the synchronise), and the largest difference of its first 8
losses from the first process's (same weights and data); then per tree after the first (torch
included), its step over the first tree's *in the same round* (each the mean over its
copies), median and quartiles over the rounds: what the machine's drift does to both steps of a
round cancels out of it.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decoder import MODELS, init_weights  # noqa: E402
from train import make_batches, setup_framework, timed_steps, training_step  # noqa: E402

TAG = "@@lockstep "  # the prefix of the children's protocol lines (other output passes by)
COMPARED_LOSSES = 8  # the first losses compared between processes (later ones drift apart:
# GPU reductions in another order, compounded by training)


# ------------------------------------------------------------------------ a child process
def child(args) -> None:
    """Set up ``args.child``'s framework, warm it up, then run one timed step per ``step``
    line read from stdin, answering each with its figures; ``end`` reports peak memory."""
    if args.cpus:
        os.sched_setaffinity(0, args.cpus)
    cfg = MODELS[args.model]
    weights = init_weights(cfg, args.seq, args.seed)
    batches = make_batches(cfg, args.batch, args.seq, args.seed)
    lib, model, opt, params, data, amp = setup_framework(args.child, cfg, weights, batches,
                                                         args)
    step = training_step(lib, model, opt, params, data, amp)
    t0 = time.perf_counter()
    losses = [float(step(i).item()) for i in range(args.warmup)]
    _say({"ready": True, "warmup_s": time.perf_counter() - t0, "losses": losses,
          "cpus": sorted(os.sched_getaffinity(0))})
    i = args.warmup
    for line in sys.stdin:
        if line.strip() != "step":
            break
        (wall,), (host,), (loss,) = timed_steps(lib, args.device, step, i, 1)
        _say({"wall_ms": wall * 1e3, "host_ms": host * 1e3, "loss": loss})
        i += 1
    _say({"peak_mem_gib": lib.cuda.max_memory_allocated() / 2**30
          if args.device == "cuda" else None})


def _say(doc: dict) -> None:
    print(TAG + json.dumps(doc), flush=True)


# ------------------------------------------------------------------------ the coordinator
class Participant:
    """One child process: a tree's genesis, or torch."""

    def __init__(self, label: str, group: str, framework: str, tree: str | None, argv: list):
        self.label, self.group, self.framework = label, group, framework
        env = dict(os.environ)
        if tree is not None:
            srcs = sorted(glob.glob(os.path.join(tree, "packages", "*", "src")))
            if not srcs:
                raise SystemExit(f"train_lockstep: tree {label}={tree!r} has no "
                                 f"packages/*/src folders (give a repository root or a "
                                 f"`git archive COMMIT packages tools` copy)")
            env["PYTHONPATH"] = os.pathsep.join(
                [os.path.abspath(p) for p in srcs] + [env.get("PYTHONPATH", "")]).rstrip(
                os.pathsep)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--child", framework, *argv],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.walls: list = []
        self.hosts: list = []
        self.losses: list = []
        self.ready: dict = {}

    def read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(TAG):
                return json.loads(line[len(TAG):])
            print(f"  [{self.label}] {line}", end="", flush=True)
        raise SystemExit(f"train_lockstep: process {self.label} ({self.framework}) ended "
                         f"with exit code {self.proc.wait()} before answering")

    def step(self) -> None:
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        r = self.read()
        self.walls.append(r["wall_ms"])
        self.hosts.append(r["host_ms"])
        self.losses.append(r["loss"])

    def end(self) -> dict:
        self.proc.stdin.write("end\n")
        self.proc.stdin.flush()
        r = self.read()
        self.proc.wait()
        return r


def parse_trees(spec: str) -> list:
    """``"A=path,B=path"`` -> ``[("A", "path"), ("B", "path")]``."""
    trees = []
    for item in spec.split(","):
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"train_lockstep: --trees takes LABEL=PATH,LABEL=PATH; got "
                             f"{item!r} in {spec!r}")
        if label == "torch" or label in dict(trees):
            raise SystemExit(f"train_lockstep: tree label {label!r} in {spec!r} is taken "
                             f"(each tree needs its own label; 'torch' is --torch's)")
        trees.append((label, path))
    return trees


def quartiles(values: list) -> tuple:
    """(lower quartile, median, upper quartile) of ``values``."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[1], q[2]


def parse_cpus(spec: str) -> set:
    """``"2,3"`` or ``"2-5"`` -> a set of CPU numbers."""
    cpus: set = set()
    for item in filter(None, spec.split(",")):
        lo, _, hi = item.partition("-")
        if not lo.isdigit() or (hi and not (hi.isdigit() and int(hi) >= int(lo))):
            raise SystemExit(f"train_lockstep: --cpus takes CPU numbers and ranges like "
                             f"2,3 or 2-5; got {item!r} in {spec!r}")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def report(parts: list, ends: dict) -> dict:
    """Print and return the figures of every process and each group's in-round ratios to
    the first group (a group: one tree's copies, or torch)."""
    base = parts[0]
    n = COMPARED_LOSSES
    doc: dict = {"processes": {}, "ratios_to_first": {}}
    print(f"{'process':<10}{'step ms':>10}{'range':>16}{'host ms':>10}{'peak GiB':>10}"
          f"{'first losses vs ' + base.label:>26}")
    for p in parts:
        losses = p.ready["losses"] + p.losses
        diff = max(abs(a - b) for a, b in zip(losses[:n], (base.ready["losses"]
                                                          + base.losses)[:n]))
        peak = ends[p.label]["peak_mem_gib"]
        doc["processes"][p.label] = {
            "tree": p.group, "framework": p.framework, "step_ms": statistics.median(p.walls),
            "host_ms": statistics.median(p.hosts), "walls_ms": p.walls, "hosts_ms": p.hosts,
            "losses": losses, "warmup_s": p.ready["warmup_s"], "peak_mem_gib": peak,
            "max_first_loss_diff": diff, "cpus": p.ready["cpus"]}
        r = doc["processes"][p.label]
        spread = f"{min(p.walls):.2f}-{max(p.walls):.2f}"
        print(f"{p.label:<10}{r['step_ms']:>10.2f}{spread:>16}{r['host_ms']:>10.2f}"
              f"{'-' if peak is None else format(peak, '.2f'):>10}{diff:>26.3g}")
    groups: dict = {}
    for p in parts:
        groups.setdefault(p.group, []).append(p)

    def per_round(group, key):  # the group's mean over its copies, per round
        return [statistics.fmean(vals) for vals in zip(*(getattr(p, key) for p in group))]

    first, *others = groups
    for name in others:
        for key, label in (("walls", "step"), ("hosts", "host")):
            ratios = [x / y for x, y in zip(per_round(groups[name], key),
                                            per_round(groups[first], key))]
            lo, mid, hi = quartiles(ratios)
            doc["ratios_to_first"][f"{name}_{label}"] = {"median": mid, "q1": lo, "q3": hi,
                                                         "per_round": ratios}
            print(f"{name} / {first}, {label} time in the same round: median {mid:.3f} "
                  f"(quartiles {lo:.3f}-{hi:.3f}, {len(ratios)} rounds)")
    return doc


def main(argv=None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", default="B=.",
                    help="LABEL=PATH,...: trees whose genesis runs (the first is the base)")
    ap.add_argument("--torch", action="store_true", help="add torch as one more process")
    ap.add_argument("--copies", type=int, default=1, help="processes per tree")
    ap.add_argument("--cpus", type=parse_cpus, default=set(),
                    help="pin every process to these CPUs (e.g. 2,3 or 2-5)")
    ap.add_argument("--model", choices=sorted(MODELS), default="0.2b")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=30, help="rounds (one timed step each)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.lr, args.no_autocast = 3e-4, False  # (train.py's defaults, which setup reads)
    if args.warmup < 1 or args.steps < 1 or args.copies < 1:
        ap.error("--warmup, --steps and --copies must be at least 1")
    if args.child:
        child(args)
        return None
    shared = ["--model", args.model, "--batch", str(args.batch), "--seq", str(args.seq),
              "--warmup", str(args.warmup), "--device", args.device, "--seed", str(args.seed)]
    if args.cpus:
        shared += ["--cpus", ",".join(map(str, sorted(args.cpus)))]
    specs = [(label if args.copies == 1 else f"{label}.{i}", label, "genesis", tree)
             for label, tree in parse_trees(args.trees) for i in range(1, args.copies + 1)]
    if args.torch:
        specs.append(("torch", "torch", "torch", None))
    parts = []
    order = random.Random(args.seed)
    try:
        for label, group, framework, tree in specs:  # one at a time: warm-ups don't overlap
            p = Participant(label, group, framework, tree, shared)
            parts.append(p)
            p.ready = p.read()
            print(f"{label}: ready, warm-up {p.ready['warmup_s']:.1f} s", flush=True)
        for _ in range(args.steps):
            for p in order.sample(parts, len(parts)):
                p.step()
        ends = {p.label: p.end() for p in parts}
    finally:
        for p in parts:
            if p.proc.poll() is None:
                p.proc.kill()
    doc = report(parts, ends)
    doc.update({"model": args.model, "batch": args.batch, "seq": args.seq,
                "device": args.device, "steps": args.steps,
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
    return doc


if __name__ == "__main__":
    main()
