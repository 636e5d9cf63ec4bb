"""Turn generated Triton source into a launchable kernel, once per source text.

Triton's JIT reads a kernel's source from its file (``inspect``), so generated source is
written to a file and imported from there: ``<cache dir>/<name>_<sha256 prefix>.py``. The
hash is of the kernel's code without its header comment (``KernelSpec.code``: values are
numbered per kernel), so the groups of every layer of a model that fuse the same work share
one file, one loaded module and one Triton compilation, and a kernel generated again (the
same graph in a new process) reuses its file. Writes are atomic (core's ``atomic_write``:
write beside, fsync, rename), so concurrent processes never read half a file.

Where generated sources go, besides the cache:

* ``options={"debug_dir": path}`` of ``genesis.compile`` or ``GENESIS_COMPILE_DEBUG_DIR``:
  each group's kernel source, with its own header, is also saved there under the group's
  label (``fused_mul_exp_3.py``: the group's place in the graph), to read or to diff;
* ``GENESIS_COMPILE_DEBUG=1``: each source is printed when it is generated.

The cache directory is ``GENESIS_COMPILE_CACHE_DIR``, else ``~/.cache/genesis/compile``.
Kernels launch through ``genesis_cuda.kernels._launch.Launcher`` like every other genesis
kernel (``launch`` below is the compiler's one launch call).

Example:
    >>> k = load(spec, debug_dir=None)          # a codegen.KernelSpec
    >>> launch(k, device, [x, y], [out])         # arrays: inputs then outputs
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

from genesis.atomic_write import atomic_write
from genesis_cuda.kernels._launch import Launcher

_loaded: dict[str, object] = {}  # source hash -> the module's @triton.jit function


def cache_dir() -> Path:
    """Where generated kernel modules are written (created on first use)."""
    env = os.environ.get("GENESIS_COMPILE_CACHE_DIR")
    path = Path(env) if env else Path.home() / ".cache" / "genesis" / "compile"
    path.mkdir(parents=True, exist_ok=True)
    return path


def debug_dir(options: dict | None) -> Path | None:
    """The directory generated sources are saved to: ``options["debug_dir"]``, else
    ``GENESIS_COMPILE_DEBUG_DIR``, else None."""
    path = (options or {}).get("debug_dir") or os.environ.get("GENESIS_COMPILE_DEBUG_DIR")
    return Path(path) if path else None


def _write_atomic(path: Path, text: str) -> None:
    with atomic_write(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)


class CompiledKernel:
    """A loaded generated kernel: its spec, its ``@triton.jit`` function and launcher."""

    __slots__ = ("spec", "fn", "launcher", "path")

    def __init__(self, spec, fn, path: Path):
        self.spec, self.fn, self.path = spec, fn, path
        self.launcher = Launcher(fn, num_warps=spec.num_warps)


def load(spec, debug: Path | None = None) -> CompiledKernel:
    """Write ``spec.source`` to the cache (once), import it and return the kernel.

    Args:
        spec: a ``codegen.KernelSpec``.
        debug: a directory to also save the source to (``debug_dir(options)``).

    Returns:
        A ``CompiledKernel``.
    """
    digest = hashlib.sha256(spec.code.encode()).hexdigest()[:20]
    if debug is not None:
        debug.mkdir(parents=True, exist_ok=True)
        _write_atomic(debug / f"{spec.label}.py", spec.source)
    if os.environ.get("GENESIS_COMPILE_DEBUG") == "1":
        print(f"# ---- genesis.compile: {spec.label} ----\n{spec.source}", file=sys.stderr)
    fn = _loaded.get(digest)
    path = cache_dir() / f"{spec.name}_{digest}.py"
    if fn is None:
        if not path.exists():
            _write_atomic(path, spec.source)
        mod_name = f"genesis_compiled_{digest}"
        module_spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[mod_name] = module  # Triton resolves the kernel's globals through it
        module_spec.loader.exec_module(module)
        fn = _loaded[digest] = getattr(module, spec.name)
    return CompiledKernel(spec, fn, path)


def launch(kernel: CompiledKernel, inputs: list, outputs: list) -> None:
    """Launch ``kernel`` on the current device with its pointer arguments: ``inputs`` and
    ``outputs`` (backend arrays, in ``spec.inputs`` / ``spec.outputs`` order)."""
    spec = kernel.spec
    kernel.launcher(spec.grid, *inputs, *outputs, **spec.constexprs)
