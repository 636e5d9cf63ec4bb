"""How every genesis-cuda kernel is launched: ``Launcher``, one launcher with one cache.

A plain ``kernel[grid](...)`` costs about 8 µs of host time: Triton binds the arguments,
computes a specialisation key and looks the compiled kernel up on every call. Our kernels
mark every integer argument ``do_not_specialize`` and pass what matters for code generation
as constexprs, so the only specialisation Triton adds on its own is the 16-byte alignment
of each pointer. A ``Launcher`` (one ``@triton.jit`` function with its compile options)
keys its cache on exactly that (plus the constexprs), compiles through Triton's JIT on the
first launch of a key and afterwards calls the compiled kernel's launcher directly
(``direct_entry``: Triton's C launcher itself where its Python wrapper would add nothing).

One launcher, three ways in, one cache and one miss path:

* ``launcher(grid, *args, **constexprs)``: the key is worked out from the arguments, as
  Triton keys its own compiled kernels (``key_of``, ``arg_class``): layout, indexing,
  sorting, random, the matmul tuner's timer.
* ``launcher.launch(key, device, grid, args, big, objs)``: the caller builds the key from
  what its plan already knows (``aligned``, ``spec``): softmax, norms, the fused LLM kernels,
  attention, the optimizers, arg-reductions, cumsum.
* ``launcher.site(key)``: a ``Site`` pins the cache entries of a plan that repeats its
  launches, by a small int variant (pointer alignment, device), so a repeat neither builds
  nor hashes a key: elementwise, reduction, and matmul (whose plans fix their kernel, grid
  and constexprs once; ``matmul_tuning.plan_site``).

Kernels whose compile options are chosen per problem (attention's tiles, matmul's tuned
configs) share one launcher per (kernel, options) through ``launcher(fn, **opts)``.

Integer arguments are only guaranteed to be typed ``i32`` by Triton when they are below
2**31; callers pass ``big=True`` (any extent >= 2**31) to take Triton's own, fully keyed
path instead, never cached.

``GENESIS_DIRECT_LAUNCH=0`` in the environment turns the direct path off (every launch goes
through Triton's JIT, as a plain ``kernel[grid](...)``), to measure what it saves or to rule it
out when a kernel misbehaves; the check sits on the cache-miss path only.

Programmatic dependent launch (Hopper on, ``dependent_launch``): the kernels of a decode step
take a ``PDL`` constexpr and are compiled to start while the kernel ahead of them finishes,
hiding part of each launch's latency (``GENESIS_DEPENDENT_LAUNCH=0`` turns it off).

Every launch goes to the current stream of its device (``streams.current_handle``, as
Triton's own launches do through ``triton_hooks``), so a CUDA graph captures it.
Under the Triton interpreter (``TRITON_INTERPRET=1``, the CPU tests of the kernels) every
launch goes through Triton with the arrays seen as torch tensors, and nothing is cached.
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
from genesis_cuda.kernels import launch_queue
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
    where its ``PDL`` argument is true (``Launcher`` sees to
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


# Triton compile options every genesis kernel is built with (``Launcher`` adds them).
# Floating-point fusion (``a * b + c`` as one fused multiply-add, as nvcc builds torch's
# kernels by default) is Triton's default up to 3.9, and 3.10 turns that default off: it is
# asked for here, so every Triton builds the same kernels.
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
    """The one way a genesis-cuda kernel is launched: one ``@triton.jit`` function with its
    compile options, and the one cache of its compiled kernels.

    The cache maps ``(key, device)`` to a compiled kernel's direct entry (``direct_entry``);
    ``key`` must identify everything Triton specialises the compiled kernel on: the
    constexpr values, each pointer's dtype and 16-byte alignment (``aligned``) and each
    integer argument's class (``spec``; most integer parameters are ``do_not_specialize``).
    A miss compiles through Triton's JIT (which also launches) and stores the entry; a hit
    calls the entry with no argument binding. A kernel with a ``PDL`` constexpr is compiled
    with ``launch_pdl`` where that argument is true (``dependent_launch``).

    Three ways in, one cache and one miss path (``launch``):

    * ``launcher(grid, *args, **constexprs)``: the key is worked out from the arguments, as
      Triton keys its own compiled kernels (a pass over the arguments per call).
    * ``launcher.launch(key, device, grid, args, big, objs)``: the caller's key, built from
      what its plan already knows (the hot families).
    * ``launcher.site(key)``: a ``Site``, the cache entries of a plan that repeats its
      launches (elementwise, reduction, matmul): a repeat neither builds nor hashes a key.

    Example:
        >>> _scale = Launcher(_scale_kernel, num_warps=4)
        >>> _scale((cdiv(n, 1024),), x, out, n, 2.0, BLOCK=1024)
    """

    __slots__ = ("fn", "opts", "pdl_at", "cache", "names", "constexpr_at")

    def __init__(self, fn, **opts):
        self.fn = fn
        self.opts = {**COMPILE_OPTIONS, **opts}  # num_warps, num_stages, ...
        # a kernel with a PDL constexpr is compiled with launch_pdl where that argument is true
        self.pdl_at = fn.arg_names.index("PDL") if "PDL" in fn.arg_names else None
        self.cache: dict = {}
        self.names = tuple(fn.arg_names)
        # which parameters are constexprs (keyed by value); nothing is keyed under the
        # interpreter, whose functions do not list their parameters
        self.constexpr_at = None if INTERPRET else tuple(p.is_constexpr for p in fn.params)

    def __call__(self, grid, *args, **constexprs):
        """``kernel[grid](*args, **constexprs)`` on the current device, keyed by
        ``key_of``. Constexprs may be passed by name (after all the positional arguments).
        For the families off the hot path: the key costs a pass over the arguments."""
        if constexprs:
            args = args + tuple(constexprs[name] for name in self.names[len(args):])
        self.launch(None if INTERPRET else self.key_of(args), _device._current_device, grid,
                    args)

    def key_of(self, args) -> tuple:
        """What Triton specialises a compiled kernel on for the full argument list ``args``:
        each constexpr by its value, every other argument by ``arg_class``."""
        return tuple(a if c else int_class(a) if a.__class__ is int else arg_class(a)
                     for a, c in zip(args, self.constexpr_at))  # (ints: most arguments)

    def _options(self, args) -> dict:
        i = self.pdl_at
        return self.opts if i is None else compile_options(self.opts, args[i])

    def launch(self, key, device, grid, args, big=False, objs=None):
        """Launch on ``device``'s current stream with ``grid`` (1 to 3 ints).

        Args:
            key: what the compiled kernel is specialised on (see the class); with
                ``device`` it is the cache key.
            args: *all* the kernel's parameters in order, constexprs included (as Triton's
                launcher takes them).
            big: an extent reaches 2**31: Triton's own, fully keyed launch (its integer
                arguments typed ``i64`` where they need it), never cached.
            objs: where the first ``len(objs)`` of ``args`` are raw addresses (ints, which
                spares Triton's launcher a driver query per pointer), the arrays behind
                them, used only by a compiling launch; None when ``args`` hold the arrays.
        """
        if not (big or INTERPRET):
            entry = self.cache.get((key, device))
            if entry is not None:
                if launch_queue.ACTIVE and self._deferred(entry, grid, device, args):
                    return
                entry[0](grid[0], grid[1] if len(grid) > 1 else 1,
                         grid[2] if len(grid) > 2 else 1, _stream_handle(device), *entry[1],
                         *args)
                return
        if INTERPRET:
            self.fn[grid](*map(_interpreted, _with_objs(args, objs)), **self.opts)
            return
        q = launch_queue.deferring_here() if launch_queue.ACTIVE else None
        if q is not None:  # a trace's: the compilation recorded, the launch queued
            full = _with_objs(args, objs)

            def warmup():
                self.fn.warmup(*full, grid=grid, **self._options(full))

            if q.collecting_depth:  # (precompile_calls records it; nothing is launched)
                warmup()
            else:
                q.defer_compiling(warmup, self.launch, (key, device, grid, args, big, objs),
                                  device)
            return
        args = _with_objs(args, objs)
        compiled = self.fn[grid](*args, **self._options(args))  # compiles, launches
        # (None: ``parallel_compile`` is collecting this compilation, nothing launched)
        if DIRECT and not big and compiled is not None:
            self.cache[(key, device)] = direct_entry(compiled)

    @staticmethod
    def _deferred(entry, grid, device, args) -> bool:
        """Whether this cached launch was queued behind launches waiting in this thread (a
        trace's: ``launch_queue``)."""
        q = launch_queue.waiting(device)
        if q is None:
            return False
        q.defer(entry[0], (grid[0], grid[1] if len(grid) > 1 else 1,
                           grid[2] if len(grid) > 2 else 1, _stream_handle(device), *entry[1],
                           *args))
        return True

    def site(self, key=None) -> Site:
        """A ``Site`` of this launcher for ``key`` (None: the key of its first launch's
        arguments, ``key_of``)."""
        return Site(self, key)


_launchers: dict = {}


def launcher(fn, **opts) -> Launcher:
    """The shared ``Launcher`` of ``fn`` with compile options ``opts`` (num_warps,
    num_stages, maxnreg ...), for kernels whose options are chosen per problem (attention's
    tiles, matmul's tuned configs): one cache per (kernel, options), made on first use."""
    key = (fn, *sorted(opts.items()))
    la = _launchers.get(key)
    if la is None:
        la = _launchers[key] = Launcher(fn, **opts)
    return la


class Site:
    """The cache entries of a ``Launcher`` pinned for a plan that repeats its launches: after
    the first launch of a variant its compiled entry is kept here, so a repeat neither builds
    nor hashes a key: one lookup of a small int, then the call.

    ``key`` is what the plan fixes of the launcher's key (see ``Launcher``), or None to take
    ``key_of`` the first launch's full arguments (matmul's plans: their integers never
    change, only their pointers, whose alignment is part of the plan's own key). A
    *variant* is a small int the caller computes for what the plan leaves open: which
    pointers are 16-byte aligned (a bit each) and, for a plan not made per device, the
    device (``device << 3 | mask``); 0 where the plan fixes everything. The launcher's key
    of a variant is ``(key, variant)``.

    Example:
        >>> site = _flat.site(("flat", op, dtype.name))
        >>> v = dev << 3 | (po & 15 == 0) | (px & 15 == 0) << 1
        >>> site.launch(v, dev, cdiv(n, block), 1, (po, px, n), (out, x), tail)
    """

    __slots__ = ("launcher", "key", "entries")

    def __init__(self, launcher: Launcher, key=None):
        self.launcher = launcher
        self.key = key
        self.entries: dict = {}  # variant -> compiled entry

    def launch(self, variant: int, device, g0: int, g1: int, args, objs=None, tail=()):
        """``Launcher.launch`` of ``args + tail`` for this key and ``variant`` (``objs``:
        see there) on a ``(g0, g1)`` grid; the grid's two ints and ``tail`` (the plan's fixed
        trailing arguments) are passed apart to spare the caller a tuple on every launch."""
        e = self.entries.get(variant)
        if e is not None:
            if launch_queue.ACTIVE and Launcher._deferred(e, (g0, g1), device,
                                                          (*args, *tail)):
                return
            e[0](g0, g1, 1, _stream_handle(device), *e[1], *args, *tail)
            return
        la = self.launcher
        full = tuple(args) + tuple(tail)
        if self.key is None and not INTERPRET:
            self.key = la.key_of(full if objs is None else tuple(objs) + full[len(objs):])
        key = (self.key, variant)
        la.launch(key, device, (g0, g1), full, False, objs)
        e = la.cache.get((key, device))
        if e is not None:  # (none under the interpreter or with direct launches off)
            self.entries[variant] = e


def _with_objs(args: tuple, objs) -> tuple:
    """``args`` with its leading raw addresses replaced by ``objs``, the arrays behind them
    (see ``Launcher.launch``), for Triton's own launch path."""
    return args if objs is None else tuple(objs) + tuple(args[len(objs):])


def _interpreted(arg):
    """A kernel argument as the Triton interpreter takes it: arrays as torch tensors
    (through the converter the test-suite installs, ``interpret_arg``), a host tensor
    descriptor re-pointed at one."""
    if hasattr(arg, "data_ptr"):
        return interpret_arg(arg)
    base = getattr(arg, "base", None)
    if base is not None and hasattr(base, "data_ptr") and hasattr(arg, "block_shape"):
        return type(arg)(interpret_arg(base), arg.shape, arg.strides, arg.block_shape)
    return arg


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
    of a pointer (anything with ``data_ptr()``, as ``aligned``), None for None; a host
    tensor descriptor by its base, block shape, shape and strides (more than Triton keys it
    on: a finer key only compiles more often, never reuses wrongly)."""
    t = a.__class__
    if t is int:
        return int_class(a)
    if t is float or t is bool:
        return t.__name__
    if a is None:
        return None
    if hasattr(a, "data_ptr"):
        return a.dtype.name, (a.data_ptr() & 15) == 0
    base = getattr(a, "base", None)
    if base is not None and hasattr(a, "block_shape"):  # a host TMA descriptor (matmul)
        return ("desc", arg_class(base), tuple(a.block_shape), spec(*a.shape),
                spec(*a.strides))
    raise TypeError(f"a kernel argument must be an int, float, bool, None, an array with "
                    f"data_ptr() or a tensor descriptor, got {t.__name__}")
