"""Compile a graph's generated kernels side by side, before their first launch.

A compiled model has tens of distinct generated kernels; Triton would compile each at its
first launch, one after the other. ``precompile`` hands them all to
``kernels.parallel_compile`` first (worker processes, one per CPU core, writing into
Triton's on-disk cache; threads for what they cannot do): each kernel's ``warmup`` with
aligned arguments, as a fresh allocation gives, is what a first launch would compile. A
launch Triton would key otherwise (a misaligned view) compiles its own variant, as without
this step. Compilation errors are not reported here: the first launch of that kernel
compiles again and raises them where the kernel is used.

Example:
    >>> precompile([(kernel, [genesis.float32, genesis.float32])])   # kernel_cache kernels
"""

from __future__ import annotations

from genesis_cuda.kernels._launch import Ptr
from genesis_cuda.kernels.parallel_compile import Report, precompile_calls


def _warmup(kernel, dtypes: list) -> None:
    spec = kernel.spec
    args = [Ptr(0, dt) for dt in dtypes]  # address 0: aligned, as fresh allocations are
    kernel.fn.warmup(*args, grid=spec.grid, **spec.constexprs,
                     **kernel.launcher._options(args))


def precompile(jobs: list) -> Report:
    """Compile the kernels of ``jobs`` side by side (``parallel_compile``).

    Args:
        jobs: ``(kernel, dtypes)`` pairs: a ``kernel_cache.CompiledKernel`` and the genesis
            dtypes of its pointer arguments, in order (inputs, then outputs).

    Returns:
        The ``parallel_compile.Report``: distinct kernels compiled, and where.
    """
    return precompile_calls([lambda k=k, d=d: _warmup(k, d) for k, d in jobs])
