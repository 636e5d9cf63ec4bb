"""Op benchmark: genesis's Triton kernels vs torch on the same GPU in the same run.

    python tools/bench/ops.py [--out docs/bench] [--quick] [--sweep]
    python tools/bench/ops.py --plot-only [--out docs/bench]   # md + png from the json
    python tools/bench/ops.py --attention-only [--quick] [--sweep]   # flash attention only
    python tools/bench/ops.py --only-llm --out OUT             # the LLM-training rows alone

Prints a table of ratios (torch time / genesis time: above 1 is faster than torch) and
writes ``ops.json``, ``ops.md`` and ``ops.png`` (chart; needs matplotlib) under ``--out``.
Device times are medians from ``triton.testing.do_bench`` (CUDA events, L2 flushed between
repetitions); genesis launches on its current stream, which is the legacy default stream,
the one torch's events are recorded on. Genesis is called at the kernel-module level
(``genesis_cuda.kernels.*``) on ``CudaArray`` inputs from genesis's allocator. The host
overhead row times a synchronised loop of 16-element adds. Targets are issue 4's.
"""

# The timed lambdas are built and used within one loop iteration (bench() calls them at once).
# ruff: noqa: B023

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ------------------------------------------------------------------------ helpers
def _setup():
    import torch

    import genesis_cuda.array as garr
    from genesis import dtypes as D

    garr.empty((1,), D.float32, 0)  # lazy CUDA init; installs the Triton hooks
    from genesis_cuda import streams

    handle = streams.current_handle(0)
    if handle != 0:  # time on genesis's stream
        torch.cuda.set_stream(torch.cuda.ExternalStream(handle))
    return torch, garr, D


class _TorchView:
    """A torch tensor seen as a kernel operand (only for the first copy into genesis)."""

    def __init__(self, t, gdt):
        self.t, self.shape, self.strides = t, tuple(t.shape), tuple(t.stride())
        self.dtype, self.device = gdt, 0

    def data_ptr(self):
        return self.t.data_ptr()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench"))
    ap.add_argument("--quick", action="store_true", help="fewer rows, shorter timing")
    ap.add_argument("--sweep", action="store_true", help="also sweep launch parameters")
    ap.add_argument("--plot-only", action="store_true", help="rewrite md/png from the json")
    ap.add_argument("--attention-only", action="store_true",
                    help="only the flash attention section (written to attention.json/.md)")
    ap.add_argument("--only-llm", action="store_true",
                    help="only the LLM-training rows (linear+CE, multi-tensor AdamW)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    name = "attention" if args.attention_only else "llm_train" if args.only_llm else "ops"
    path = os.path.join(args.out, f"{name}.json")
    if args.plot_only:
        with open(path) as f:
            doc = json.load(f)
        _write_md(doc, args.out, name)
        _plot(doc, args.out, name)
        return
    doc = run(args)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    _write_md(doc, args.out, name)
    _plot(doc, args.out, name)
    _print(doc)


def run(args):
    import triton

    torch, garr, D = _setup()
    from genesis_cuda.kernels import elementwise as ew
    from genesis_cuda.kernels import norms
    from genesis_cuda.kernels import reduction as red
    from genesis_cuda.kernels import softmax as sm

    TD = {D.float32: torch.float32, D.bfloat16: torch.bfloat16, D.float16: torch.float16}
    rep = 40 if args.quick else 100

    def bench(fn):
        return triton.testing.do_bench(fn, warmup=10, rep=rep, return_mode="median")

    def to_g(t):
        """A genesis CudaArray holding torch tensor ``t``'s values (same shape/strides)."""
        gdt = {v: k for k, v in TD.items()}[t.dtype]
        c = t.contiguous()
        a = garr.empty(tuple(c.shape), gdt, 0)
        ew.copy_(a, _TorchView(c, gdt))
        torch.cuda.synchronize()
        return a

    def gview(a, t_view, base):
        """A genesis view of ``a`` with the geometry of torch view ``t_view`` of ``base``."""
        return garr.as_strided(a, tuple(t_view.shape), tuple(t_view.stride()),
                               t_view.storage_offset() - base.storage_offset())

    rows = []

    def add(group, name, dtype, shape, tfn, gfn, target, nbytes=None, check=None):
        gfn()  # compile
        tfn()
        torch.cuda.synchronize()
        if check is not None:
            check()
        tt = bench(tfn)
        gt = bench(gfn)
        row = {"group": group, "name": name, "dtype": str(dtype).replace("torch.", ""),
               "shape": list(shape), "torch_ms": tt, "genesis_ms": gt, "ratio": tt / gt,
               "target": target}
        if nbytes:
            row["genesis_TBps"] = nbytes / gt / 1e9
            row["torch_TBps"] = nbytes / tt / 1e9
        rows.append(row)
        print(f"  {group:12s} {name:34s} {row['dtype']:9s} torch {tt*1e3:9.1f} us  genesis "
              f"{gt*1e3:9.1f} us  ratio {tt/gt:5.2f}", flush=True)

    dev = "cuda"
    props = torch.cuda.get_device_properties(0)
    # physical ceiling: a large device-to-device copy (bytes read + written)
    big = torch.empty(2**28, dtype=torch.float32, device=dev)
    big2 = torch.empty_like(big)
    ct = bench(lambda: big2.copy_(big))
    copy_tbps = 2 * big.numel() * 4 / ct / 1e9
    print(f"device: {props.name}; D2D copy {copy_tbps:.2f} TB/s", flush=True)

    if args.attention_only:
        if args.sweep:
            _attention_sweep(torch, to_g, bench)
        _attention(torch, add, to_g, rows, args)
        return _doc(torch, triton, props, copy_tbps, rows)

    if args.sweep:
        _sweep(torch, ew, red, norms, to_g, bench)

    if args.only_llm:  # just the LLM-training section (written to llm_train.json/.md)
        _llm_training(torch, bench, add, rows, args.quick)
        return _doc(torch, triton, props, copy_tbps, rows)

    N16 = 2**24
    # ---------------------------------------------------------------- elementwise
    for dt in (torch.float32, torch.bfloat16):
        isz = torch.tensor([], dtype=dt).element_size()
        x = torch.randn(N16, device=dev, dtype=dt)
        y = torch.randn(N16, device=dev, dtype=dt)
        gx, gy = to_g(x), to_g(y)
        kadd, kmul, kexp = ew.binary_kernel("add"), ew.binary_kernel("mul"), \
            ew.unary_kernel("exp")
        add("elementwise", "add 16M", dt, (N16,), lambda: x + y, lambda: kadd(gx, gy), 0.95,
            3 * N16 * isz)
        add("elementwise", "mul scalar 16M", dt, (N16,), lambda: x * 1.5,
            lambda: kmul(gx, 1.5), 0.95, 2 * N16 * isz)
        add("elementwise", "exp 16M", dt, (N16,), lambda: torch.exp(x), lambda: kexp(gx), 0.95,
            2 * N16 * isz)
        if not args.quick:
            x4, y4 = torch.randn(4 * N16, device=dev, dtype=dt), \
                torch.randn(4 * N16, device=dev, dtype=dt)
            gx4, gy4 = to_g(x4), to_g(y4)
            add("elementwise", "add 64M", dt, (4 * N16,), lambda: x4 + y4,
                lambda: kadd(gx4, gy4), 0.95, 12 * N16 * isz)
        # transposed (non-contiguous) inputs: a.T + b, exp(a.T), contiguous(a.T)
        a2 = torch.randn(4096, 4096, device=dev, dtype=dt)
        b2 = torch.randn(4096, 4096, device=dev, dtype=dt)
        ga2, gb2 = to_g(a2), to_g(b2)
        gat = gview(ga2, a2.t(), a2)
        at = a2.t()
        add("transposed", "a.T + b 4096^2", dt, (4096, 4096), lambda: at + b2,
            lambda: kadd(gat, gb2), 0.8, 3 * N16 * isz)
        add("transposed", "exp(a.T) 4096^2", dt, (4096, 4096), lambda: torch.exp(at),
            lambda: kexp(gat), 0.8, 2 * N16 * isz)
        add("transposed", "contiguous(a.T) 4096^2", dt, (4096, 4096), lambda: at.contiguous(),
            lambda: ew.contiguous(gat), 0.8, 2 * N16 * isz)
        add("elementwise", "cast->fp16 16M" if dt == torch.float32 else "cast->fp32 16M", dt,
            (N16,), lambda: x.to(torch.float16 if dt == torch.float32 else torch.float32),
            lambda: ew.cast(gx, D.float16 if dt == torch.float32 else D.float32), 0.95, None)

    # ---------------------------------------------------------------- reductions
    for dt in (torch.float32, torch.bfloat16):
        gdt = D.float32 if dt == torch.float32 else D.bfloat16
        isz = torch.tensor([], dtype=dt).element_size()
        a = torch.randn(4096, 4096, device=dev, dtype=dt)
        ga = to_g(a)
        for dims, label in (((1,), "last dim"), ((0,), "first dim"), ((0, 1), "all")):
            add("reduction", f"sum {label} 4096^2", dt, (4096, 4096),
                lambda d=dims: torch.sum(a, d), lambda d=dims: red.sum(ga, d, False, gdt), 0.9,
                N16 * isz)
            add("reduction", f"amax {label} 4096^2", dt, (4096, 4096),
                lambda d=dims: torch.amax(a, d), lambda d=dims: red.amax(ga, d, False), 0.9,
                N16 * isz)
        kmul = ew.binary_kernel("mul")
        add("reduction", "mean last dim 4096^2", dt, (4096, 4096), lambda: torch.mean(a, 1),
            lambda: kmul(red.sum(ga, (1,), False, gdt), 1 / 4096), 0.9, N16 * isz)
        if not args.quick:
            t = torch.randn(16, 1024, 1024, device=dev, dtype=dt)
            gt_ = to_g(t)
            add("reduction", "sum middle dim 16x1024x1024", dt, tuple(t.shape),
                lambda: torch.sum(t, 1), lambda: red.sum(gt_, (1,), False, gdt), 0.9,
                N16 * isz)
            add("reduction", "argmax last dim 4096^2", dt, (4096, 4096),
                lambda: torch.argmax(a, 1), lambda: red.argmax(ga, 1, False), None, N16 * isz)
            add("reduction", "cumsum last dim 4096^2", dt, (4096, 4096),
                lambda: torch.cumsum(a, 1), lambda: red.cumsum(ga, 1, gdt), None, 2 * N16 * isz)

    # ------------------------------------------------------- softmax and norms
    F = torch.nn.functional
    for dt in (torch.float32, torch.bfloat16):
        gdt = D.float32 if dt == torch.float32 else D.bfloat16
        isz = torch.tensor([], dtype=dt).element_size()
        for n in (1024, 4096, 8192):
            m = N16 // n
            x = torch.randn(m, n, device=dev, dtype=dt)
            g = torch.randn(m, n, device=dev, dtype=dt)
            w = torch.randn(n, device=dev, dtype=dt)
            b = torch.randn(n, device=dev, dtype=dt)
            gx, gg, gw, gb = to_g(x), to_g(g), to_g(w), to_g(b)
            shp = (m, n)
            for log in (False, True):
                nm = "log_softmax" if log else "softmax"
                tf = torch.log_softmax if log else torch.softmax
                add("softmax", f"{nm} fwd {m}x{n}", dt, shp, lambda: tf(x, -1),
                    lambda: sm.softmax(gx, 1, log), 1.0, 2 * N16 * isz)
                y = tf(x, -1)
                gy = to_g(y)
                tb = torch._log_softmax_backward_data if log else torch._softmax_backward_data
                add("softmax", f"{nm} bwd {m}x{n}", dt, shp, lambda: tb(g, y, -1, dt),
                    lambda: sm.softmax_backward(gy, gg, 1, log), 1.0, 3 * N16 * isz)
            add("norm", f"layer_norm fwd {m}x{n}", dt, shp,
                lambda: F.layer_norm(x, (n,), w, b), lambda: norms.layer_norm(gx, gw, gb, 1e-5),
                1.0, 2 * N16 * isz)
            _, mean, rstd = torch.ops.aten.native_layer_norm(x, [n], w, b, 1e-5)
            _, gmean, grstd = norms.layer_norm(gx, gw, gb, 1e-5)
            add("norm", f"layer_norm bwd {m}x{n}", dt, shp,
                lambda: torch.ops.aten.native_layer_norm_backward(
                    g, x, [n], mean, rstd, w, b, [True, True, True]),
                lambda: norms.layer_norm_backward(gg, gx, gw, gmean, grstd), 1.0, 3 * N16 * isz)
            add("norm", f"rms_norm fwd {m}x{n}", dt, shp, lambda: F.rms_norm(x, (n,), w, 1e-6),
                lambda: norms.rms_norm(gx, gw, 1e-6), 1.0, 2 * N16 * isz)
            xr = x.detach().requires_grad_(True)
            wr = w.detach().requires_grad_(True)
            yr = F.rms_norm(xr, (n,), wr, 1e-6)
            _, grs = norms.rms_norm(gx, gw, 1e-6)
            add("norm", f"rms_norm bwd {m}x{n}", dt, shp,
                lambda: torch.autograd.grad(yr, (xr, wr), g, retain_graph=True),
                lambda: norms.rms_norm_backward(gg, gx, gw, grs), 1.0, 3 * N16 * isz)

    # ---------------------------------------------------------------- matmul
    try:
        from genesis_cuda.kernels import matmul as mm
    except ImportError:
        mm = None
    if mm is not None and hasattr(mm, "matmul"):
        for dt in (torch.bfloat16, torch.float16):
            for n in ((4096,) if args.quick else (4096, 8192)):
                a = torch.randn(n, n, device=dev, dtype=dt)
                b_ = torch.randn(n, n, device=dev, dtype=dt)
                ga, gb_ = to_g(a), to_g(b_)
                try:
                    add("matmul", f"matmul {n}^3", dt, (n, n, n), lambda: a @ b_,
                        lambda: mm.matmul(ga, gb_), 0.9)
                    rows[-1]["genesis_TFLOPs"] = 2 * n**3 / rows[-1]["genesis_ms"] / 1e9
                    rows[-1]["torch_TFLOPs"] = 2 * n**3 / rows[-1]["torch_ms"] / 1e9
                except Exception as exc:  # report, keep the rest of the table
                    print(f"  matmul {n} {dt}: {type(exc).__name__}: {exc}", flush=True)

    _attention(torch, add, to_g, rows, args)

    # ------------------------------------------------- LLM training (issue 9), own section
    _llm_training(torch, bench, add, rows, args.quick)

    # ---------------------------------------------------------------- host overhead
    rows.append(_overhead(torch, garr, ew, D))
    return _doc(torch, triton, props, copy_tbps, rows)


def _doc(torch, triton, props, copy_tbps, rows):
    return {"device": props.name, "torch": torch.__version__, "triton": triton.__version__,
            "copy_TBps": copy_tbps, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "rows": rows}


# Qwen2.5-0.5B: d 896, 24 layers, 14/2 heads of 64, SwiGLU 4864, vocab 151,936 (tied)
QWEN05 = {"hidden": 896, "layers": 24, "kv": 128, "ffn": 4864, "vocab": 151936}


def _qwen05_shapes():
    """Parameter shapes of Qwen2.5-0.5B (tied embeddings: the vocab matrix once)."""
    h, kv, f = QWEN05["hidden"], QWEN05["kv"], QWEN05["ffn"]
    layer = [(h, h), (h,), (kv, h), (kv,), (kv, h), (kv,), (h, h), (f, h), (f, h), (h, f),
             (h,), (h,)]
    return [(QWEN05["vocab"], h)] + layer * QWEN05["layers"] + [(h,)]


def _llm_training(torch, bench, add, rows, quick):
    """Whole-op rows through genesis's public API (Function + backend): linear +
    cross-entropy (time and peak memory, forward + backward) and a multi-tensor AdamW step
    over Qwen2.5-0.5B's parameters, each against torch eager on the same GPU."""
    import genesis
    import genesis.nn.functional as F

    tokens, hidden, vocab = (2048 if quick else 8192), QWEN05["hidden"], QWEN05["vocab"]
    bf = torch.bfloat16
    tx = torch.randn(tokens, hidden, device="cuda", dtype=bf, requires_grad=True)
    tw = (torch.randn(vocab, hidden, device="cuda", dtype=bf) * 0.02).requires_grad_()
    tt = torch.randint(0, vocab, (tokens,), device="cuda")
    gx = genesis.randn(tokens, hidden, device="cuda", dtype=genesis.bfloat16).requires_grad_()
    gw = (genesis.randn(vocab, hidden, device="cuda", dtype=genesis.bfloat16) * 0.02)
    gw.requires_grad_()
    gt = genesis.randint(0, vocab, (tokens,), device="cuda")

    def torch_step():  # torch eager as a training script writes it: float32 logits
        tx.grad = tw.grad = None
        torch.nn.functional.cross_entropy(torch.nn.functional.linear(tx, tw).float(),
                                          tt).backward()

    def genesis_step():
        gx.grad = gw.grad = None
        F.linear_cross_entropy(gx, gw, gt).backward()

    name = f"linear+CE {tokens}x{vocab}x{hidden} fwd+bwd"
    add("llm-train", name, bf, (tokens, vocab, hidden), torch_step, genesis_step, 1.0)
    torch_step()
    genesis_step()
    torch.cuda.synchronize()
    genesis.cuda.synchronize()
    base_t, base_g = torch.cuda.memory_allocated(), genesis.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    genesis.cuda.reset_peak_memory_stats()
    torch_step()
    genesis_step()
    torch.cuda.synchronize()
    genesis.cuda.synchronize()
    peak_t = torch.cuda.max_memory_allocated() - base_t
    peak_g = genesis.cuda.max_memory_allocated() - base_g
    rows[-1].update({"torch_peak_GiB": peak_t / 2**30, "genesis_peak_GiB": peak_g / 2**30,
                     "peak_ratio": peak_g / peak_t, "peak_target": 0.25})
    print(f"  {'llm-train':12s} {'  peak memory above inputs':34s} torch "
          f"{peak_t / 2**30:6.2f} GiB  genesis {peak_g / 2**30:6.2f} GiB  genesis/torch "
          f"{peak_g / peak_t:4.2f} (target <= 0.25)", flush=True)

    shapes = _qwen05_shapes()[: 12 if quick else None]
    for dt, gdt in ((torch.float32, genesis.float32), (bf, genesis.bfloat16)):
        tp = [torch.randn(s, device="cuda", dtype=dt).requires_grad_() for s in shapes]
        gp = [genesis.randn(s, device="cuda", dtype=gdt).requires_grad_() for s in shapes]
        for p in tp:
            p.grad = torch.randn_like(p)
        for p in gp:
            p.grad = genesis.randn(p.shape, device="cuda", dtype=gdt)
        t_opt = torch.optim.AdamW(tp, lr=1e-4, weight_decay=0.1, fused=True)
        g_opt = genesis.optim.AdamW(gp, lr=1e-4, weight_decay=0.1, fused=True)
        n = sum(p.numel() for p in tp)
        add("llm-train", f"AdamW fused, {len(shapes)} params ({n / 1e6:.0f}M)", dt, (n,),
            t_opt.step, g_opt.step, 1.0, nbytes=n * dt.itemsize * 7)  # r p,g,m,v; w p,m,v
        del tp, gp, t_opt, g_opt


def _attention(torch, add, to_g, rows, args):
    """Flash attention (issue 9): bf16, causal, head dim 64/128, 16k tokens per call at
    seq 1k-8k, MHA (16 heads) and GQA (16 query : 4 KV heads); forward and forward+backward
    against torch's SDPA (its flash/cuDNN path)."""
    from genesis_cuda.kernels import attention as fa

    F = torch.nn.functional
    dt = torch.bfloat16
    seqs = (1024, 4096) if args.quick else (1024, 2048, 4096, 8192)
    for d in (64, 128):
        for n in seqs:
            b = 16384 // n
            for hq, hk in ((16, 16), (16, 4)):
                q = torch.randn(b, hq, n, d, device="cuda", dtype=dt)
                k = torch.randn(b, hk, n, d, device="cuda", dtype=dt)
                v = torch.randn(b, hk, n, d, device="cuda", dtype=dt)
                g = torch.randn(b, hq, n, d, device="cuda", dtype=dt)
                gq, gk, gv, gg = to_g(q), to_g(k), to_g(v), to_g(g)
                gqa = hq != hk
                scale = d ** -0.5
                label = f"{'GQA 16:4' if gqa else 'MHA 16'} d{d} {b}x{n}"
                fwd_flops = 2 * b * hq * n * n * d  # causal: half of 4*b*h*n*n*d
                qr, kr, vr = (t.detach().requires_grad_(True) for t in (q, k, v))

                def t_fwd():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                          enable_gqa=gqa)

                def g_fwd():
                    return fa.scaled_dot_product_attention(gq, gk, gv, None, 0.0, True, scale,
                                                           None)

                def t_both():
                    out = F.scaled_dot_product_attention(qr, kr, vr, is_causal=True,
                                                         enable_gqa=gqa)
                    return torch.autograd.grad(out, (qr, kr, vr), g)

                def g_both():
                    out, lse, rng = g_fwd()
                    return fa.scaled_dot_product_attention_backward(
                        gg, gq, gk, gv, out, lse, None, 0.0, True, scale, rng)

                try:
                    add("attention", f"flash fwd {label}", dt, (b, hq, n, d), t_fwd, g_fwd, 0.9)
                    rows[-1]["genesis_TFLOPs"] = fwd_flops / rows[-1]["genesis_ms"] / 1e9
                    rows[-1]["torch_TFLOPs"] = fwd_flops / rows[-1]["torch_ms"] / 1e9
                    add("attention", f"flash fwd+bwd {label}", dt, (b, hq, n, d), t_both,
                        g_both, 0.85)
                    rows[-1]["genesis_TFLOPs"] = 3.5 * fwd_flops / rows[-1]["genesis_ms"] / 1e9
                    rows[-1]["torch_TFLOPs"] = 3.5 * fwd_flops / rows[-1]["torch_ms"] / 1e9
                except Exception as exc:  # report, keep the rest of the table
                    print(f"  attention {label}: {type(exc).__name__}: {exc}", flush=True)


def _overhead(torch, garr, ew, D):
    """Host time per tiny op: a synchronised loop of 16-element adds."""
    a_t = torch.ones(16, device="cuda")
    b_t = torch.ones(16, device="cuda")
    ga = garr.empty((16,), D.float32, 0)
    gb = garr.empty((16,), D.float32, 0)
    ew.fill_(ga, 1.0)
    ew.fill_(gb, 1.0)
    kadd = ew.binary_kernel("add")

    def loop(fn, iters=5000):
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - t0) / iters)
        return best * 1e3  # ms

    tt = loop(lambda: a_t + b_t)
    gt = loop(lambda: kadd(ga, gb))
    print(f"  {'host':12s} {'add 16 elements (per op)':34s} {'float32':9s} torch {tt*1e3:9.2f} "
          f"us  genesis {gt*1e3:9.2f} us  ratio {tt/gt:5.2f}", flush=True)
    return {"group": "host", "name": "add 16 elements (per op, host)", "dtype": "float32",
            "shape": [16], "torch_ms": tt, "genesis_ms": gt, "ratio": tt / gt, "target": 0.5}


# Candidate ``attention.Tile``s (BM, BN, warps, stages[, tma[, trans[, maxnreg]]]) of the
# attention sweep per (kernel, head dim): the forward and dQ kernels hold BM query rows and
# walk BN-key blocks, dK/dV holds BN keys and walks BM-row query blocks; tma: streamed
# operands through device-side TMA descriptors; trans (dK/dV): keys-by-queries tiles;
# maxnreg 128: two 8-warp programs per SM. Picked among configs that compile for sm_90
# without register spills (ptxas), plus the shipped ones; about 14 each, so that the whole
# sweep compiles and times in about 3 minutes on an H100.
_ATTN_CANDIDATES = {
    ("fwd", 64): [(128, 64, 8, 3), (128, 64, 8, 2), (128, 64, 8, 4), (128, 128, 8, 2),
                  (128, 128, 8, 3), (128, 64, 4, 4), (128, 32, 4, 3), (64, 64, 4, 3),
                  (64, 64, 4, 4), (64, 128, 4, 3), (128, 64, 8, 3, True), (128, 64, 8, 2, True),
                  (128, 128, 8, 2, True), (64, 64, 4, 3, True)],
    ("fwd", 128): [(128, 64, 8, 3), (128, 64, 8, 2), (128, 64, 8, 4), (128, 128, 8, 2),
                   (128, 32, 8, 3), (64, 64, 4, 2), (64, 64, 4, 3), (64, 32, 4, 3),
                   (64, 32, 4, 4), (128, 64, 8, 3, True), (128, 64, 8, 2, True),
                   (128, 128, 8, 2, True), (64, 64, 4, 3, True), (128, 32, 8, 3, True),
                   (128, 64, 8, 2, True, False, 128), (128, 64, 8, 3, True, False, 128)],
    ("dkdv", 64): [(64, 64, 4, 3), (64, 64, 4, 2), (64, 64, 4, 2, False, True),
                   (64, 64, 4, 3, False, True), (32, 64, 4, 3, False, True),
                   (32, 64, 4, 2, False, True), (32, 128, 8, 2, False, True),
                   (32, 128, 8, 3, False, True), (64, 128, 8, 2, False, True),
                   (64, 128, 8, 3, False, True), (16, 128, 8, 3, False, True),
                   (64, 64, 4, 3, True, True), (32, 128, 8, 3, True, True),
                   (64, 128, 8, 2, True, True)],
    ("dkdv", 128): [(64, 64, 4, 2), (64, 64, 4, 2, False, True), (32, 64, 4, 2, False, True),
                    (32, 64, 4, 3, False, True), (16, 64, 4, 3, False, True),
                    (32, 128, 8, 2, False, True), (32, 128, 8, 3, False, True),
                    (16, 128, 8, 2, False, True), (16, 128, 8, 3, False, True),
                    (16, 64, 4, 2, False, True), (32, 128, 8, 2, True, True),
                    (32, 64, 4, 3, True, True), (16, 128, 8, 3, True, True),
                    (16, 64, 4, 2, True, True)],
    ("dq", 64): [(64, 64, 4, 3), (64, 64, 4, 2), (128, 32, 4, 3), (128, 32, 4, 4),
                 (128, 32, 4, 5), (128, 64, 8, 2), (128, 64, 8, 3), (64, 32, 4, 3),
                 (64, 32, 4, 5), (128, 16, 4, 4), (64, 128, 8, 2), (64, 64, 4, 3, True),
                 (128, 32, 4, 3, True), (128, 64, 8, 3, True)],
    ("dq", 128): [(64, 64, 4, 2), (64, 64, 4, 3), (128, 32, 8, 3), (128, 32, 8, 4),
                  (128, 64, 8, 2), (128, 64, 8, 3), (64, 32, 4, 3), (64, 32, 4, 5),
                  (64, 16, 4, 4), (128, 16, 8, 4), (64, 64, 8, 2), (64, 64, 4, 2, True),
                  (128, 32, 8, 3, True), (128, 64, 8, 3, True)],
}


def _attention_calls(fa, q, k, v, grad, out, lse):
    """(forward, backward) of genesis's flash kernels on these arrays, causal, as closures."""
    scale = q.shape[-1] ** -0.5

    def fwd():
        return fa.scaled_dot_product_attention(q, k, v, None, 0.0, True, scale, None)

    def bwd():
        return fa.scaled_dot_product_attention_backward(grad, q, k, v, out, lse, None, 0.0,
                                                        True, scale, None)

    return fwd, bwd


def _attention_sweep(torch, to_g, bench):
    """Tiles of the flash attention kernels at bf16, causal, 4 x 4096, 16 query heads: each
    candidate of ``_ATTN_CANDIDATES`` timed on MHA and GQA 16:4 against torch's SDPA
    (forward; the whole backward for dK/dV and dQ, dK/dV first with the current dQ tiles,
    then dQ with the best dK/dV ones). Ends with the best tables as lines to paste into
    ``attention.py`` (the tables there are not changed)."""
    from genesis_cuda.kernels import attention as fa

    F = torch.nn.functional
    tables = {"fwd": fa.FWD_TILES, "dkdv": fa.DKDV_TILES, "dq": fa.DQ_TILES}
    saved = {name: dict(t) for name, t in tables.items()}
    best = {name: dict(t) for name, t in tables.items()}
    b, n = 4, 4096
    for d in (64, 128):
        cases = []
        for hk in (16, 4):
            q = torch.randn(b, 16, n, d, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(b, hk, n, d, device="cuda", dtype=torch.bfloat16)
                    for _ in range(2))
            g = torch.randn_like(q)
            gq, gk, gv, gg = to_g(q), to_g(k), to_g(v), to_g(g)
            gqa = hk != 16
            tf = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                              enable_gqa=gqa))
            out, lse, _ = fa.scaled_dot_product_attention(gq, gk, gv, None, 0.0, True,
                                                          d ** -0.5, None)
            qr, kr, vr = (t.detach().requires_grad_(True) for t in (q, k, v))
            yr = F.scaled_dot_product_attention(qr, kr, vr, is_causal=True, enable_gqa=gqa)
            tb = bench(lambda: torch.autograd.grad(yr, (qr, kr, vr), g, retain_graph=True))
            cases.append((hk, tf, tb, *_attention_calls(fa, gq, gk, gv, gg, out, lse)))
            print(f"attention tiles, d {d}, heads 16:{hk}, {b}x{n}: torch fwd {tf*1e3:.0f} us, "
                  f"bwd {tb*1e3:.0f} us", flush=True)
        for kernel in ("fwd", "dkdv", "dq"):
            table = tables[kernel]
            top = None
            for cand in _ATTN_CANDIDATES[(kernel, d)]:
                tile = table[d] = fa.Tile(*cand)
                label = f"  {kernel:4s} d{d} BM {tile.bm:3d} BN {tile.bn:3d} warps " \
                        f"{tile.warps} stages {tile.stages}{' TMA' if tile.tma else ''}" \
                        f"{' TRANS' if tile.trans else ''}" \
                        f"{f' maxnreg {tile.maxnreg}' if tile.maxnreg else ''}:"
                try:
                    times, ratios = 0.0, []
                    for hk, tf, tb, g_fwd, g_bwd in cases:
                        gt = bench(g_fwd if kernel == "fwd" else g_bwd)
                        times += gt
                        ratios.append(f"16:{hk} {gt*1e3:6.0f} us ratio "
                                      f"{(tf if kernel == 'fwd' else tb) / gt:5.2f}")
                    print(f"{label} {' | '.join(ratios)}", flush=True)
                    if top is None or times < top[0]:
                        top = (times, tile)
                except Exception as exc:  # e.g. out of shared memory or registers
                    print(f"{label} {type(exc).__name__}: {str(exc)[:80]}", flush=True)
            table[d] = top[1] if top is not None else saved[kernel][d]
            best[kernel][d] = table[d]  # the next kernel's sweep runs with this one's best
    for name, t in tables.items():
        t.clear()
        t.update(saved[name])
    print("best attention tiles (paste into genesis_cuda/kernels/attention.py):")
    for name, var in (("fwd", "FWD_TILES"), ("dkdv", "DKDV_TILES"), ("dq", "DQ_TILES")):
        print(f"{var} = {{" + "".join(f"\n    {d}: {t!r}," for d, t in best[name].items())
              + "\n}", flush=True)


def _sweep(torch, ew, red, norms, to_g, bench):
    """Launch parameters of the kernels behind the rows nearest their targets, each
    against torch's time for the same work (printed only)."""
    def show(label, gt, tt):
        print(f"  {label:48s} {gt*1e3:7.1f} us (torch {tt*1e3:7.1f}) ratio {tt/gt:5.2f}",
              flush=True)

    print("sweep of the flat elementwise kernel (16M elements):", flush=True)
    saved = (ew.FLAT_BYTES, ew.FLAT_WARPS)
    for dt in (torch.float32, torch.bfloat16):
        x = torch.randn(2**24, device="cuda", dtype=dt)
        y = torch.randn(2**24, device="cuda", dtype=dt)
        gx, gy = to_g(x), to_g(y)
        for op, operand, tfn in (("add", gy, lambda: x + y), ("mul", 1.5, lambda: x * 1.5)):
            tt = bench(tfn)
            for nbytes in (4096, 8192, 16384):
                for warps in (2, 4, 8):
                    ew.FLAT_BYTES, ew.FLAT_WARPS = nbytes, warps
                    ew._binary_cache.clear()
                    k = ew.binary_kernel(op)
                    k(gx, operand)
                    show(f"{op} {str(dt)[6:]} bytes/prog {nbytes} warps {warps}",
                         bench(lambda: k(gx, operand)), tt)
    ew.FLAT_BYTES, ew.FLAT_WARPS = saved
    ew._binary_cache.clear()

    print("sweep of the column-reduction tile (amax over the first dim, 4096^2):", flush=True)
    saved = red.COLUMN_TILE
    for dt in (torch.float32, torch.bfloat16):
        x = torch.randn(4096, 4096, device="cuda", dtype=dt)
        gx = to_g(x)
        tt = bench(lambda: torch.amax(x, 0))
        for tile in (4096, 8192, 16384):
            red.COLUMN_TILE = tile
            red.amax(gx, (0,), False)
            show(f"amax {str(dt)[6:]} tile {tile}", bench(lambda: red.amax(gx, (0,), False)),
                 tt)
    red.COLUMN_TILE = saved

    print("sweep of layer_norm backward (bf16, 16M elements):", flush=True)
    for n in (1024, 4096, 8192):
        m = 2**24 // n
        x, g = (torch.randn(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        w, b = (torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        _, mean, rstd = torch.ops.aten.native_layer_norm(x, [n], w, b, 1e-5)
        tt = bench(lambda: torch.ops.aten.native_layer_norm_backward(
            g, x, [n], mean, rstd, w, b, [True, True, True]))
        gx, gg, gw = to_g(x), to_g(g), to_g(w)
        _, gmean, grstd = norms.layer_norm(gx, gw, gw, 1e-5)
        for warps in (4, 8, 16):
            for pps in (1, 2, 4, 8):
                if warps * pps > 64:
                    continue
                norms.BWD_WARPS, norms.BWD_PROGS_PER_SM = warps, pps
                norms.layer_norm_backward(gg, gx, gw, gmean, grstd)
                show(f"n {n} warps {warps} progs/SM {pps}",
                     bench(lambda: norms.layer_norm_backward(gg, gx, gw, gmean, grstd)), tt)
    norms.BWD_WARPS = norms.BWD_PROGS_PER_SM = 0


# ------------------------------------------------------------------------ reports
def _fmt_row(r):
    t = r.get("target")
    ok = "" if t is None else ("yes" if r["ratio"] >= t else "NO")
    bw = f"{r['genesis_TBps']:.2f}" if "genesis_TBps" in r else \
        (f"{r['genesis_TFLOPs']:.0f} TF" if "genesis_TFLOPs" in r else "")
    return (r["group"], r["name"], r["dtype"], f"{r['torch_ms']*1e3:.1f}",
            f"{r['genesis_ms']*1e3:.1f}", f"{r['ratio']:.2f}",
            "" if t is None else f">= {t:g}" if r["group"] != "host" else "<= 2x time", ok, bw)


HEAD = ("group", "op", "dtype", "torch us", "genesis us", "ratio", "target", "met", "genesis TB/s")


def _print(doc):
    print(f"\n{doc['device']} (torch {doc['torch']}, triton {doc['triton']}); "
          f"D2D copy ceiling {doc['copy_TBps']:.2f} TB/s; ratio = torch time / genesis time")
    widths = [12, 34, 9, 10, 10, 6, 11, 4, 12]
    print(" ".join(h.ljust(w) for h, w in zip(HEAD, widths)))
    for r in doc["rows"]:
        print(" ".join(str(c).ljust(w) for c, w in zip(_fmt_row(r), widths)))


def _write_md(doc, out, name="ops"):
    lines = [f"# Op benchmark: genesis vs torch ({doc['device']})", "",
             f"torch {doc['torch']}, triton {doc['triton']}, {doc['date']}. "
             f"Ratio = torch time / genesis time (above 1: genesis is faster). Device-to-device "
             f"copy ceiling measured in the same run: {doc['copy_TBps']:.2f} TB/s (read + write). "
             "Medians of `triton.testing.do_bench`; the host row is a synchronised loop.",
             f"Produced by `python tools/bench/ops.py"
             f"{' --attention-only' if name == 'attention' else ''}`.", "",
             "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for r in doc["rows"]:
        lines.append("| " + " | ".join(_fmt_row(r)) + " |")
    with open(os.path.join(out, f"{name}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def _plot(doc, out, name="ops"):
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


if __name__ == "__main__":
    main()
