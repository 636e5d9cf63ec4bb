"""Launch helpers shared by genesis's Triton kernels.

A plain ``kernel[grid](...)`` costs about 8 µs of host time: Triton binds the arguments,
computes a specialisation key and looks the compiled kernel up on every call. Our kernels
mark every integer argument ``do_not_specialize`` and pass what matters for code generation
as constexprs, so the only specialisation Triton adds on its own is the 16-byte alignment
of each pointer. ``Launcher`` keys its own cache on exactly that (plus the constexprs the
caller folds into its key), compiles through Triton's JIT on the first call and afterwards
calls the compiled kernel's launcher directly (``direct_entry``: Triton's C launcher itself
where its Python wrapper would add nothing).

Integer arguments are only guaranteed to be typed ``i32`` by Triton when they are below
2**31; callers pass ``big=True`` (any extent >= 2**31) to take Triton's own, fully keyed
path instead.

``GENESIS_DIRECT_LAUNCH=0`` in the environment turns the direct path off (every launch goes
through Triton's JIT, as a plain ``kernel[grid](...)``), to measure what it saves or to rule it
out when a kernel misbehaves; the check sits on the cache-miss path only.

Programmatic dependent launch (Hopper on, ``dependent_launch``): the kernels of a decode step
take a ``PDL`` constexpr and are compiled to start while the kernel ahead of them finishes,
hiding part of each launch's latency (``GENESIS_DEPENDENT_LAUNCH=0`` turns it off).

Every kernel family launches through ``Launcher``, except matmul, whose plans fix their
compiled kernel, grid and constexprs once (``matmul_common.Direct``, also switched by the
flag). The hot families (elementwise, reduction, softmax, norms, the fused LLM kernels, the
optimizers) build their keys themselves, from what their plans already know. The others
(layout, indexing, sorting, random) call the launcher with the kernel's arguments and let it
work the key out from them, as Triton keys its own compiled kernels (``Launcher.__call__``,
``arg_class``).
"""

from __future__ import annotations

import os
from math import prod as numel  # noqa: F401 - the element count of a shape, for the kernels

import triton
import triton.language as tl
from triton.runtime import driver as _triton_driver

from genesis_cuda import device as _device

# re-exported for the kernel modules: geometry helpers, and ``empty``, the one allocation call
from genesis_cuda.array import contiguous_strides, empty, geometry, is_contiguous  # noqa: F401
from genesis_cuda.device import get_device_capability
from genesis_cuda.streams import current_handle as _stream_handle

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DIRECT = os.environ.get("GENESIS_DIRECT_LAUNCH", "1") != "0"
DEPENDENT = os.environ.get("GENESIS_DEPENDENT_LAUNCH", "1") != "0"

# Under the Triton interpreter (CPU tests of the kernels) pointer arguments must be torch
# tensors; the test-suite installs a converter here (and replaces ``empty`` with arrays
# backed by torch tensors, which is why kernels call ``_launch.empty``). Unused otherwise.
interpret_arg = None


def _device_index(device) -> int:
    return device if device.__class__ is int else (getattr(device, "index", None) or 0)


_sm_counts: dict = {}


def sm_count(device) -> int:
    """Number of multiprocessors of ``device`` (cached)."""
    n = _sm_counts.get(device)
    if n is None:
        if INTERPRET:
            n = 4
        else:
            props = _triton_driver.active.utils.get_device_properties(_device_index(device))
            n = int(props["multiprocessor_count"])
        _sm_counts[device] = n
    return n


try:  # grid dependency control (Triton 3.3 on; genesis-cuda allows older Tritons)
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: F401

    _TRITON_HAS_GDC = True
except ImportError:
    _TRITON_HAS_GDC = False
_dependent_launch: dict = {}


def dependent_launch(device) -> bool:
    """Whether kernels on ``device`` launch with programmatic dependent launch (cached):
    compute capability 9.0 or newer (Hopper on) and a Triton with grid dependency control,
    never under the interpreter, and not switched off by ``GENESIS_DEPENDENT_LAUNCH=0``.

    A kernel that takes a ``PDL`` constexpr is compiled with Triton's ``launch_pdl=True``
    where its ``PDL`` argument is true (``Launcher`` and ``matmul_common.Direct`` see to
    that): it may then start while the kernel ahead of it in the stream is finishing, so
    it calls ``pdl_prologue`` before it touches memory (see there)."""
    ok = _dependent_launch.get(device)
    if ok is None:
        if INTERPRET or not DEPENDENT or not _TRITON_HAS_GDC:
            ok = False
        else:
            ok = get_device_capability(_device_index(device))[0] >= 9
        _dependent_launch[device] = ok
    return ok


@triton.jit
def pdl_prologue(PDL: tl.constexpr):
    """For a kernel launched with programmatic dependent launch (``PDL``): wait until the
    kernel ahead has finished and its writes are visible (``gdc_wait``; nothing before this
    may read or write memory that kernel uses), then let the kernel after this one launch
    its programs, which wait in turn (``gdc_launch_dependents``). Nothing without ``PDL``."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


# Triton compile options every genesis kernel is built with (``Launcher`` and
# ``matmul_common.Direct`` add them). Floating-point fusion (``a * b + c`` as one fused
# multiply-add, as nvcc builds torch's kernels by default) is Triton's default up to 3.9, and
# 3.10 turns that default off: it is asked for here, so every Triton builds the same kernels.
COMPILE_OPTIONS = {"enable_fp_fusion": True}


def compile_options(opts: dict, pdl: bool) -> dict:
    """Triton's compile options ``opts`` for a launch whose ``PDL`` argument is ``pdl``."""
    return {**opts, "launch_pdl": True} if pdl else opts


# Triton versions whose ``CudaLauncher.__call__`` was read (3.5.0, 3.5.1, 3.6.0): it only
# allocates scratch memory, for kernels that ask for some, and hands its C launcher the grid,
# the stream, the function, (cooperative grid, PDL, global scratch, profile scratch) and then
# its own arguments. For a kernel without scratch memory ``direct_entry`` calls that C
# launcher itself, which saves the wrapper's Python call on every launch (see
# docs/benchmarks.md). Other versions keep the wrapper.
_TRITON_VERSION = tuple(int(p) for p in triton.__version__.split(".")[:2] if p.isdigit())
C_LAUNCH_VERSIONS = {(3, 5), (3, 6)}


def direct_entry(compiled) -> tuple:
    """``(launch, head)`` for launching ``compiled`` (a Triton ``CompiledKernel``) again
    with no argument binding: ``launch(grid0, grid1, grid2, stream, *head, *args)``, where
    ``args`` are all the kernel's parameters in order, constexprs included. Triton's C
    launcher where this Triton's wrapper is known to add nothing for this kernel (see
    ``C_LAUNCH_VERSIONS``), else the launcher wrapper (``compiled.run``)."""
    run = compiled.run  # loads the module on first access
    fn, meta = compiled.function, compiled.packed_metadata
    if (_TRITON_VERSION in C_LAUNCH_VERSIONS and type(run).__name__ == "CudaLauncher"
            and not run.global_scratch_size and not run.profile_scratch_size):
        return run.launch, (fn, run.launch_cooperative_grid, run.launch_pdl, None, None, meta,
                            None, None, None)
    return run, (fn, meta, None, None, None)


class Ptr:
    """A typed device address for a kernel's pointer argument (a sub-view's first element)."""

    __slots__ = ("ptr", "dtype")

    def __init__(self, ptr: int, dtype):
        self.ptr = ptr
        self.dtype = dtype

    def data_ptr(self) -> int:
        return self.ptr


class Launcher:
    """Cached direct launches of one ``@triton.jit`` function.

    ``launch(key, device, grid, args, big)``: ``args`` are *all* the kernel's parameters in
    order (constexprs included, as Triton's launcher expects them); ``key`` must identify
    everything Triton specialises the compiled kernel on: the constexpr values, each
    pointer's dtype and 16-byte alignment (``aligned``) and each integer argument's class
    (``spec``). A kernel with a ``PDL`` constexpr is compiled with ``launch_pdl`` where that
    argument is true (``dependent_launch``). ``launcher(grid, *args, **constexprs)`` works
    the key out from the arguments.
    """

    __slots__ = ("fn", "opts", "pdl_at", "cache", "names", "constexpr_at")

    def __init__(self, fn, **opts):
        self.fn = fn
        self.opts = {**COMPILE_OPTIONS, **opts}  # num_warps, num_stages, ...
        # a kernel with a PDL constexpr is compiled with launch_pdl where that argument is true
        self.pdl_at = fn.arg_names.index("PDL") if "PDL" in fn.arg_names else None
        self.cache: dict = {}
        self.names = tuple(fn.arg_names)
        # which parameters are constexprs (keyed by value); nothing is keyed under the interpreter
        self.constexpr_at = None if INTERPRET else tuple(p.is_constexpr for p in fn.params)

    def __call__(self, grid, *args, **constexprs):
        """``kernel[grid](*args, **constexprs)`` on the current device, as Triton's own
        launch, keyed as Triton keys its compiled kernels: each constexpr by its value, every
        other argument by ``arg_class``. Constexprs may be passed by name (after all the
        positional arguments). For the families off the hot path: the key costs a pass over
        the arguments."""
        if constexprs:
            args = args + tuple(constexprs[name] for name in self.names[len(args):])
        key = None if INTERPRET else tuple(
            a if c else int_class(a) if a.__class__ is int else arg_class(a)  # (ints: most)
            for a, c in zip(args, self.constexpr_at))
        self.launch(key, _device._current_device, grid, args)

    def _options(self, args) -> dict:
        i = self.pdl_at
        return self.opts if i is None else compile_options(self.opts, args[i])

    def launch(self, key, device, grid, args, big=False):
        if INTERPRET:
            conv = interpret_arg
            args = [conv(a) if hasattr(a, "data_ptr") else a for a in args]
            self.fn[grid](*args, **self.opts)
            return
        if big:
            self.fn[grid](*args, **self._options(args))
            return
        entry = self.cache.get((key, device))
        if entry is None:
            compiled = self.fn[grid](*args, **self._options(args))  # compiles, launches
            if DIRECT:
                self.cache[(key, device)] = direct_entry(compiled)
            return
        stream = _stream_handle(device)
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        entry[0](grid[0], g1, g2, stream, *entry[1], *args)

    def launch_ptrs(self, key, device, grid, args, objs):
        """The hot path: ``args`` hold raw addresses (ints) for the first ``len(objs)``
        parameters, which skips the launcher's per-pointer driver query; ``objs`` are the
        arrays behind them, used only for the first (compiling) launch. ``key`` must
        include the device and everything ``aligned`` reports."""
        entry = self.cache.get(key)
        if entry is not None:
            entry[0](grid[0], grid[1] if len(grid) > 1 else 1, 1, _stream_handle(device),
                     *entry[1], *args)
            return
        full = tuple(objs) + tuple(args[len(objs):])
        if INTERPRET:
            conv = interpret_arg
            self.fn[grid](*[conv(a) if hasattr(a, "data_ptr") else a for a in full], **self.opts)
            return
        compiled = self.fn[grid](*full, **self._options(full))
        if DIRECT:
            self.cache[key] = direct_entry(compiled)


class Site:
    """One fixed specialisation of a ``Launcher``'s kernel, for callers that plan a launch
    once and repeat it: ``key`` is the full ``launch_ptrs`` key (device and alignments
    included). After the first launch the compiled entry is kept here, so a repeat neither
    builds nor hashes the key."""

    __slots__ = ("launcher", "key", "entry")

    def __init__(self, launcher: Launcher, key):
        self.launcher = launcher
        self.key = key
        self.entry = None

    def launch(self, device, grid, args, objs):
        """``Launcher.launch_ptrs`` for this key (see there for ``args`` and ``objs``)."""
        e = self.entry
        if e is not None:
            e[0](grid[0], grid[1] if len(grid) > 1 else 1, 1, _stream_handle(device),
                 *e[1], *args)
            return
        self.launcher.launch_ptrs(self.key, device, grid, args, objs)
        self.entry = self.launcher.cache.get(self.key)  # None under the interpreter


class AlignedSites:
    """The launches of one plan of a ``Launcher``'s kernel (``key``: its constexprs) whose
    pointers are passed as raw addresses, by device and alignment: ``mask`` has bit ``i`` set
    when pointer ``i`` is 16-byte aligned (at most three pointers). A repeat costs one
    lookup of a small int, not the hash of the plan's whole key (the flat elementwise
    kernels: the tiny ops of a training step)."""

    __slots__ = ("launcher", "key", "entries")

    def __init__(self, launcher: Launcher, key):
        self.launcher = launcher
        self.key = key
        self.entries: dict = {}  # device << 3 | mask -> compiled entry

    def launch(self, device, mask, grid0, args, tail, objs):
        """A 1-D launch of ``grid0`` programs with arguments ``args + tail`` (``args`` start
        with the addresses of ``objs``; see ``Launcher.launch_ptrs``)."""
        e = self.entries.get(device << 3 | mask)
        if e is not None:
            e[0](grid0, 1, 1, _stream_handle(device), *e[1], *args, *tail)
            return
        key = (self.key, device, mask)
        self.launcher.launch_ptrs(key, device, (grid0,), args + tail, objs)
        e = self.launcher.cache.get(key)
        if e is not None:  # (none under the interpreter or with direct launches off)
            self.entries[device << 3 | mask] = e


def aligned(*arrays) -> tuple:
    """What Triton specialises a pointer argument on: its element type and whether its
    first element is 16-byte aligned (None for absent operands). Part of every cache key."""
    return tuple(None if a is None else (a.dtype.name, (a.data_ptr() & 15) == 0)
                 for a in arrays)


_TL = {}


def tl_dtype(dtype):
    """The ``triton.language`` dtype for a genesis dtype."""
    t = _TL.get(dtype)
    if t is None:
        import triton.language as tl

        name = dtype.name
        t = {"bool": tl.int1, "bfloat16": tl.bfloat16}.get(name) or getattr(tl, name)
        _TL[dtype] = t
    return t


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    """Ceiling of ``a / b`` for host integers. (``triton.cdiv`` is a constexpr function:
    about 1.6 µs a call on the host, as much as a kernel launch's own host cost.)"""
    return -(-a // b)


class View:
    """A minimal array-like view (shape, strides, dtype, device, first-element address) for
    feeding a re-strided operand to another kernel; never returned to genesis."""

    __slots__ = ("shape", "strides", "dtype", "device", "ptr")

    def __init__(self, ptr: int, shape, strides, dtype, device):
        self.ptr = ptr
        self.shape = tuple(shape)
        self.strides = tuple(strides)
        self.dtype = dtype
        self.device = device

    def data_ptr(self) -> int:
        return self.ptr


def collapse(shape, stride_sets):
    """The one geometry planner of the kernels: drop size-1 dims and merge neighbours
    (outer to inner) that are contiguous with each other for every stride set.

    Returns ``(shape, [strides, ...])`` (lists) describing the same element walk in C order.
    Example: ``collapse((2, 3, 4), [(12, 4, 1), (0, 4, 1)])`` is ``([2, 12], [[12, 1], [0, 1]])``.
    """
    out_shape: list = []
    out_strides: list = [[] for _ in stride_sets]
    for d, n in enumerate(shape):
        if n == 1:
            continue
        if out_shape and all(ss[-1] == s[d] * n for ss, s in zip(out_strides, stride_sets)):
            out_shape[-1] *= n
            for ss, s in zip(out_strides, stride_sets):
                ss[-1] = s[d]
        else:
            out_shape.append(n)
            for ss, s in zip(out_strides, stride_sets):
                ss.append(s[d])
    return out_shape, out_strides


_I32, _I64 = 2**31, 2**63


def int_class(v: int) -> int:
    """What Triton specialises a compiled kernel on for an integer argument ``v``: 1
    (compiled in as a constant), a multiple of 16, or another value; plus, outside int32,
    the width Triton gives it (int64, or uint64 from 2**63)."""
    if v == 1:
        return 1
    return (16 if v % 16 == 0 else 0) + (0 if -_I32 <= v < _I32 else 64 if v < _I64 else 128)


def spec(*ints) -> tuple:
    """``int_class`` of each integer argument: part of a cache key whenever those arguments
    are left specialisable, or may leave int32."""
    return tuple(map(int_class, ints))


def arg_class(a):
    """What Triton specialises a compiled kernel on for a non-constexpr argument ``a``:
    ``int_class`` of an int, the type of a float or a bool, the dtype and 16-byte alignment
    of a pointer (anything with ``data_ptr()``, as ``aligned``), None for None."""
    t = a.__class__
    if t is int:
        return int_class(a)
    if t is float or t is bool:
        return t.__name__
    if a is None:
        return None
    if not hasattr(a, "data_ptr"):
        raise TypeError(f"a kernel argument must be an int, float, bool, None or an array "
                        f"with data_ptr(), got {t.__name__}")
    return a.dtype.name, (a.data_ptr() & 15) == 0
