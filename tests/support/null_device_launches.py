"""Scenarios of deferred kernel launches (``genesis_cuda.kernels.launch_queue``) on the null
device of ``tools/bench/cuda_host.py``, with Triton's compile-on-first-launch emulated.

Run as a script (it patches genesis_cuda and Triton for the whole process):
``python null_device_launches.py SCENARIO [BODY]`` prints one JSON object. The emulated
Triton compiles a kernel on the first launch of each (function, constexprs, options) unless
Triton's ``jit_cache_hook`` (what ``parallel_compile`` collects with) takes it, or loads it
where ``compile_jobs`` compiled it before (its on-disk cache). Every launch and every
compilation done at a launch is logged; ``parallel_compile.compile_jobs`` is replaced by one
that logs the kernels each batch had to compile (the distinct ones not on disk yet).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from types import SimpleNamespace

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
os.environ["GENESIS_COMPILE_WORKERS"] = "0"  # no worker processes: compile_jobs is replaced

log: list = []  # ["launch", name] | ["compile", name, thread name]
batches: list = []  # the kernel names of each compile_jobs batch
_on_disk: set = set()  # (name, spec) compiled by compile_jobs (Triton's on-disk cache)
_in_memory: set = set()  # (name, spec) a launch has compiled or loaded (the JIT's own cache)


def _spec(fn, args, kwargs) -> str:
    constexprs = tuple(repr(a) for a, p in zip(args, fn.params) if p.is_constexpr)
    return repr((constexprs, tuple(sorted((k, repr(v)) for k, v in kwargs.items()))))


def _compiled_kernel(name: str):
    def run(*args):
        log.append(["launch", name])

    return SimpleNamespace(run=run, function=name, packed_metadata=None)


def _run(self, *args, grid=None, warmup=False, **kwargs):
    from triton import knobs

    spec = _spec(self, args, kwargs)
    kernel = (self.__name__, spec)
    if kernel not in _in_memory:  # Triton asks its hook before its on-disk cache
        hook = knobs.runtime.jit_cache_hook
        if hook is not None and hook(fn=SimpleNamespace(jit_function=self),
                                     compile={"specialization_data": spec}):
            return None  # (collected: nothing compiled, nothing launched)
        if kernel not in _on_disk:
            log.append(["compile", self.__name__, threading.current_thread().name])
        _in_memory.add(kernel)
    if not warmup:
        log.append(["launch", self.__name__])
    return _compiled_kernel(self.__name__)


def _compile_jobs(jobs, workers=None):
    from genesis_cuda.kernels.parallel_compile import distinct

    new = [job for job in distinct(jobs) if (job.fn.__name__, job.spec) not in _on_disk]
    batches.append(sorted(job.fn.__name__ for job in new))
    _on_disk.update((job.fn.__name__, job.spec) for job in new)


def install():
    import cuda_host
    from triton.runtime.jit import JITFunction

    cuda_host.install_null_device()
    JITFunction.run = _run
    JITFunction.warmup = lambda self, *args, grid, **kw: _run(self, *args, grid=grid,
                                                               warmup=True, **kw)
    from genesis_cuda.kernels import parallel_compile

    parallel_compile.compile_jobs = _compile_jobs


BODIES = {
    "elementwise": lambda x: (x * 2 + 1).exp().sum(),
    # a new matmul bucket is tuned: its candidates compile with the rest, its timing waits
    "matmul": lambda x: ((x * 2) @ x + 1).sum(),
}


def launches() -> list:
    return [e[1] for e in log if e[0] == "launch"]


def scenario_eager(genesis, backend, x, body) -> dict:
    BODIES[body](x)
    return {"launches": launches(), "compiles": [e for e in log if e[0] == "compile"]}


def scenario_deferred(genesis, backend, x, body) -> dict:
    with backend.tracing() as queue:
        BODIES[body](x)
        queued = launches()
        deferred = queue.launches
    return {"launches_inside": queued, "deferred": deferred, "launches": launches(),
            "compiles": [e for e in log if e[0] == "compile"], "batches": batches}


def scenario_driver_flush(genesis, backend, x, body=None) -> dict:
    with backend.tracing():
        x.neg()
        before = launches()
        genesis.cuda.synchronize()  # a driver call: what waits is launched first
        after_sync = launches()
        x.abs()
        inside = launches()
    return {"before": before, "after_sync": after_sync, "inside": inside,
            "launches": launches(), "batches": batches}


def scenario_compile(genesis, backend, x, body=None) -> dict:
    def f(t):
        return (t * 2).sin() + 1

    compiled = genesis.compile(f, options={"cudagraphs": False})
    compiled(x)
    return {"batches": batches, "compiles": [e for e in log if e[0] == "compile"],
            "launches": launches()}


def main(name: str, body: str | None) -> None:
    install()
    import genesis
    from genesis.backends.registry import get_backend

    x = genesis.zeros(1024, 1024, device="cuda")
    backend = get_backend("cuda")
    log.clear()
    out = globals()[f"scenario_{name}"](genesis, backend, x, body)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
