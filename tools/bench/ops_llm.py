"""Op benchmark section: whole LLM-training ops through genesis's public API (``--only-llm``)."""

from __future__ import annotations

from ops_common import QWEN05


def qwen05_shapes():
    """Parameter shapes of Qwen2.5-0.5B (tied embeddings: the vocab matrix once)."""
    h, kv, f = QWEN05["hidden"], QWEN05["kv"], QWEN05["ffn"]
    layer = [(h, h), (h,), (kv, h), (kv,), (kv, h), (kv,), (h, h), (f, h), (f, h), (h, f),
             (h,), (h,)]
    return [(QWEN05["vocab"], h)] + layer * QWEN05["layers"] + [(h,)]


def llm_training(ctx):
    """Whole-op rows through genesis's public API (Function + backend): linear +
    cross-entropy (time and peak memory, forward + backward) and a multi-tensor AdamW step
    over Qwen2.5-0.5B's parameters, each against torch eager on the same GPU."""
    torch, add, rows, quick = ctx.torch, ctx.add, ctx.rows, ctx.quick
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

    shapes = qwen05_shapes()[: 12 if quick else None]
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
