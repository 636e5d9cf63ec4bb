"""Machine instructions per tiny op: genesis vs torch, counted by valgrind (benchmark, not a test).

    python tools/bench/host_instructions.py [--iters N] [--json PATH]

The rows are ``overhead.py``'s (``--device cpu``). On a machine shared with other work the
time of a 2 µs op moves by more than the few per cent a host-path change is worth, even in
the thread's CPU time (``overhead.py --clock cpu``): other work on the same core still slows
its caches. An instruction count does not move with the load, so two trees compare in one
call each, whenever they run. It is a proxy: an instruction is not a fixed time, but on the
interpreter's host path the two follow each other (docs/benchmarks.md, 2026-11-29).

How: the script runs itself under ``valgrind --tool=callgrind``, which writes its counts to a
new file each time ``os.getppid`` is entered. The child warms every row up, then loops each
row ``--iters`` times between two such calls; a row's count is its file's total over
``--iters``, less that of an empty loop (``lambda: None``). Torch runs on one thread and the
garbage collector is paused, as in ``overhead.py``. Torch's code is the same in two trees, so
an A/B compares genesis's counts. These still move by up to 3 % between calls (seen on
this machine: the memory layout moves, and with it hashes by address and dict probes), and
torch's by as much, so compare medians of a few calls. Startup under valgrind takes a minute
or more.
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import subprocess
import sys
import tempfile

_EMPTY = "empty loop"


def counts_of(folder: str) -> list[int]:
    """The instruction totals of callgrind's dump files in ``folder``, in the order they were
    written (``cg.<pid>.<n>``: the n-th dump; the first is startup)."""
    files = glob.glob(os.path.join(folder, "cg.*.*"))
    totals = []
    for path in sorted(files, key=lambda p: int(p.rsplit(".", 1)[1])):
        with open(path) as f:
            for line in f:
                if line.startswith("summary:"):
                    totals.append(int(line.split()[1]))
                    break
    return totals


def run_under_callgrind(cmd: list, folder: str) -> None:
    """Run ``cmd`` under callgrind, which writes its counts into ``folder`` each time
    ``os.getppid`` is entered (``counts_of`` reads them), with one torch thread and a fixed
    string hash (dict probes then repeat from run to run). Raises RuntimeError with the end of
    its stderr if it fails."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0")
    proc = subprocess.run(["valgrind", "--tool=callgrind", "--dump-before=os_getppid*",
                           f"--callgrind-out-file={folder}/cg.%p", *cmd],
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the child under callgrind failed ({proc.returncode}):\n"
                           + proc.stderr[-4000:])


def rows_of(names: list[str], totals: list[int], iters: int) -> list[dict]:
    """Per row: genesis's and torch's instructions per call (the empty loop's taken off) and
    their ratio. ``names`` are ``"<lib>:<row>"`` in the order the child ran them; ``totals``
    the dumps' counts, startup first."""
    per_call = dict(zip(names, (t / iters for t in totals[1:1 + len(names)])))
    if len(per_call) != len(names):
        raise RuntimeError(f"expected {len(names)} counts after startup, got {len(totals) - 1}")
    empty = {lib: per_call[f"{lib}:{_EMPTY}"] for lib in ("genesis", "torch")}
    rows = []
    for name in names[::2]:
        op = name.split(":", 1)[1]
        if op == _EMPTY:
            continue
        g = per_call[f"genesis:{op}"] - empty["genesis"]
        t = per_call[f"torch:{op}"] - empty["torch"]
        rows.append({"op": op, "genesis_instructions": round(g), "torch_instructions": round(t),
                     "genesis_over_torch": round(g / t, 3)})
    return rows


def child(iters: int, names_path: str) -> None:
    """Loop every row between ``os.getppid`` calls (run under callgrind by ``main``)."""
    import torch

    import genesis

    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    from overhead import _cases

    loops = []
    for lib, mod in (("genesis", genesis), ("torch", torch)):
        cases = {_EMPTY: lambda: None, **_cases(mod, "cpu")}
        loops.append([(f"{lib}:{op}", fn) for op, fn in cases.items()])
    order = [pair for both in zip(*loops) for pair in both]  # genesis, torch, per row
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _, fn in order:
            for _ in range(max(10, iters // 10)):  # warm-up: caches, plans
                fn()
        gc.collect()
        gc.disable()  # as overhead.py: a collection is not the op's cost, and it moves
        for _, fn in order:
            os.getppid()  # (a dump of the counts so far)
            for _ in range(iters):
                fn()
        os.getppid()
    finally:
        gc.enable()
        torch.set_num_threads(threads)
    with open(names_path, "w") as f:
        json.dump([name for name, _ in order], f)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--json", default=None, help="also write the table as JSON here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.iters, args.child)
        return
    with tempfile.TemporaryDirectory() as folder:
        names_path = os.path.join(folder, "names.json")
        run_under_callgrind([sys.executable, os.path.abspath(__file__), "--iters",
                             str(args.iters), "--child", names_path], folder)
        with open(names_path) as f:
            names = json.load(f)
        rows = rows_of(names, counts_of(folder), args.iters)
    print(f"machine instructions per op (callgrind, {args.iters} calls a row, an empty loop's "
          "count taken off), device=cpu")
    print(f"| {'op':<30} | genesis | torch | genesis/torch |")
    print(f"|{'-' * 32}|--------:|------:|--------------:|")
    for r in rows:
        print(f"| {r['op']:<30} | {r['genesis_instructions']:>7} | {r['torch_instructions']:>5} "
              f"| {r['genesis_over_torch']:>13.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": "cpu", "iters": args.iters, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
