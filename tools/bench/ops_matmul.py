"""Op benchmark sections for matmul: square products, and the shapes an LLM trains and decodes
with (``ops.py --matmul-training``).

* Training (issue 9): the three products of each Qwen2.5-0.5B linear layer over 8k and 16k
  tokens, bf16: forward ``x @ W.T``, input gradient ``g @ W``, weight gradient ``g.T @ x``
  (a transposed view, as autograd passes it). Target: genesis within 0.95 of torch's time.
* Decode (issue 10): the same layers at M = 1, 8, 32 rows (one decode step of a batch),
  bias where Qwen2.5 has one; the achieved weight-streaming bandwidth is printed beside the
  ratio, and a summary line adds up one decode step's linears (24 layers + lm_head).
* ``--sweep``: the small-M table (``matmul_small.SMALL_M_TILES``) over
  every decode shape (best per shape and best single table entry), and per training-shape
  bucket the config the autotuner picked with its fastest candidates' times.

Every row first checks genesis's result against torch's (relative error of the whole output).
"""

# The timed lambdas are built and used within one loop iteration (add() calls them at once).
# ruff: noqa: B023

from __future__ import annotations

from ops_common import QWEN05

DECODE_ROWS = (1, 8, 32)


def qwen05_linears():
    """``(name, in_features, out_features, bias)`` of Qwen2.5-0.5B's distinct linear shapes
    (o_proj is q_proj's shape without bias, v_proj is k_proj's, up_proj is gate_proj's)."""
    h, kv, f, v = QWEN05["hidden"], QWEN05["kv"], QWEN05["ffn"], QWEN05["vocab"]
    return [("q_proj", h, h, True), ("k_proj", h, kv, True), ("gate_proj", h, f, False),
            ("down_proj", f, h, False), ("lm_head", h, v, False)]


# how many of each shape one decode step runs (24 layers: q+o, k+v, gate+up, down; lm_head)
_PER_STEP = {"q_proj": 2 * 24, "k_proj": 2 * 24, "gate_proj": 2 * 24, "down_proj": 24,
             "lm_head": 1}


def _checker(ctx, tfn, gfn, tol=1e-2):
    """``check()``: genesis's output equals torch's within ``tol`` (relative, whole tensor)."""
    def check():
        want = tfn()
        got = ctx.to_t(gfn())
        diff = ref = 0.0
        for i in range(0, want.shape[0], 2048):  # in row blocks: no float32 copy of it all
            w_, g_ = want[i:i + 2048].float(), got[i:i + 2048].float()
            diff += (g_ - w_).square().sum().item()
            ref += w_.square().sum().item()
        err = (diff / max(ref, 1e-30)) ** 0.5
        if not err < tol:
            raise AssertionError(f"genesis result differs from torch's: relative error {err:.3g}")
    return check


def square_rows(ctx):
    """bf16 and fp16 ``n x n @ n x n``, n = 4096 (and 8192 unless quick)."""
    from genesis_cuda.kernels import matmul as mm

    torch, add, to_g, rows = ctx.torch, ctx.add, ctx.to_g, ctx.rows
    for dt in (torch.bfloat16, torch.float16):
        for n in ((4096,) if ctx.quick else (4096, 8192)):
            a = torch.randn(n, n, device="cuda", dtype=dt)
            b_ = torch.randn(n, n, device="cuda", dtype=dt)
            ga, gb_ = to_g(a), to_g(b_)
            try:
                add("matmul", f"matmul {n}^3", dt, (n, n, n), lambda: a @ b_,
                    lambda: mm.matmul(ga, gb_), 0.9)
                rows[-1]["genesis_TFLOPs"] = 2 * n**3 / rows[-1]["genesis_ms"] / 1e9
                rows[-1]["torch_TFLOPs"] = 2 * n**3 / rows[-1]["torch_ms"] / 1e9
            except Exception as exc:  # report, keep the rest of the table
                print(f"  matmul {n} {dt}: {type(exc).__name__}: {exc}", flush=True)


def training_rows(ctx):
    """Forward, input-gradient and weight-gradient products of each linear shape, bf16."""
    from genesis_cuda.kernels import matmul as mm

    torch, add, to_g, rows = ctx.torch, ctx.add, ctx.to_g, ctx.rows
    F = torch.nn.functional
    bf = torch.bfloat16
    for tokens in ((8192,) if ctx.quick else (8192, 16384)):
        for name, fin, fout, has_bias in qwen05_linears():
            x = torch.randn(tokens, fin, device="cuda", dtype=bf)
            w = torch.randn(fout, fin, device="cuda", dtype=bf) * fin ** -0.5
            b = torch.randn(fout, device="cuda", dtype=bf) if has_bias else None
            g = torch.randn(tokens, fout, device="cuda", dtype=bf) * tokens ** -0.5
            gx, gw, gg = to_g(x), to_g(w), to_g(g)
            gb = to_g(b) if has_bias else None
            g_t = ctx.gview(gg, g.t(), g)  # (out, tokens): autograd's g2.mT
            products = (
                ("fwd x@W.T", (tokens, fout, fin), lambda: F.linear(x, w, b),
                 lambda: mm.linear(gx, gw, gb)),
                ("dgrad g@W", (tokens, fin, fout), lambda: g @ w, lambda: mm.matmul(gg, gw)),
                ("wgrad g.T@x", (fout, fin, tokens), lambda: g.t() @ x,
                 lambda: mm.matmul(g_t, gx)),
            )
            for label, (m, n, k), tfn, gfn in products:
                try:
                    add("matmul-train", f"{name} {label} {tokens // 1024}k tok", bf, (m, n, k),
                        tfn, gfn, 0.95, check=_checker(ctx, tfn, gfn))
                    rows[-1]["genesis_TFLOPs"] = 2 * m * n * k / rows[-1]["genesis_ms"] / 1e9
                    rows[-1]["torch_TFLOPs"] = 2 * m * n * k / rows[-1]["torch_ms"] / 1e9
                except Exception as exc:  # report, keep the rest of the table
                    print(f"  {name} {label} {tokens}: {type(exc).__name__}: {exc}", flush=True)


_COLD_BYTES = 160e6  # weights cycled through per timing: over three times an H100/H200's L2


def _cold_weights(torch, fout, fin, scale=1.0):
    """Distinct (fout, fin) bf16 weights, together ``_COLD_BYTES`` or more (at most 40): a
    decode step reads each layer's weight once, never from the L2 cache."""
    n = max(2, min(40, int(_COLD_BYTES // (2 * fout * fin)) + 1))
    return [torch.randn(fout, fin, device="cuda", dtype=torch.bfloat16) * scale
            for _ in range(n)]


def decode_rows(ctx):
    """Each linear shape at M = 1, 8, 32 rows (bf16, bias where Qwen2.5 has one), timed as a
    captured decode step runs them (``graph_ms``: one CUDA graph of products over distinct
    weights, cold in L2), then one decode step's linears added up (time per step and the
    tok/s it would allow)."""
    from genesis_cuda.kernels import matmul as mm

    torch, to_g = ctx.torch, ctx.to_g
    F = torch.nn.functional
    bf = torch.bfloat16
    step = {m: [0.0, 0.0] for m in DECODE_ROWS}  # rows -> [torch ms, genesis ms]
    for name, fin, fout, has_bias in qwen05_linears():
        ws = _cold_weights(torch, fout, fin, fin ** -0.5)
        b = torch.randn(fout, device="cuda", dtype=bf) if has_bias else None
        gws = [to_g(w) for w in ws]
        gb = to_g(b) if has_bias else None
        for m in DECODE_ROWS:
            x = torch.randn(m, fin, device="cuda", dtype=bf)
            gx = to_g(x)
            nbytes = 2 * (fout * fin + m * fin + m * fout)
            tfns = [lambda w=w: F.linear(x, w, b) for w in ws]
            gfns = [lambda w=w: mm.linear(gx, w, gb) for w in gws]
            try:
                _checker(ctx, tfns[0], gfns[0])()
                tt, gt = ctx.graph_ms(tfns, "torch"), ctx.graph_ms(gfns, "genesis")
                row = ctx.record("matmul-decode", f"{name} M={m} {fin}->{fout}", bf,
                                 (m, fout, fin), tt, gt, 0.95, nbytes=nbytes)
                step[m][0] += _PER_STEP[name] * row["torch_ms"]
                step[m][1] += _PER_STEP[name] * row["genesis_ms"]
            except Exception as exc:  # report, keep the rest of the table
                print(f"  {name} M={m}: {type(exc).__name__}: {exc}", flush=True)
        del ws, gws
    for m, (tt, gt) in step.items():
        print(f"  decode step linears, batch {m}: torch {tt:.3f} ms ({1e3 / tt:,.0f} steps/s), "
              f"genesis {gt:.3f} ms ({1e3 / gt:,.0f} steps/s) (sum of the graph-timed rows "
              "above)", flush=True)


def training_section(ctx, sweep: bool):
    """``--matmul-training``: decode rows, then training rows (``sweep``: sweeps too)."""
    if sweep:
        small_m_sweep(ctx)
    decode_rows(ctx)
    training_rows(ctx)
    if sweep:
        print_tuning()


def print_tuning(top: int = 6):
    """Per autotuned problem bucket: the config picked and the ``top`` fastest candidates
    with their times relative to the fastest (from ``matmul_tuning.timings``), so that a
    table change can be judged from one run."""
    from genesis_cuda.kernels import matmul_tuning as mt

    print("autotuned buckets (kind, dtype, A_T, B_T, batched, M, N, K, batch buckets); "
          "'s' = split-K (waves, tile), 'p' = persistent:", flush=True)
    for key, cfg in mt.tuned.items():
        print(f"  {key} -> {cfg}", flush=True)
        ranked = sorted(mt.timings.get(key, []), key=lambda ct: ct[1])
        if not ranked:
            continue
        best = ranked[0][1]
        for cand, t in ranked[:top]:
            print(f"      {t * 1e6:9.1f} us  x{t / best:5.2f}  {cand}", flush=True)
        splits = [ct for ct in ranked if ct[0][0] == "s"]
        plain = [ct for ct in ranked if ct[0][0] != "s"]
        if splits and plain:
            print(f"      best split-K {splits[0][1] * 1e6:.1f} us {splits[0][0]}, best unsplit "
                  f"{plain[0][1] * 1e6:.1f} us {plain[0][0]}", flush=True)


def small_m_sweep(ctx):
    """Tiles, shortest K-chunks and waves of the small-M kernel on every decode shape, each
    against torch, timed as a captured decode step runs them (``graph_ms``, cold weights);
    then per kernel flavour (M = 1: CUDA-core GEMV; M = 8, 32: swapped tensor-core dot) the
    best config per shape and the one config with the least time per decode step (each shape
    weighted by how often a step runs it): an entry of ``matmul_small.SMALL_M_TILES``.
    Printed only."""
    from genesis_cuda.kernels import matmul as mm
    from genesis_cuda.kernels import matmul_small as ms

    torch, to_g = ctx.torch, ctx.to_g
    bf = torch.bfloat16
    saved = dict(ms.SMALL_M_TILES)
    # (BLOCK_N, BLOCK_K, warps, stages) per kernel flavour
    tiles = {1: ((8, 256, 4, 3), (8, 512, 4, 3), (16, 128, 4, 3), (16, 256, 2, 3),
                 (16, 256, 4, 3), (32, 128, 4, 3), (32, 256, 4, 3), (64, 128, 8, 3)),
             16: ((32, 128, 4, 4), (64, 128, 4, 4), (64, 256, 4, 3), (128, 128, 4, 3),
                  (128, 128, 8, 3))}
    results = {}  # (m, tile, min_tiles, waves) -> {shape: (genesis ms, torch ms)}
    print("sweep of the small-M kernel (bf16, x @ W.T, no bias):", flush=True)
    try:
        for m in (1, 8, 32):
            bm = 1 if m == 1 else max(16, 1 << (m - 1).bit_length())
            for name, fin, fout, _ in qwen05_linears():
                ws = _cold_weights(torch, fout, fin)
                x = torch.randn(m, fin, device="cuda", dtype=bf)
                gx, gws = to_g(x), [to_g(w) for w in ws]
                tt = ctx.graph_ms([lambda w=w: torch.nn.functional.linear(x, w) for w in ws],
                                  "torch")
                gbytes = 2 * fout * fin / 1e9
                for tile in tiles[1 if m == 1 else 16]:
                    for waves in (0, 1, 2, 4):  # 0: no split-K
                        for min_tiles in (1, 4):  # shortest K-chunk, in K-tiles
                            ms.SMALL_M_TILES[bm] = tile + (min_tiles, waves)
                            mm._plans.clear()
                            try:
                                gt = ctx.graph_ms([lambda w=w: mm.linear(gx, w, None)
                                                   for w in gws], "genesis")
                            except Exception as exc:  # e.g. out of shared memory
                                print(f"  M={m} {name} {tile} waves {waves}: "
                                      f"{type(exc).__name__}")
                                continue
                            key = (m, tile, min_tiles, waves)
                            results.setdefault(key, {})[name] = (gt, tt)
                            print(f"  M={m:2d} {name:9s} BN,BK,warps,stages {str(tile):18s} "
                                  f"min {min_tiles} waves {waves}: {gt*1e3:7.2f} us "
                                  f"({gbytes / gt:5.2f} TB/s; torch {tt*1e3:7.2f} us) "
                                  f"ratio {tt/gt:5.2f}", flush=True)
                del ws, gws
    finally:
        ms.SMALL_M_TILES.clear()
        ms.SMALL_M_TILES.update(saved)
        mm._plans.clear()
    names = [s[0] for s in qwen05_linears()]
    for m in (1, 8, 32):
        bm = 1 if m == 1 else max(16, 1 << (m - 1).bit_length())
        mine = {k: v for k, v in results.items() if k[0] == m and len(v) == len(names)}
        if not mine:
            continue
        print(f"  M={m}: best per shape (ratio = torch / genesis):", flush=True)
        for name in names:
            k, (gt, tt) = min(((k, v[name]) for k, v in mine.items()), key=lambda kv: kv[1][0])
            print(f"    {name:9s} {str(k[1]):18s} min {k[2]} waves {k[3]}: {gt*1e3:7.2f} us, "
                  f"torch {tt*1e3:7.2f} us, ratio {tt/gt:5.2f}", flush=True)

        def step_ms(v, which=0):
            return sum(_PER_STEP[name] * times[which] for name, times in v.items())

        k_best = min(mine, key=lambda k: step_ms(mine[k]))
        now = mine.get((m, saved[bm][:4], saved[bm][4], saved[bm][5]))
        print(f"    one table entry: SMALL_M_TILES[{bm}] = {k_best[1] + k_best[2:]}: "
              f"{step_ms(mine[k_best]):.3f} ms per decode step's linears (torch "
              f"{step_ms(mine[k_best], 1):.3f})"
              + (f"; current {saved[bm]}: {step_ms(now):.3f} ms" if now else ""), flush=True)
