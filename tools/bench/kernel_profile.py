"""One step's CUDA kernels as torch.profiler (CUPTI) sees them: launches, summed kernel time,
wall time and the per-kernel table, for any framework (genesis's Triton kernels and torch's
alike). Used by ``train.py`` and ``llm.py``, which profile only after every framework was
timed: CUPTI, once attached to a process, slows every later launch.

Example:
    >>> from kernel_profile import profile_step
    >>> profile_step(lambda: step(0), "cuda", show=True)["launches"]
"""

from __future__ import annotations

import time


def profile_step(step, device: str, show: bool) -> dict:
    """Kernel launches and summed kernel time of one step, seen by torch.profiler (CUPTI)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if device != "cuda":
        return {"launches": None, "kernel_ms": None, "profiled_wall_ms": None, "kernels": []}
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    kernels = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        n, us = kernels.get(e.name, (0, 0.0))
        kernels[e.name] = (n + 1, us + e.time_range.elapsed_us())
    table = sorted(((k, n, us / 1e3) for k, (n, us) in kernels.items()), key=lambda r: -r[2])
    launches = sum(n for _, n, _ in table)
    kernel_ms = sum(ms for _, _, ms in table)
    if show:
        print(f"  {'kernel':90s} {'count':>6s} {'total ms':>9s} {'avg us':>8s}")
        for k, n, ms in table:
            print(f"  {k[:90]:90s} {n:6d} {ms:9.3f} {ms * 1e3 / n:8.1f}")
    return {"launches": launches, "kernel_ms": kernel_ms, "profiled_wall_ms": wall * 1e3,
            "kernels": [{"name": k, "count": n, "ms": ms} for k, n, ms in table]}
