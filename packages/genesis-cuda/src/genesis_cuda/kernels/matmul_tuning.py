"""Tile configurations of the matmul kernels and the autotuner that picks one per problem.

A config is ``(BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_stages, num_warps)``, with a leading
tag for the TMA kernel's variants: ``"p"`` the persistent kernel, ``("s", waves)`` split-K.
Problems big enough to time are bucketed (each size rounded up to a power of two) and the
candidates of a bucket are compiled together (``parallel_compile``), then timed on the
first problem seen in it, on the GPU (events on the current stream, host launch cost
excluded) with a synchronisation (refused during CUDA graph capture); smaller problems take
``small_config``, a rule.

Also how a plan becomes launches: ``plan_site`` (a chosen config's kernel, options and
constexprs as one launch site) and ``split_k`` (how many K-chunks a split-K plan takes).
Split-K: a product whose output tiles are too few to fill the GPU splits K into ``split``
chunks, one program per (tile, chunk), each writing its float32 partial sums to a workspace
that is then added up in a fixed order (the same bits on every run, unlike float atomics).
The workspace comes from the caching allocator on every call, always the same size for a
plan, so a CUDA graph can capture it. The reductions live with their kernels (``matmul``,
``matmul_small``).
"""

import math

import triton
import triton.language as tl

from genesis_cuda import capture
from genesis_cuda.streams import Event

from . import launch_queue
from ._launch import Launcher, cdiv, launcher
from .parallel_compile import precompile_calls

# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_stages, num_warps)
# A leading "p" marks the persistent kernel (unbatched problems only); split-K candidates
# ("s", split, ...) are added per problem by ``splitk_candidates``.
TMA_CANDIDATES = [
    (128, 256, 64, 8, 3, 8),
    (256, 128, 64, 8, 3, 8),
    (128, 256, 64, 8, 4, 8),
    (128, 128, 64, 8, 4, 8),
    (128, 128, 64, 8, 4, 4),
    (64, 128, 64, 8, 4, 4),
    (128, 128, 128, 8, 3, 8),  # short K (a forward or input gradient over 896 features):
    (64, 128, 128, 8, 3, 4),  # half as many K-steps
    (64, 256, 64, 8, 4, 4),
    ("p", 128, 256, 64, 8, 3, 8),  # (4 stages would need 256 KB of shared memory)
    ("p", 128, 128, 64, 8, 4, 8),
    # small tiles spread an output of few tiles evenly over the SMs (8192 x 896 is 448
    # tiles of 128x128, 3.4 waves on 132 SMs, but 896 of 64x128, 6.8 waves)
    ("p", 64, 128, 64, 8, 4, 4),
    ("p", 64, 256, 64, 8, 4, 4),
]
PTR_CANDIDATES = {
    "half": [(128, 256, 64, 8, 3, 8), (128, 128, 64, 8, 4, 8), (128, 128, 32, 8, 4, 4),
             (64, 128, 64, 8, 4, 4)],
    "fp32": [(128, 128, 32, 8, 3, 8), (128, 64, 32, 8, 4, 4), (64, 64, 32, 8, 4, 4)],
    "fp64": [(64, 64, 16, 8, 3, 4), (32, 64, 16, 8, 3, 4)],
}
tuned: dict = {}  # problem bucket -> the config picked
timings: dict = {}  # problem bucket -> [(config, seconds per call)] of the timing run


# Split-K ("s", waves, tile...), unbatched TMA problems whose output tiles do not fill the
# GPU evenly (``_mm_tma_splitk_kernel``): the whole waves of tiles run unsplit and the tiles
# left over (all of them when there is less than a wave) are split in K into enough chunks
# for ``waves`` waves of programs. A weight gradient: gate_proj's 4864 x 896 over 8k tokens is
# 133 tiles of 256x128 on 132 SMs, two waves for 1.01 waves of work unsplit, ~1.03 waves as
# 132 whole tiles and one tile in 32 chunks; q_proj's 896 x 896 is 49 tiles of 128x128, a
# third of the SMs busy unsplit. Candidates per tile shape: one wave of split programs after
# the whole waves, or 1-3 waves when there are none (timed: more chunks balance the SMs
# better but write more float32 partials). The config names waves, not chunks, so that it
# suits every problem of its bucket. A chunk is at least SPLITK_MIN_TILES K-tiles, and the
# partials at most SPLITK_MAX_BYTES.
SPLITK_TILES = [(128, 256, 64, 8, 3, 8), (256, 128, 64, 8, 3, 8), (128, 128, 64, 8, 4, 8),
                (128, 128, 64, 8, 4, 4)]
SPLITK_MIN_TILES = 4
SPLITK_MAX_BYTES = 64 << 20


def splitk_plan(M: int, N: int, K: int, sms: int, waves: int, tile) -> tuple:
    """``(whole, rest, split, tiles_per)`` of split-K config ``("s", waves, *tile)``: tiles
    run unsplit, tiles split, K-chunks per split tile and K-tiles per chunk."""
    bm, bn, bk = tile[:3]
    tiles = cdiv(M, bm) * cdiv(N, bn)
    k_tiles = cdiv(K, bk)
    rest = tiles % sms
    if rest == 0:
        return tiles, 0, 1, k_tiles
    split = min(waves * sms // rest, k_tiles // SPLITK_MIN_TILES,
                SPLITK_MAX_BYTES // (rest * bm * bn * 4))
    per = cdiv(k_tiles, max(split, 1))
    return tiles - rest, rest, cdiv(k_tiles, per), per


def splitk_candidates(M: int, N: int, K: int, sms: int) -> list:
    """Split-K configs worth timing for an (M, N, K) problem on ``sms`` multiprocessors
    (none when its tiles fill whole waves or K is too short to split), one per distinct
    split."""
    out, seen = [], set()
    for tile in SPLITK_TILES:
        tiles = cdiv(M, tile[0]) * cdiv(N, tile[1])
        for waves in ((1,) if tiles > sms else (1, 2, 3)):
            plan = splitk_plan(M, N, K, sms, waves, tile)
            if plan[2] > 1 and (tile, plan) not in seen:
                seen.add((tile, plan))
                out.append(("s", waves, *tile))
    return out


def small_config(kind: str, M: int, N: int, K: int = 0, sms: int = 0):
    """The rule-picked config of a problem too small to time.

    ``sms`` given (an unbatched TMA problem): the largest of the 128x128, 64x128 and 64x64
    tiles that still gives (7/8 of) the SMs a program (k_proj's forward over 8k tokens: 8192 x 128
    is 64 tiles of 128x128 but 128 of 64x128), else split-K on the first tile when K is
    long enough (a weight gradient: 128 x 896 over 8k tokens)."""
    if kind == "fp64":
        return (32, 32, 16, 8, 2, 4)
    if kind == "fp32":
        return (64, 64, 32, 8, 3, 4)
    bm = 64 if M <= 64 else 128
    bn = 64 if N <= 64 else 128
    cfg = (bm, bn, 64, 8, 3, 4)
    if sms:
        for tm, tn in ((bm, bn), (64, bn), (64, 64)):
            if 8 * cdiv(M, tm) * cdiv(N, tn) >= 7 * sms:  # 7/8 of the SMs or more busy
                return (tm, tn, 64, 8, 3, 4)
        if splitk_plan(M, N, K, sms, 1, cfg)[2] > 1:  # one wave of K-chunks
            return ("s", 1, *cfg)
    return cfg


@triton.jit
def _clock(dummy):
    """The GPU's global nanosecond timer (``dummy``: inline asm needs an operand)."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [dummy],
                                     dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _spin_kernel(ns):
    """Holds its stream for ``ns`` nanoseconds (one thread busy-waiting)."""
    t0 = _clock(ns)
    t = t0
    while t - t0 < ns:
        t = _clock(ns)


_spin = Launcher(_spin_kernel, num_warps=1)
_SPIN_NS = 2_000_000  # the stream is held while the host queues the timed calls
_SPIN_NS_MAX = 64 * _SPIN_NS


def _seconds_per_call(launch, reps: int) -> float:
    """GPU time of one ``launch()``: a spin kernel holds the stream while the host queues
    ``reps`` calls behind it, and events time the calls on the GPU, so the host's launch
    cost (two launches and a workspace for a split-K config) is not counted, as the
    benchmarks' ``do_bench`` does not count it either. Where the spin ran out before the
    last call was queued (a busy or slow host: the GPU may have waited for a call), it is
    timed again behind a spin twice as long."""
    spin = _SPIN_NS
    while True:
        start, end = Event(enable_timing=True), Event(enable_timing=True)
        _spin((1,), spin)
        start.record()
        for _ in range(reps):
            launch()
        queued_in_time = not start.query()  # the spin still held the stream
        end.record()
        end.synchronize()
        if queued_in_time or spin >= _SPIN_NS_MAX:
            return start.elapsed_time(end) / 1e3 / reps
        spin *= 2


def choose(key, candidates, launch, flops: int):
    """The fastest of ``candidates`` for this problem bucket (timed once, then cached)."""
    cfg = tuned.get(key)
    if cfg is not None:
        return cfg
    capture.check_not_capturing(
        f"autotune a matmul of a new shape bucket {key} (timing synchronises the device); "
        "run the captured code once before capturing (warm-up)")
    best, best_t = None, math.inf
    reps = max(2, min(20, int(5e-3 / max(flops / 6e14, 1e-7))))
    times = timings[key] = []
    # every candidate's kernels compiled side by side first (worker processes), not one
    # after the other at its first timing
    precompile_calls([lambda cand=cand: launch(cand) for cand in candidates])
    with launch_queue.paused():  # (timing: a trace's deferred launches are made first)
        for cand in candidates:
            try:
                launch(cand)  # compile and warm
                t = _seconds_per_call(lambda: launch(cand), reps)  # noqa: B023 (used at once)
            except Exception:  # out of shared memory or registers for this shape: skip it
                continue
            times.append((cand, t))
            if t < best_t:
                best, best_t = cand, t
    if best is None:
        raise RuntimeError(f"matmul: no kernel configuration compiled for {key}")
    tuned[key] = best
    return best


def tuned_kernel(key, candidates, bind, launch, flops: int, device: int):
    """``bind(cfg)``, the kernel of this problem bucket's fastest config (``choose``). In a
    trace's launch queue (``launch_queue``) the timing waits there (``TunedLater``), so the
    candidates of every new bucket the trace meets compile in one batch with its other
    kernels instead of one batch per bucket.

    Args:
        key: the problem bucket; candidates: its tile configs; bind: ``cfg -> go(a, b, c,
            bias)``; launch: ``cfg -> None``, one launch of a candidate on the operands
            (kept until tuned); flops: the product's, for the number of timed calls;
            device: the operands'.
    """
    q = launch_queue.deferring_here() if launch_queue.ACTIVE else None
    if q is None or key in tuned:
        return bind(choose(key, candidates, launch, flops))
    return TunedLater(q, key, candidates, bind, launch, flops, device)


class TunedLater:
    """A matmul plan's kernel while its bucket's tuning waits in a trace's launch queue.

    Made, it records the candidates' compilations (their launches collected, nothing run)
    and queues the tuning; a call before the tuning has run queues the product behind it.
    The queue's flush compiles the recorded kernels with the others, times the candidates
    (``choose``) and makes the queued products with the fastest. If the queue went away
    first (its flush raised), the next call tunes at once.
    """

    __slots__ = ("go", "tuning")

    def __init__(self, queue, key, candidates, bind, launch, flops: int, device: int):
        self.go = None
        self.tuning = (key, candidates, bind, launch, flops)
        jobs = queue.collect([lambda cand=cand: launch(cand) for cand in candidates])
        queue.defer_work(self._tune, (), device, jobs)

    def _tune(self) -> None:
        if self.go is None:
            key, candidates, bind, launch, flops = self.tuning
            self.go = bind(choose(key, candidates, launch, flops))
            self.tuning = None  # (its operands are no longer kept)

    def __call__(self, a, b, c, bias) -> None:
        if self.go is None:
            q = launch_queue.deferring_here() if launch_queue.ACTIVE else None
            if q is not None:
                q.defer_work(self._call, (a, b, c, bias), c.device)
                return
            self._tune()
        self.go(a, b, c, bias)

    def _call(self, a, b, c, bias) -> None:
        self._tune()
        self.go(a, b, c, bias)


def bucket(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def split_k(programs: int, k_tiles: int, min_tiles: int, target: int):
    """``(split, tiles_per_split)``: how many K-chunks bring ``programs`` output tiles up to
    ``target`` programs, each chunk at least ``min_tiles`` K-tiles long (fewer would spend
    more on the float32 partials than they save); no chunk is left empty.

    Example: ``split_k(8, 64, 4, 132)`` is ``(16, 4)``: 16 chunks of 4 K-tiles."""
    split = max(1, min(cdiv(target, max(programs, 1)), k_tiles // max(min_tiles, 1)))
    per = cdiv(k_tiles, split)
    return cdiv(k_tiles, per), per


def plan_site(fn, constexprs: dict, **opts):
    """``(site, tail)`` of one matmul plan's kernel: the launch site (``_launch.Site``) of
    ``fn``'s shared launcher for compile options ``opts`` (num_warps, num_stages), keyed on
    its first launch's arguments (a plan's integers never change, only its pointers, whose
    alignment is part of the plan's key), and ``constexprs`` as the kernel's trailing
    arguments in order (``site.launch(0, device, g0, g1, args, None, tail)``).

    Example: ``plan_site(_mm_kernel, dict(HAS_BIAS=False, ...), num_warps=4, num_stages=3)``."""
    names = tuple(fn.arg_names)
    if set(names[len(names) - len(constexprs):]) != set(constexprs):
        raise ValueError(f"{fn.__name__}: the constexprs {sorted(constexprs)} must be its "
                         f"last parameters")
    tail = tuple(constexprs[n] for n in names[len(names) - len(constexprs):])
    return launcher(fn, **opts).site(), tail
