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
    from genesis_cuda.kernels import attention_backward as fab

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
                    return fab.scaled_dot_product_attention_backward(
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


def _attention_calls(fa, fab, q, k, v, grad, out, lse):
    """(forward, backward) of genesis's flash kernels on these arrays, causal, as closures."""
    scale = q.shape[-1] ** -0.5

    def fwd():
        return fa.scaled_dot_product_attention(q, k, v, None, 0.0, True, scale, None)

    def bwd():
        return fab.scaled_dot_product_attention_backward(grad, q, k, v, out, lse, None, 0.0,
                                                         True, scale, None)

    return fwd, bwd


def attention_sweep(ctx):
    """Tiles of the flash attention kernels at bf16, causal, 4 x 4096, 16 query heads: each
    candidate of ``_ATTN_CANDIDATES`` timed on MHA and GQA 16:4 against torch's SDPA
    (forward; the whole backward for dK/dV and dQ, dK/dV first with the current dQ tiles,
    then dQ with the best dK/dV ones). Ends with the best tables as lines to paste into
    ``attention.py`` (the tables there are not changed)."""
    torch, to_g, bench = ctx.torch, ctx.to_g, ctx.bench
    from genesis_cuda.kernels import attention as fa
    from genesis_cuda.kernels import attention_backward as fab

    F = torch.nn.functional
    tables = {"fwd": fa.FWD_TILES, "dkdv": fab.DKDV_TILES, "dq": fab.DQ_TILES}
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
            cases.append((hk, tf, tb, *_attention_calls(fa, fab, gq, gk, gv, gg, out, lse)))
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
