"""Random numbers with Philox4x32-10 (counter-based), as Triton's ``tl.randint4x``.

Element ``i`` (C order of the array's shape, whatever its strides) of a call draws the four
32-bit words of ``philox(key=seed, counter=offset + i)``, where ``offset`` comes from
``gen.next_offset(numel)``: each call reserves its own counters, so successive calls are
independent streams and a run is a pure function of ``genesis.manual_seed``. Nothing is
stored on the device and no host synchronisation happens — except inside a CUDA graph
capture, where the seed and the offset's start are read from the graph's device-side state
(``generator.CapturedPhilox``, ``DEVICE_STATE``), so that each replay draws new numbers.

* uniform: 24 random bits per float32 (53 per float64) scaled into [low, high).
* normal: Box-Muller on two uniforms (float64 uses four words for two 53-bit uniforms).
* random_: a 64-bit word modulo ``high - low`` (bias below 2**-32 for ranges < 2**32).
* randperm: sort of 64-bit random keys (ties are broken by position, so always a
  permutation).
"""

import triton
import triton.language as tl

from genesis import dtypes as D
from genesis_cuda.capture import capturing_graph

from ._launch import (
    COMPILE_OPTIONS,
    INTERPRET,
    Launcher,
    Ptr,
    arg_class,
    direct_entry,
    empty,
)
from .layout import BLOCK, clone, grid1, offset6, plan, unravel6


@triton.jit
def _words(seed, base, lin):
    """Four uint32 words of Philox for counters ``base + lin`` (int64)."""
    ctr = base + lin
    return tl.randint4x(seed, ctr)


@triton.jit
def _u24(w):
    """float32 uniform in [0, 1) from the top 24 bits of a uint32 word."""
    return (w >> 8).to(tl.float32) * 5.960464477539063e-08


@triton.jit
def _u53(w0, w1):
    """float64 uniform in [0, 1) from 53 bits of two uint32 words."""
    hi = (w0 >> 5).to(tl.float64)
    lo = (w1 >> 6).to(tl.float64)
    return (hi * 67108864.0 + lo) * 1.1102230246251565e-16


@triton.jit
def _narrow(v, dtype: tl.constexpr, F64: tl.constexpr):
    """float64 -> output type, through float32 for narrow types (one fp64 rounding)."""
    if F64:
        return v.to(dtype)
    return v.to(tl.float32).to(dtype)


@triton.jit(do_not_specialize=["seed", "base", "span", "low"])
def _random_kernel(out, n, seed, base, p0: tl.float64, p1: tl.float64, span, low: tl.int64,
                   n1, n2, n3, n4, n5, d0, d1, d2, d3, d4, d5, state,
                   KIND: tl.constexpr, F64: tl.constexpr, BLOCK: tl.constexpr,
                   DEVICE_STATE: tl.constexpr):
    """KIND 0: uniform [p0, p1); 1: normal (mean p0, std p1); 2: integers [low, low+span);
    3: raw 64-bit words (int64). DEVICE_STATE: seed and the counters' start are read from
    ``state`` (int64 seed, offset), ``base`` is relative to that start."""
    lin = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    mask = lin < n
    if DEVICE_STATE:
        seed = tl.load(state)
        base = base + tl.load(state + 1)
    w0, w1, w2, w3 = _words(seed, base, lin)
    if KIND == 0:
        if F64:
            u = _u53(w0, w1)
        else:
            u = _u24(w0).to(tl.float64)
        y = _narrow(p0 + (p1 - p0) * u, out.dtype.element_ty, F64)
        # Rounding to a narrow type can land on `high`; the range is half-open.
        low_y = _narrow(tl.zeros([BLOCK], tl.float64) + p0, out.dtype.element_ty, F64)
        y = tl.where(y.to(tl.float64) >= p1, low_y, y)
    elif KIND == 1:
        if F64:
            u1 = 1.0 - _u53(w0, w1)  # (0, 1]: log is finite
            u2 = _u53(w2, w3)
            z = tl.sqrt(-2.0 * tl.log(u1)) * tl.cos(6.283185307179586 * u2)
        else:
            u1 = 1.0 - _u24(w0)
            u2 = _u24(w1)
            z = (tl.sqrt(-2.0 * tl.log(u1)) * tl.cos(6.283185307179586 * u2)).to(tl.float64)
        y = _narrow(p0 + p1 * z, out.dtype.element_ty, F64)
    elif KIND == 2:
        r = (w0.to(tl.uint64) << 32) | w1.to(tl.uint64)
        y = ((r % span.to(tl.uint64)).to(tl.int64) + low).to(out.dtype.element_ty)
    else:
        r = (w0.to(tl.uint64) << 32) | w1.to(tl.uint64)
        y = r.to(tl.int64, bitcast=True).to(out.dtype.element_ty)
    c0, c1, c2, c3, c4, c5 = unravel6(lin, n1, n2, n3, n4, n5)
    tl.store(out + offset6(c0, c1, c2, c3, c4, c5, d0, d1, d2, d3, d4, d5), y, mask=mask)


_random = Launcher(_random_kernel)


def _signed64(x: int) -> int:
    """A 64-bit counter as the int64 with the same bits (Philox uses the bits)."""
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= 1 << 63 else x


_capture_ready: set = set()  # launches whose DEVICE_STATE twin is compiled and loaded


def _ready_for_capture(grid, args: tuple, opts: dict) -> None:
    """Compile and load the DEVICE_STATE variant of a launch just made on the host path, so
    that capturing the same fill later (a CUDA graph, after its eager warm-up) finds it
    built: a kernel module cannot be loaded while a graph is being captured. Its seed and
    base are passed as a capture passes them (small ints), so the variants match."""
    key = tuple(arg_class(a) for a in args[:2] + args[4:]) + tuple(opts.items())
    if key in _capture_ready:
        return
    seedless = args[:2] + (0, 0) + args[4:]
    compiled = _random_kernel.warmup(*seedless, _STATE_MODEL, grid=grid, DEVICE_STATE=True,
                                     **opts, **COMPILE_OPTIONS)
    direct_entry(compiled)  # loads the compiled module
    _capture_ready.add(key)


_STATE_MODEL = Ptr(16, D.int64)  # what a capture's state pointer specialises as (aligned)


def _fill_random(a, gen, kind: int, p0=0.0, p1=0.0, span=1, low=0):
    total = 1
    for s in a.shape:
        total *= s
    if total == 0:
        return a
    graph = capturing_graph(gen.device)
    if graph is None:
        base, seed, state = _signed64(gen.next_offset(total)), int(gen.seed), None
    else:  # counters relative to the replay's start, which the graph keeps on the device
        cap = graph.philox(gen)
        base, seed, state = cap.reserve(total), 0, cap.state
    f64 = a.dtype is D.float64
    opts = {"KIND": kind, "F64": f64, "BLOCK": BLOCK}
    for n, s6, ((p, ds),), _big in plan(tuple(a.shape), [(a.data_ptr(), a.dtype.itemsize,
                                                          a.strides)]):
        args = (Ptr(p, a.dtype), n, seed, base, float(p0), float(p1), span, low, *s6[1:],
                *ds)
        _random(grid1(n), *args, state, DEVICE_STATE=state is not None, **opts)
        if state is None and not INTERPRET:
            _ready_for_capture(grid1(n), args, opts)
        base = _signed64(base + n)  # host-split launches walk consecutive C-order ranges
    return a


def uniform_(a, low: float, high: float, gen):
    """Fill floating ``a`` in place with U[low, high) draws from ``gen``."""
    return _fill_random(a, gen, 0, low, high)


def normal_(a, mean: float, std: float, gen):
    """Fill floating ``a`` in place with N(mean, std**2) draws from ``gen``."""
    return _fill_random(a, gen, 1, mean, std)


def random_(a, low: int, high: int, gen):
    """Fill ``a`` in place with uniform integers in ``[low, high)``."""
    span = int(high) - int(low)
    if span <= 0:
        raise ValueError(f"random_ expects low < high, got low={low}, high={high}")
    return _fill_random(a, gen, 2, span=span, low=int(low))


def randperm(n: int, dtype, index, gen):
    """A random permutation of ``0..n-1`` in ``dtype`` on device ``index``."""
    from .sorting import sort

    keys = empty((n,), D.int64, index)
    if n == 0:
        return empty((0,), dtype, index)
    _fill_random(keys, gen, 3)
    _, perm = sort(keys, 0, False, True)
    return perm if dtype is D.int64 else clone(perm, dtype)
