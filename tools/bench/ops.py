"""Op benchmark: genesis's Triton kernels vs torch on the same GPU in the same run.

    python tools/bench/ops.py [--out docs/bench] [--quick] [--sweep]
    python tools/bench/ops.py --plot-only [--out docs/bench]   # md + png from the json
    python tools/bench/ops.py --attention-only [--quick] [--sweep]   # flash attention only
    python tools/bench/ops.py --only-llm --out OUT             # the LLM-training rows alone
    python tools/bench/ops.py --matmul-training [--quick] [--sweep]   # matmul: train + decode

Prints a table of ratios (torch time / genesis time: above 1 is faster than torch) and
writes ``ops.json``, ``ops.md`` and ``ops.png`` (chart; needs matplotlib) under ``--out``.
Device times are medians from ``triton.testing.do_bench`` (CUDA events, L2 flushed between
repetitions); genesis launches on its current stream, which is the legacy default stream,
the one torch's events are recorded on. Genesis is called at the kernel-module level
(``genesis_cuda.kernels.*``) on ``CudaArray`` inputs from genesis's allocator. The host
overhead row times a synchronised loop of 16-element adds. Targets are issue 4's (the
training and decode sections: issues 9 and 10).

One module per section beside this file: ``ops_common`` (timing context, reports),
``ops_core`` (elementwise, reductions, softmax, norms, host overhead), ``ops_matmul``,
``ops_attention``, ``ops_llm``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ops_attention import attention_rows, attention_sweep  # noqa: E402
from ops_common import Bench, plot, print_table, write_md  # noqa: E402
from ops_core import core_rows, core_sweep, overhead_row  # noqa: E402
from ops_llm import llm_training  # noqa: E402
from ops_matmul import square_rows, training_section  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench"))
    ap.add_argument("--quick", action="store_true", help="fewer rows, shorter timing")
    ap.add_argument("--sweep", action="store_true", help="also sweep launch parameters")
    ap.add_argument("--plot-only", action="store_true", help="rewrite md/png from the json")
    ap.add_argument("--attention-only", action="store_true",
                    help="only the flash attention section (written to attention.json/.md)")
    ap.add_argument("--only-llm", action="store_true",
                    help="only the LLM-training rows (linear+CE, multi-tensor AdamW)")
    ap.add_argument("--matmul-training", action="store_true",
                    help="only the matmul rows of training (fwd, dgrad, wgrad at 8k/16k tokens) "
                         "and decode (M = 1, 8, 32) shapes (written to matmul_training.json/.md)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    name = ("attention" if args.attention_only else "llm_train" if args.only_llm else
            "matmul_training" if args.matmul_training else "ops")
    path = os.path.join(args.out, f"{name}.json")
    if args.plot_only:
        with open(path) as f:
            doc = json.load(f)
        write_md(doc, args.out, name)
        plot(doc, args.out, name)
        return
    doc = run(args)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    write_md(doc, args.out, name)
    plot(doc, args.out, name)
    print_table(doc)


def run(args):
    ctx = Bench(args.quick)
    torch = ctx.torch
    props = torch.cuda.get_device_properties(0)
    # physical ceiling: a large device-to-device copy (bytes read + written)
    big = torch.empty(2**28, dtype=torch.float32, device="cuda")
    big2 = torch.empty_like(big)
    ct = ctx.bench(lambda: big2.copy_(big))
    copy_tbps = 2 * big.numel() * 4 / ct / 1e9
    print(f"device: {props.name}; D2D copy {copy_tbps:.2f} TB/s", flush=True)

    if args.attention_only:
        if args.sweep:
            attention_sweep(ctx)
        attention_rows(ctx)
        return ctx.doc(props, copy_tbps)
    if args.matmul_training:
        training_section(ctx, args.sweep)
        return ctx.doc(props, copy_tbps)
    if args.sweep:
        core_sweep(ctx)
    if args.only_llm:  # just the LLM-training section (written to llm_train.json/.md)
        llm_training(ctx)
        return ctx.doc(props, copy_tbps)

    core_rows(ctx)
    square_rows(ctx)
    attention_rows(ctx)
    llm_training(ctx)  # issue 9's fused training ops, own section
    training_section(ctx, False)  # matmul on training and decode shapes
    ctx.rows.append(overhead_row(ctx))
    return ctx.doc(props, copy_tbps)


if __name__ == "__main__":
    main()
