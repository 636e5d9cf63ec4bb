"""Op benchmark sections for the flat kernels: elementwise, reductions, softmax and norms,
the host overhead row, and the sweep of their launch parameters (``ops.py --sweep``)."""

# The timed lambdas are built and used within one loop iteration (add() calls them at once).
# ruff: noqa: B023

from __future__ import annotations

import time


def core_rows(ctx):
    """Elementwise (flat and transposed), reductions, softmax and norms: fp32 and bf16."""
    torch, add, to_g, gview, D = ctx.torch, ctx.add, ctx.to_g, ctx.gview, ctx.D
    from genesis_cuda.kernels import elementwise as ew
    from genesis_cuda.kernels import norms
    from genesis_cuda.kernels import reduction as red
    from genesis_cuda.kernels import softmax as sm

    dev = "cuda"
    quick = ctx.quick
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
        if not quick:
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
        if not quick:
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


def overhead_row(ctx):
    """Host time per tiny op: a synchronised loop of 16-element adds."""
    torch, garr, ew, D = ctx.torch, ctx.garr, ctx.ew, ctx.D
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


def core_sweep(ctx):
    """Launch parameters of the kernels behind the rows nearest their targets, each
    against torch's time for the same work (printed only)."""
    torch, to_g, bench = ctx.torch, ctx.to_g, ctx.bench
    from genesis_cuda.kernels import elementwise as ew
    from genesis_cuda.kernels import norms
    from genesis_cuda.kernels import reduction as red

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
