"""Op benchmark section: flash attention against torch's SDPA (``--attention-only``)."""

# The timed lambdas are built and used within one loop iteration (add() calls them at once).
# ruff: noqa: B023

from __future__ import annotations


def attention_rows(ctx):
    """Flash attention (issue 9): bf16, causal, head dim 64/128, 16k tokens per call at
    seq 1k-8k, MHA (16 heads) and GQA (16 query : 4 KV heads); forward and forward+backward
    against torch's SDPA (its flash/cuDNN path)."""
    torch, add, to_g, rows = ctx.torch, ctx.add, ctx.to_g, ctx.rows
    from genesis_cuda.kernels import attention as fa

    F = torch.nn.functional
    dt = torch.bfloat16
    seqs = (1024, 4096) if ctx.quick else (1024, 2048, 4096, 8192)
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


def attention_sweep(ctx):
    """Tiles (BM, BN, warps, stages) of the flash attention kernels at bf16, causal, 4 x 4096,
    16 query heads (MHA and GQA 16:4), each against torch's SDPA (printed only; the tables are
    ``attention.FWD_TILES`` / ``BWD_TILES``)."""
    torch, to_g, bench = ctx.torch, ctx.to_g, ctx.bench
    from genesis_cuda.kernels import attention as fa

    F = torch.nn.functional
    saved = dict(fa.FWD_TILES), dict(fa.BWD_TILES)
    b, n = 4, 4096
    for d in (64, 128):
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
            print(f"attention tiles, d {d}, heads 16:{hk}, {b}x{n} (torch fwd {tf*1e3:.0f} us, "
                  f"bwd {tb*1e3:.0f} us):", flush=True)
            for bm, bn, w, st in ((64, 64, 4, 3), (128, 64, 4, 3), (128, 64, 8, 3),
                                  (128, 128, 8, 3), (128, 32, 4, 4), (128, 64, 4, 4)):
                fa.FWD_TILES[d] = (bm, bn, w, st)
                try:
                    gt = bench(lambda: fa.scaled_dot_product_attention(
                        gq, gk, gv, None, 0.0, True, d ** -0.5, None))
                    print(f"  fwd BM {bm} BN {bn} warps {w} stages {st}: {gt*1e3:7.0f} us "
                          f"ratio {tf/gt:5.2f}", flush=True)
                except Exception as exc:  # e.g. out of shared memory
                    print(f"  fwd BM {bm} BN {bn} warps {w} stages {st}: {type(exc).__name__}")
            fa.FWD_TILES.update(saved[0])
            for bm, bn, w, st in ((32, 32, 4, 2), (64, 64, 4, 2), (64, 64, 8, 2),
                                  (64, 64, 4, 3), (128, 64, 8, 2), (64, 128, 8, 2)):
                fa.BWD_TILES[d] = (bm, bn, w, st)
                try:
                    gt = bench(lambda: fa.scaled_dot_product_attention_backward(
                        gg, gq, gk, gv, out, lse, None, 0.0, True, d ** -0.5, None))
                    print(f"  bwd BM {bm} BN {bn} warps {w} stages {st}: {gt*1e3:7.0f} us "
                          f"ratio {tb/gt:5.2f}", flush=True)
                except Exception as exc:
                    print(f"  bwd BM {bm} BN {bn} warps {w} stages {st}: {type(exc).__name__}")
            fa.BWD_TILES.update(saved[1])
