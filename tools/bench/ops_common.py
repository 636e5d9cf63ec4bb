"""What every section of the op benchmark (``ops.py``) shares: the timing context and the reports.

``Bench`` holds torch, genesis's array module, the rows collected so far and the helpers a
section uses: ``bench`` (median device time of a callable), ``graph_ms`` (device time per
call inside a captured CUDA graph), ``to_g`` / ``to_t`` (values into a
genesis ``CudaArray`` and back), ``gview`` (a genesis view with a torch view's geometry) and
``add`` (time a torch callable and a genesis one, print and keep the row). Genesis launches on
its current stream, made torch's current stream too, so torch's events time both.
"""

from __future__ import annotations

import os
import sys
import time

# Qwen2.5-0.5B: d 896, 24 layers, 14/2 heads of 64, SwiGLU 4864, vocab 151,936 (tied)
QWEN05 = {"hidden": 896, "layers": 24, "kv": 128, "ffn": 4864, "vocab": 151936}


class _TorchView:
    """A torch tensor seen as a kernel operand (for copies between torch and genesis)."""

    def __init__(self, t, gdt):
        self.t, self.shape, self.strides = t, tuple(t.shape), tuple(t.stride())
        self.dtype, self.device = gdt, 0

    def data_ptr(self):
        return self.t.data_ptr()


class Bench:
    """The timing context of one benchmark run (see the module docstring)."""

    def __init__(self, quick: bool):
        import torch
        import triton

        import genesis_cuda.array as garr
        from genesis import dtypes as D

        garr.empty((1,), D.float32, 0)  # lazy CUDA init; installs the Triton hooks
        from genesis_cuda import streams
        from genesis_cuda.kernels import elementwise as ew

        handle = streams.current_handle(0)
        if handle != 0:  # time on genesis's stream
            torch.cuda.set_stream(torch.cuda.ExternalStream(handle))
        self.torch, self.triton, self.garr, self.D, self.ew = torch, triton, garr, D, ew
        self.TD = {D.float32: torch.float32, D.bfloat16: torch.bfloat16,
                   D.float16: torch.float16}
        self.quick = quick
        self.rep = 40 if quick else 100
        self.rows: list = []

    def bench(self, fn, rep=None):
        """Median device time of ``fn()`` in ms (CUDA events, L2 flushed between runs)."""
        return self.triton.testing.do_bench(fn, warmup=10, rep=rep or self.rep,
                                            return_mode="median")

    def to_g(self, t):
        """A genesis CudaArray holding torch tensor ``t``'s values (contiguous)."""
        gdt = {v: k for k, v in self.TD.items()}[t.dtype]
        c = t.contiguous()
        a = self.garr.empty(tuple(c.shape), gdt, 0)
        self.ew.copy_(a, _TorchView(c, gdt))
        self.torch.cuda.synchronize()
        return a

    def to_t(self, a):
        """A contiguous torch tensor holding genesis array ``a``'s values."""
        t = self.torch.empty(tuple(a.shape), dtype=self.TD[a.dtype], device="cuda")
        self.ew.copy_(_TorchView(t, a.dtype), a)
        self.torch.cuda.synchronize()
        return t

    def gview(self, a, t_view, base):
        """A genesis view of ``a`` with the geometry of torch view ``t_view`` of ``base``."""
        return self.garr.as_strided(a, tuple(t_view.shape), tuple(t_view.stride()),
                                    t_view.storage_offset() - base.storage_offset())

    def graph_ms(self, calls, framework: str, reps: int = 20):
        """Device time in ms per call of ``calls`` (callables doing the same work, e.g. on
        different weights so that the L2 cache holds none of them), captured in order as one
        CUDA graph of ``framework`` ("torch" or "genesis") and replayed ``reps`` times: what a
        call costs inside a captured decode step, where kernels follow each other without the
        host launch latency that a single timed call includes."""
        torch = self.torch
        if framework == "torch":
            graph, capture, sync = torch.cuda.CUDAGraph(), torch.cuda.graph, \
                torch.cuda.synchronize
        else:
            import genesis.cuda

            graph, capture, sync = genesis.cuda.CUDAGraph(), genesis.cuda.graph, \
                genesis.cuda.synchronize
        for call in calls:  # compile, warm the plan caches (nothing is compiled in capture)
            call()
        sync()
        with capture(graph):
            for call in calls:
                call()
        graph.replay()
        sync()
        t0 = time.perf_counter()  # the replays' host time is small against their work
        for _ in range(reps):
            graph.replay()
        sync()
        return (time.perf_counter() - t0) * 1e3 / (reps * len(calls))

    def add(self, group, name, dtype, shape, tfn, gfn, target, nbytes=None, check=None):
        """Time ``tfn`` (torch) and ``gfn`` (genesis) for the same work and keep the row;
        ``check()`` (if given) runs first, ``nbytes`` adds the achieved bandwidth."""
        torch = self.torch
        gfn()  # compile
        tfn()
        torch.cuda.synchronize()
        if check is not None:
            check()
        return self.record(group, name, dtype, shape, self.bench(tfn), self.bench(gfn), target,
                           nbytes)

    def record(self, group, name, dtype, shape, tt, gt, target, nbytes=None):
        """Keep and print a row of torch time ``tt`` and genesis time ``gt`` (ms)."""
        row = {"group": group, "name": name, "dtype": str(dtype).replace("torch.", ""),
               "shape": list(shape), "torch_ms": tt, "genesis_ms": gt, "ratio": tt / gt,
               "target": target}
        if nbytes:
            row["genesis_TBps"] = nbytes / gt / 1e9
            row["torch_TBps"] = nbytes / tt / 1e9
        self.rows.append(row)
        print(f"  {group:12s} {name:34s} {row['dtype']:9s} torch {tt*1e3:9.1f} us  genesis "
              f"{gt*1e3:9.1f} us  ratio {tt/gt:5.2f}", flush=True)
        return row

    def doc(self, props, copy_tbps):
        """The run's JSON document: device, versions, copy ceiling, date, rows."""
        return {"device": props.name, "torch": self.torch.__version__,
                "triton": self.triton.__version__, "copy_TBps": copy_tbps,
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": self.rows}


def fmt_row(r):
    t = r.get("target")
    ok = "" if t is None else ("yes" if r["ratio"] >= t else "NO")
    bw = f"{r['genesis_TBps']:.2f}" if "genesis_TBps" in r else \
        (f"{r['genesis_TFLOPs']:.0f} TF" if "genesis_TFLOPs" in r else "")
    return (r["group"], r["name"], r["dtype"], f"{r['torch_ms']*1e3:.1f}",
            f"{r['genesis_ms']*1e3:.1f}", f"{r['ratio']:.2f}",
            "" if t is None else f">= {t:g}" if r["group"] != "host" else "<= 2x time", ok, bw)


HEAD = ("group", "op", "dtype", "torch us", "genesis us", "ratio", "target", "met", "genesis TB/s")


def print_table(doc):
    """The run's table on stdout."""
    print(f"\n{doc['device']} (torch {doc['torch']}, triton {doc['triton']}); "
          f"D2D copy ceiling {doc['copy_TBps']:.2f} TB/s; ratio = torch time / genesis time")
    widths = [12, 34, 9, 10, 10, 6, 11, 4, 12]
    print(" ".join(h.ljust(w) for h, w in zip(HEAD, widths)))
    for r in doc["rows"]:
        print(" ".join(str(c).ljust(w) for c, w in zip(fmt_row(r), widths)))


# output name -> the ops.py flag that writes it alone
SECTION_FLAGS = {"attention": " --attention-only", "llm_train": " --only-llm",
                 "matmul_training": " --matmul-training"}


def write_md(doc, out, name="ops"):
    """``{name}.md``: the run's table in Markdown, for docs/bench."""
    lines = [f"# Op benchmark: genesis vs torch ({doc['device']})", "",
             f"torch {doc['torch']}, triton {doc['triton']}, {doc['date']}. "
             f"Ratio = torch time / genesis time (above 1: genesis is faster). Device-to-device "
             f"copy ceiling measured in the same run: {doc['copy_TBps']:.2f} TB/s (read + write). "
             "Medians of `triton.testing.do_bench`; the host row is a synchronised loop.",
             f"Produced by `python tools/bench/ops.py{SECTION_FLAGS.get(name, '')}`.", "",
             "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for r in doc["rows"]:
        lines.append("| " + " | ".join(fmt_row(r)) + " |")
    with open(os.path.join(out, f"{name}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def plot(doc, out, name="ops"):
    """``{name}.png``: a bar per row (ratio to torch), red where below its target."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib not available: {name}.png not written", file=sys.stderr)
        return
    rows = doc["rows"]
    labels = [f"{r['name']} [{r['dtype']}]" for r in rows]
    ratios = [r["ratio"] for r in rows]
    colors = ["tab:green" if r.get("target") is None or r["ratio"] >= r["target"] else
              "tab:red" for r in rows]  # red: below its target
    fig, ax = plt.subplots(figsize=(10, 0.28 * len(rows) + 1.5))
    ax.barh(range(len(rows)), ratios, color=colors)
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    tg = [(i, r["target"]) for i, r in enumerate(rows) if r.get("target") is not None]
    ax.scatter([t for _, t in tg], [i for i, _ in tg], marker="|", color="black", s=60,
               label="target", zorder=3)
    ax.legend(loc="lower right", fontsize=8)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xlabel("torch time / genesis time (higher is better)")
    ax.set_title(f"genesis vs torch, {doc['device']}")
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"{name}.png"), dpi=110)
