"""Medians and ranges of an A/B run of ``tools/device/ab.sh``.

    python tools/device/ab_summary.py OUTDIR [--markdown]

Reads ``OUTDIR/train_{A,B}_N.json`` (``tools/bench/train.py --out``),
``OUTDIR/overhead_{cuda,cpu}_{A,B}_N.json`` (``tools/bench/overhead.py --json``) and
``OUTDIR/step_{A,B}_N.json`` (``tools/bench/host_step.py --json``) and prints,
per figure, A's and B's median over the rounds with their ranges and B/A. Training figures are
genesis's step time, tokens/s, peak memory and host time (per step and per kernel launch),
torch's step time beside them (torch is the same code in A and B, so its spread is the
machine's), and genesis's step over torch's within each run; overhead figures are
genesis/torch per row, and so are the host-step figures, per phase of the step.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics


def _load(out: str, pattern: str) -> dict[str, list]:
    """{"A": [doc, ...], "B": [...]} for files named ``pattern`` with {v} and a round."""
    found: dict[str, list] = {"A": [], "B": []}
    regex = re.compile(pattern.format(v="(A|B)") + r"_\d+\.json$")
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        m = regex.fullmatch(os.path.basename(path))
        if m:
            with open(path) as f:
                found[m.group(1)].append(json.load(f))
    return found


def _stat(values: list) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.3g} ({min(values):.3g}-{max(values):.3g})"


def _row(name: str, a: list, b: list) -> str:
    ratio = (statistics.median(b) / statistics.median(a)) if a and b else None
    shown = "-" if ratio is None else f"{ratio:.3f}"
    return f"| {name} | {_stat(a)} | {_stat(b)} | {shown} |"


def train_rows(out: str) -> list[str]:
    docs = _load(out, "train_{v}")
    rows = []
    for fw, key, label in (("genesis", "step_ms", "genesis step ms"),
                           ("genesis", "tok_per_s", "genesis tokens/s"),
                           ("genesis", "peak_mem_gib", "genesis peak GiB"),
                           ("genesis", "host_ms", "genesis host ms per step"),
                           ("genesis", "host_us_per_launch", "genesis host µs per launch"),
                           ("torch", "step_ms", "torch step ms (same code)")):
        vals = {v: [d["results"][fw][key] for d in docs[v]
                    if fw in d["results"] and d["results"][fw].get(key) is not None]
                for v in "AB"}
        if vals["A"] or vals["B"]:
            rows.append(_row(label, vals["A"], vals["B"]))
    # genesis's step over torch's in the same process: what the machine's drift between runs
    # does to both sides cancels out of it
    ratios = {v: [d["results"]["genesis"]["step_ms"] / d["results"]["torch"]["step_ms"]
                  for d in docs[v] if {"genesis", "torch"} <= d["results"].keys()]
              for v in "AB"}
    if ratios["A"] or ratios["B"]:
        rows.append(_row("genesis step / torch step, same run", ratios["A"], ratios["B"]))
    return rows


def overhead_rows(out: str, device: str) -> list[str]:
    docs = _load(out, f"overhead_{device}_" + "{v}")
    ops = [r["op"] for r in (docs["B"] or docs["A"] or [{"rows": []}])[0]["rows"]]
    rows = []
    for op in ops:
        vals = {v: [r["genesis_over_torch"] for d in docs[v] for r in d["rows"]
                    if r["op"] == op] for v in "AB"}
        rows.append(_row(f"{device}: {op}", vals["A"], vals["B"]))
    return rows


def step_rows(out: str) -> list[str]:
    """Per phase of ``host_step.py``'s step (and the whole step): genesis µs over torch µs."""
    docs = _load(out, "step_{v}")
    rows = []
    for phase in ("forward", "backward", "clip", "step", "zero_grad", "total"):
        # (host_step.py's JSON: {framework: {phase: {"us": ...}}, "total": {framework: ...}})
        per = (lambda d, fw: d["total"][fw]) if phase == "total" else \
            (lambda d, fw, phase=phase: d[fw][phase])
        vals = {v: [per(d, "genesis")["us"] / per(d, "torch")["us"] for d in docs[v]]
                for v in "AB"}
        if vals["A"] or vals["B"]:
            rows.append(_row(f"host step {phase} (genesis/torch)", vals["A"], vals["B"]))
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    args = ap.parse_args(argv)
    print("| figure | A median (range) | B median (range) | B/A |")
    print("|---|---|---|---|")
    for line in train_rows(args.out) + overhead_rows(args.out, "cuda") + \
            overhead_rows(args.out, "cpu") + step_rows(args.out):
        print(line)


if __name__ == "__main__":
    main()
