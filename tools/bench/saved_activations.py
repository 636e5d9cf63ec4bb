"""What the forward keeps for the backward: genesis vs torch, per op, for decoder.py's model.

    python tools/bench/saved_activations.py [--model narrow] [--seq 256] [--setting bf16|amp|both]
                                            [--out FILE]

Runs one forward of ``tools/bench/decoder.py``'s model (``build_model``) under genesis and
under torch on the CPU, from the same weights and tokens, and sums the bytes of the distinct
storages each keeps alive for the backward:

* torch: every tensor packed by ``torch.autograd.graph.saved_tensors_hooks`` during the
  forward;
* genesis: the autograd graph walked from the loss (``genesis.autograd.saved``): each node's
  ``save_for_backward`` tensors and the tensors it keeps as ``ctx`` attributes.

Each storage is counted once, under ``Saver<-Producer``: the first node (in graph order from
the loss) that keeps it, and the op that made it (``input`` for the graph's inputs). torch's
RMSNorm is measured as its CUDA build runs it (one fused kernel saving the input and the
rstd; the CPU build's composite saves float32 intermediates). Parameters and the rotary
tables (leaves that live anyway) are counted apart, as ``leaf``. Two settings, as the
benchmarks train: ``bf16`` (bfloat16 parameters, no autocast: FSDP's param_dtype) and
``amp`` (float32 parameters under bfloat16 autocast: train.py's default). The table is in
MiB, with the genesis - torch difference of the totals; ``--out`` writes it as JSON.

``--model`` takes decoder.py's configs and ``narrow`` (the 7B shape's ratios at 1/8 of its
width: 7 query heads per KV head, ffn 5.3x the width, q/k/v biases; head size 64).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decoder  # noqa: E402  (the benchmark's decoder and configs)
import train  # noqa: E402  (loading it under each framework)

MiB = 1 << 20
MODELS = dict(decoder.MODELS)
MODELS["narrow"] = decoder.ModelConfig(vocab=4096, dim=448, layers=2, q_heads=7, kv_heads=1,
                                       head_dim=64, ffn=2368, qkv_bias=True,
                                       rope_theta=1000000.0)


def _batch(cfg, seq: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, cfg.vocab, (1, seq), dtype=np.int64)
    return tokens, np.roll(tokens, -1, axis=1)


def _storage_key(t) -> tuple:
    """(pointer, bytes) of the whole storage a torch tensor views."""
    s = t.untyped_storage()
    return s.data_ptr(), s.nbytes()


def torch_saved(cfg, weights, batch, seq: int, setting: str) -> tuple[dict, float]:
    """Per-op saved bytes of torch's forward, and the loss."""
    import torch

    lib = train.import_framework("torch")
    model = train.load_model(lib, cfg, weights, seq, "cpu")
    if setting == "bf16":
        model.to(torch.bfloat16)
    leaves = {_storage_key(p) for p in model.parameters()} | \
        {_storage_key(b) for b in model.buffers()}
    packed: list = []

    def pack(t):
        packed.append(t)
        return t

    x, y = (torch.from_numpy(a) for a in batch)
    amp = torch.autocast("cpu", dtype=torch.bfloat16, enabled=setting == "amp")
    composite_rms_norm = torch.nn.functional.rms_norm
    torch.nn.functional.rms_norm = _cuda_like_rms_norm  # (nn.RMSNorm calls F.rms_norm)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), amp:
            loss = model(x, y)
    finally:
        torch.nn.functional.rms_norm = composite_rms_norm
    owner = _torch_owners(loss.grad_fn)
    per_op: dict = defaultdict(int)
    seen = set()
    for t in packed:
        key = _storage_key(t)
        if key in seen:
            continue
        seen.add(key)
        per_op["leaf" if key in leaves else owner.get(key, "?")] += key[1]
    return dict(per_op), float(loss.detach().float())


def _cuda_like_rms_norm(x, normalized_shape, weight=None, eps=None):
    """torch's RMSNorm as its CUDA build runs it (one fused kernel saving the input and the
    float32 rstd), not the CPU build's composite of casts and products, which saves
    several float32 intermediates per norm: the torch baseline is the GPU's."""
    import torch

    class FusedRMSNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            y, rstd = torch.ops.aten._fused_rms_norm(x, list(normalized_shape), weight, eps)
            ctx.save_for_backward(x, weight, rstd)
            return y

        @staticmethod
        def backward(ctx, g):
            x, weight, rstd = ctx.saved_tensors
            xhat, gy = x.float() * rstd, g.float() * weight.float()
            gx = rstd * (gy - xhat * (gy * xhat).mean(-1, keepdim=True))
            gw = (g.float() * xhat).reshape(-1, x.shape[-1]).sum(0)
            return gx.to(x.dtype), gw.to(weight.dtype)

    return FusedRMSNorm.apply(x, weight)


def _torch_owners(root) -> dict:
    """storage key -> name of the first node (graph order from the loss) that saves it."""
    owner: dict = {}
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "saved_tensors"):  # a custom Function's node (the RMSNorm above)
            for t in node.saved_tensors:
                owner.setdefault(_storage_key(t), _label(node.name(), t.grad_fn))
        for attr in dir(node):
            if attr.startswith("_saved_"):
                try:
                    v = getattr(node, attr)
                except RuntimeError:
                    continue
                for t in (v if isinstance(v, (tuple, list)) else (v,)):
                    if hasattr(t, "untyped_storage"):
                        owner.setdefault(_storage_key(t), _label(node.name(), t.grad_fn))
        stack.extend(fn for fn, _ in node.next_functions)
    return owner


def genesis_saved(cfg, weights, batch, seq: int, setting: str) -> tuple[dict, float]:
    """Per-op saved bytes of genesis's forward (walking its autograd graph), and the loss."""
    from genesis.autograd.saved import saved_tensors

    lib = train.import_framework("genesis")
    model = train.load_model(lib, cfg, weights, seq, "cpu")
    if setting == "bf16":
        model.to(lib.bfloat16)
    leaves = {_storage_key(p._data) for p in model.parameters()} | \
        {_storage_key(b._data) for b in model.buffers()}
    x, y = (lib.from_numpy(a) for a in batch)
    with lib.autocast("cpu", dtype=lib.bfloat16, enabled=setting == "amp"):
        loss = model(x, y)
    per_op: dict = defaultdict(int)
    seen = set()
    for name, t in saved_tensors(loss):
        key = _storage_key(t._data)
        if key not in seen:
            seen.add(key)
            per_op["leaf" if key in leaves else _label(name, t.grad_fn)] += key[1]
    return dict(per_op), float(loss.float().item())


def _label(saver: str, producer) -> str:
    """``saver<-producer``: the node keeping a tensor and the op that made it (neither
    framework's ``Backward``/``Backward0`` suffixes)."""
    made = "input" if producer is None else producer.name()
    return f"{_short(saver)}<-{_short(made)}"


def _short(name: str) -> str:
    return re.sub(r"Backward\d*$", "", name)


def compare(cfg, seq: int, setting: str, seed: int = 0) -> dict:
    """Both frameworks' per-op saved bytes for one setting."""
    weights = decoder.init_weights(cfg, seq, seed)
    batch = _batch(cfg, seq, seed)
    t_ops, t_loss = torch_saved(cfg, weights, batch, seq, setting)
    g_ops, g_loss = genesis_saved(cfg, weights, batch, seq, setting)
    return {"setting": setting, "torch": t_ops, "genesis": g_ops,
            "torch_total": sum(v for k, v in t_ops.items() if k != "leaf"),
            "genesis_total": sum(v for k, v in g_ops.items() if k != "leaf"),
            "loss": {"torch": t_loss, "genesis": g_loss}}


def print_table(res: dict) -> None:
    print(f"\n== {res['setting']}: saved for backward, MiB (losses: torch "
          f"{res['loss']['torch']:.4f}, genesis {res['loss']['genesis']:.4f})")
    print(f"{'torch op':<44}{'MiB':>9}   {'genesis op':<44}{'MiB':>9}")
    t = sorted(res["torch"].items(), key=lambda kv: -kv[1])
    g = sorted(res["genesis"].items(), key=lambda kv: -kv[1])
    for i in range(max(len(t), len(g))):
        left = f"{t[i][0]:<44}{t[i][1] / MiB:>9.3f}" if i < len(t) else " " * 53
        right = f"{g[i][0]:<44}{g[i][1] / MiB:>9.3f}" if i < len(g) else ""
        print(f"{left}   {right}")
    tt, gt = res["torch_total"] / MiB, res["genesis_total"] / MiB
    print(f"{'total (no leaves)':<44}{tt:>9.3f}   {'':<44}{gt:>9.3f}   "
          f"genesis - torch {gt - tt:+.3f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="narrow", choices=sorted(MODELS))
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--setting", default="both", choices=("bf16", "amp", "both"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    cfg = MODELS[args.model]
    settings = ("bf16", "amp") if args.setting == "both" else (args.setting,)
    results = [compare(cfg, args.seq, s) for s in settings]
    for r in results:
        print_table(r)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"model": args.model, "seq": args.seq, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
