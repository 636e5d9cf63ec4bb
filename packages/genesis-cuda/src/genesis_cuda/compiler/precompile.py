"""Compile a graph's generated kernels side by side, before their first launch.

Triton compiles a kernel the first time it is launched, one after the other: for each, its
code generator (Python), LLVM's passes, ``ptxas`` and, for a new argument signature, a C
compiler building the launcher (the two last ones are processes of their own). A compiled
model has tens of distinct generated kernels, so its first step would wait for all of them
in turn. ``precompile`` hands them to a pool of threads first: each thread runs Triton's
``warmup`` (the compilation a launch would do, without the launch), whose external
processes (and the parts of the compiler that release the interpreter lock) then overlap.
The kernels land in their ``@triton.jit`` function's cache under the key a launch with
aligned arguments computes, so the first launch finds them compiled; a launch Triton would
key otherwise (a misaligned view) compiles its own variant, as without this step.

Compilation errors are not reported here: the first launch of that kernel compiles again
and raises them where the kernel is used.

Example:
    >>> precompile([(kernel, [genesis.float32, genesis.float32])])   # kernel_cache kernels
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from triton.runtime import driver as triton_driver

from genesis_cuda.kernels._launch import INTERPRET, Ptr

MAX_THREADS = 16


def _compile_one(kernel, dtypes: list) -> None:
    spec = kernel.spec
    args = [Ptr(0, dt) for dt in dtypes]  # address 0: aligned, as fresh allocations are
    compiled = kernel.fn.warmup(*args, grid=spec.grid, **spec.constexprs,
                                **kernel.launcher._options(args))
    # the launcher's C module (built by a C compiler the first time a signature is seen)
    # is cached on disk: building it here, beside the others, spares the first launch
    launcher_cls = getattr(triton_driver.active, "launcher_cls", None)
    if compiled is not None and launcher_cls is not None:
        launcher_cls(compiled.src, compiled.metadata)


def precompile(jobs: list) -> int:
    """Compile the kernels of ``jobs`` in parallel threads.

    Args:
        jobs: ``(kernel, dtypes)`` pairs: a ``kernel_cache.CompiledKernel`` and the genesis
            dtypes of its pointer arguments, in order (inputs, then outputs).

    Returns:
        How many distinct kernels were handed to the pool (0 under the interpreter).
    """
    if INTERPRET:
        return 0
    distinct: dict = {}
    for kernel, dtypes in jobs:
        distinct.setdefault((id(kernel.fn), tuple(dtypes)), (kernel, dtypes))
    todo = list(distinct.values())
    if not todo:
        return 0
    threads = max(1, min(MAX_THREADS, os.cpu_count() or 1, len(todo)))
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="genesis-compile") as pool:
        for future in [pool.submit(_compile_one, k, d) for k, d in todo]:
            try:
                future.result()
            except Exception:  # noqa: BLE001 - the kernel's first launch reports it
                pass
    return len(todo)
