"""A compile worker: a process that compiles Triton kernels for a given GPU and nothing else.

``parallel_compile`` starts a few of these (``python -m genesis_cuda.kernels.compile_worker``)
so that every CPU core compiles: Triton's code generator and its MLIR passes hold the Python
interpreter lock, so threads of one process overlap only the external ``ptxas`` and C compiler
runs. A worker never touches the GPU (it is started with ``CUDA_VISIBLE_DEVICES=""``): it
is told the target (``GPUTarget("cuda", 90, 32)`` read in the parent) and compiles into
Triton's on-disk cache, where the parent's own compilation of the same kernel then finds it.

A job is one line of JSON on the worker's standard input, a reply one line on its output::

    {"module": "genesis_compiled_ab12", "path": "/.../fused_ab12.py", "name": "fused",
     "spec": <Triton's specialization data>, "target": {"backend": "cuda", "arch": 90,
     "warp_size": 32}, "cache_dir": "/home/me/.triton/cache"}
    {"ok": true, "launcher": null}            # or {"ok": false, "error": "<traceback>"}

``spec`` is what Triton itself serialises for a specialisation (its ``jit_cache_hook`` hands
it over; ``JITFunction.preload`` compiles it): the signature, constexprs, pointer attributes
and options, so the worker compiles exactly the kernel the parent's launch would, and
Triton's cache key (source, signature, constexprs, options, target) comes out the same. The
kernel's module is imported by name (a package module: ``genesis_cuda.kernels.matmul_kernels``)
or, when that name is not importable (a kernel the compiler generated), from its file under
the same name. Where this Triton builds a C launcher per argument signature (up to 3.6), the
worker builds it too (it is cached on disk as well); ``launcher`` in the reply is why it did
not, or null.

Example:
    >>> compile_job({"module": "genesis_cuda.kernels.matmul_kernels", "name": "_mm_kernel",
    ...              "spec": spec, "target": target, "cache_dir": None, "path": None})
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import traceback

from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.driver import CudaLauncher
from triton.runtime import driver as triton_driver
from triton.runtime.cache import triton_key


class TargetDriver:
    """Triton's active driver in a process without a GPU: it names the target to compile for
    and a device number, which is all that compiling (``JITFunction.preload``) asks of a
    driver. The device number is the target's architecture, so the JIT's per-device caches
    (which hold the target) never mix two targets.

    Example:
        >>> triton_driver.set_active(TargetDriver(GPUTarget("cuda", 90, 32)))
    """

    launcher_cls = CudaLauncher  # (what builds a compiled kernel's launcher)

    def __init__(self, target: GPUTarget):
        self.target = target

    def get_current_target(self) -> GPUTarget:
        return self.target

    def get_current_device(self) -> int:
        return self.target.arch if isinstance(self.target.arch, int) else 0

    def get_current_stream(self, device: int = 0) -> int:
        return 0


def target_of(obj: dict) -> GPUTarget:
    """The ``GPUTarget`` a job names (``{"backend", "arch", "warp_size"}``)."""
    return GPUTarget(obj["backend"], obj["arch"], obj["warp_size"])


def jit_function(module: str, name: str, path: str | None):
    """The ``@triton.jit`` function ``name`` of ``module``: imported by name, else loaded from
    ``path`` under that name (the compiler's generated modules are not on ``sys.path``)."""
    mod = sys.modules.get(module)
    if mod is None:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError:
            if not path:
                raise
            spec = importlib.util.spec_from_file_location(module, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[module] = mod  # Triton resolves the kernel's globals through it
            spec.loader.exec_module(mod)
    return getattr(mod, name)


def build_launcher(launcher_cls, compiled) -> str | None:
    """Build ``compiled``'s launcher (Tritons up to 3.6 compile a C module per argument
    signature and cache it on disk; later ones have one shared launcher). Returns None, or
    why it was not built: the kernel's first launch then builds it."""
    try:
        launcher_cls(compiled.src, compiled.metadata)
    except Exception as e:  # noqa: BLE001 - no C compiler or libcuda here: first launch
        return f"{type(e).__name__}: {e}"
    return None


def compile_job(job: dict) -> dict:
    """Compile one job (see the module docstring) into Triton's cache; the reply."""
    try:
        if job.get("cache_dir"):
            knobs.cache.dir = job["cache_dir"]
        triton_driver.set_active(TargetDriver(target_of(job["target"])))
        fn = jit_function(job["module"], job["name"], job.get("path"))
        compiled = fn.preload(job["spec"])
    except Exception:  # noqa: BLE001 - reported to the parent, whose first launch raises
        return {"ok": False, "error": traceback.format_exc(limit=8)}
    return {"ok": True, "launcher": build_launcher(CudaLauncher, compiled)}


def serve(lines, reply) -> None:
    """Answer each JSON job line of ``lines`` with ``reply(line)`` until they end."""
    for line in lines:
        try:
            job = json.loads(line)
            if not isinstance(job, dict):
                raise ValueError(f"a job is a JSON object, got {type(job).__name__}")
        except ValueError as e:
            reply(json.dumps({"ok": False, "error": f"bad job line: {e}"}))
            continue
        reply(json.dumps(compile_job(job)))


def main() -> None:
    # replies go on a private copy of stdout; anything else that writes to fd 1 (a
    # compiler's messages) goes to stderr and cannot break a reply line
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def reply(text: str) -> None:
        out.write(text + "\n")
        out.flush()

    # the hash of Triton's own sources (part of every cache key, once per process: ~0.3-0.8
    # s) is worked out while the parent is still collecting the first jobs
    triton_key()
    serve(sys.stdin, reply)


if __name__ == "__main__":
    main()
