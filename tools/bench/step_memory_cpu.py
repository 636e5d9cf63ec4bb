"""Peak host memory of one training step's forward and backward, genesis vs torch, on the CPU.

    python tools/bench/step_memory_cpu.py [--model narrow] [--seq 512] [--setting bf16|amp]

A stand-in for the GPU's ``max_memory_allocated`` where there is no GPU: each framework runs
decoder.py's model (``build_model``) in its own process, and the figures are the process's
resident memory (``VmRSS``) and its high-water mark (``VmHWM``, reset through
``/proc/self/clear_refs`` before each phase), relative to the memory before the step. glibc
hands every allocation above 64 KiB straight to ``mmap`` (``MALLOC_MMAP_THRESHOLD_``, set
for the child), so a freed tensor leaves the resident set at once; torch's CPU allocator
caches nothing.

So that the figures follow the GPU's allocations rather than the CPU composites', both
frameworks run their GPU kernels' allocation pattern:

* torch's RMSNorm is its CUDA build's fused kernel (``saved_activations._cuda_like_rms_norm``);
* genesis's ``cross_entropy`` / ``rms_norm`` kernels (and backward kernels) are registered on
  the CPU backend as torch code that allocates what genesis-cuda's Triton kernels allocate
  (their outputs) and works on a few rows at a time, where the CPU composites make float32
  copies of the whole input.

Everything else (matmuls, attention, elementwise ops, the autograd engine, autocast) runs as
it does on the GPU, op for op.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decoder  # noqa: E402
import saved_activations as sa  # noqa: E402  (the decoder's configs and torch's fused RMSNorm)
import train  # noqa: E402

ROWS = 64  # rows per block of the row-wise stand-in kernels


def _rss(key: str) -> float:
    """``VmRSS`` or ``VmHWM`` of this process, MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS


def register_gpu_like_kernels() -> None:
    """genesis's CPU backend: the row kernels of genesis-cuda, as to what they allocate."""
    import torch

    from genesis.backends.cpu import CPUBackend

    def rows(m):
        return ((i, min(i + ROWS, m)) for i in range(0, m, ROWS))

    def cross_entropy(logits, target, ignore_index, label_smoothing):
        if label_smoothing:
            return NotImplemented
        m = logits.shape[0]
        loss = torch.empty(m, dtype=torch.float32)
        lse = torch.empty(m, dtype=torch.float32)
        for i, j in rows(m):
            z = logits[i:j].float()
            lse[i:j] = torch.logsumexp(z, 1)
            t = target[i:j]
            keep = t != ignore_index
            picked = z.gather(1, torch.where(keep, t, 0)[:, None])[:, 0]
            loss[i:j] = torch.where(keep, lse[i:j] - picked, 0.0)
        return loss, lse

    def cross_entropy_backward(grad, logits, target, lse, ignore_index, label_smoothing):
        if label_smoothing:
            return NotImplemented
        out = torch.empty_like(logits)
        for i, j in rows(logits.shape[0]):
            t = target[i:j]
            g = torch.where(t != ignore_index, grad[i:j].float(), 0.0)[:, None]
            d = (logits[i:j].float() - lse[i:j, None]).exp()
            d[torch.arange(j - i), torch.where(t != ignore_index, t, 0)] -= 1.0
            out[i:j] = g * d
        return out

    def rms_norm(x, weight, eps):
        if x.dtype is torch.float64 or x.dim() != 2:
            return NotImplemented
        y = torch.empty_like(x)
        rstd = torch.empty(x.shape[0], 1, dtype=torch.float32)
        for i, j in rows(x.shape[0]):
            xf = x[i:j].float()
            rstd[i:j] = (xf.pow(2).mean(-1, keepdim=True) + eps).rsqrt()
            yf = xf * rstd[i:j]
            y[i:j] = yf if weight is None else yf * weight.float()
        return y, rstd

    def rms_norm_backward(grad, x, weight, rstd):
        if x.dtype is torch.float64 or x.dim() != 2:
            return NotImplemented
        gx = torch.empty_like(x)
        gw = None if weight is None else torch.zeros(x.shape[1], dtype=torch.float32)
        for i, j in rows(x.shape[0]):
            xhat = x[i:j].float() * rstd[i:j]
            gy = grad[i:j].float() * (1.0 if weight is None else weight.float())
            gx[i:j] = rstd[i:j] * (gy - xhat * (gy * xhat).mean(-1, keepdim=True))
            if gw is not None:
                gw += (grad[i:j].float() * xhat).sum(0)
        return gx, (None if gw is None else gw.to(weight.dtype))

    for fn in (cross_entropy, cross_entropy_backward, rms_norm, rms_norm_backward):
        CPUBackend.register_kernel(fn.__name__, fn)


def measure(name: str, model_name: str, setting: str, seq: int) -> str:
    """One step of framework ``name`` in this process: its phases' peaks, as a line."""
    import torch

    torch.set_num_threads(1)
    cfg = sa.MODELS[model_name]
    weights = decoder.init_weights(cfg, seq, 0)
    batch = sa._batch(cfg, seq, 0)
    lib = train.import_framework(name)
    model = train.load_model(lib, cfg, weights, seq, "cpu")
    if setting == "bf16":
        model.to(lib.bfloat16)
    if name == "torch":
        torch.nn.functional.rms_norm = sa._cuda_like_rms_norm
    else:
        register_gpu_like_kernels()
    x, y = (lib.from_numpy(a) for a in batch)
    amp = lib.autocast("cpu", dtype=lib.bfloat16, enabled=setting == "amp")

    def forward():
        with amp:
            return model(x, y)

    forward().backward()  # a first step: lazy initialisations, gradients allocated
    for p in model.parameters():
        p.grad = None
    gc.collect()
    start = _rss("VmRSS")
    _reset_peak()
    loss = forward()
    fwd_end, fwd_peak = _rss("VmRSS"), _rss("VmHWM")
    _reset_peak()
    loss.backward()
    bwd_end, bwd_peak = _rss("VmRSS"), _rss("VmHWM")
    return (f"{name:8s} forward peak {fwd_peak - start:8.2f} end {fwd_end - start:8.2f} | "
            f"backward peak {bwd_peak - start:8.2f} end {bwd_end - start:8.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="narrow", choices=sorted(sa.MODELS))
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--setting", default="bf16", choices=("bf16", "amp"))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(measure(args.child, args.model, args.setting, args.seq))
        return
    print(f"{args.model}, seq {args.seq}, {args.setting}: MiB above the memory before the step")
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    for name in ("torch", "genesis"):
        cmd = [sys.executable, os.path.abspath(__file__), "--model", args.model, "--seq",
               str(args.seq), "--setting", args.setting, "--child", name]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        print(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
