"""Tile configurations of the matmul kernels and the autotuner that picks one per problem.

A config is ``(BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_stages, num_warps)``, with a leading
tag for the TMA kernel's variants: ``"p"`` the persistent kernel, ``("s", split)`` split-K.
Problems big enough to time are bucketed (each size rounded up to a power of two) and the
candidates of a bucket are timed on the first problem seen in it, with a device
synchronisation (so it is correct whatever stream genesis launches on, and refused during
CUDA graph capture); smaller problems take ``small_config``, a rule.
"""

import math
import time

from genesis_cuda import capture

from ._launch import cdiv
from .matmul_common import split_k

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
    ("p", 128, 256, 64, 8, 3, 8),
    ("p", 128, 256, 64, 8, 4, 8),
    ("p", 128, 128, 64, 8, 4, 8),
]
PTR_CANDIDATES = {
    "half": [(128, 256, 64, 8, 3, 8), (128, 128, 64, 8, 4, 8), (128, 128, 32, 8, 4, 4),
             (64, 128, 64, 8, 4, 4)],
    "fp32": [(128, 128, 32, 8, 3, 8), (128, 64, 32, 8, 4, 4), (64, 64, 32, 8, 4, 4)],
    "fp64": [(64, 64, 16, 8, 3, 4), (32, 64, 16, 8, 3, 4)],
}
tuned: dict = {}


# Split-K ("s", split, tile...): unbatched TMA problems whose output tiles underfill the GPU
# (a weight gradient: M x N = 896 x 896 or 128 x 896 summed over K = 8k tokens). Candidates
# split each of these tiles into enough K-chunks for one and for two waves of programs; a
# chunk is at least SPLITK_MIN_TILES K-tiles (512 elements), so the float32 partials stay
# small against the operands they sum.
SPLITK_TILES = [(128, 256, 64, 8, 3, 8), (128, 128, 64, 8, 4, 8)]
SPLITK_MIN_TILES = 8


def splitk_candidates(M: int, N: int, K: int, sms: int) -> list:
    """Split-K configs worth timing for an (M, N, K) problem on ``sms`` multiprocessors
    (none when its tiles already fill the GPU or K is too short to split)."""
    out = []
    for tile in SPLITK_TILES:
        bm, bn, bk = tile[:3]
        for waves in (1, 2):
            split, _ = split_k(cdiv(M, bm) * cdiv(N, bn), cdiv(K, bk), SPLITK_MIN_TILES,
                               waves * sms)
            if split > 1 and ("s", split, *tile) not in out:
                out.append(("s", split, *tile))
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
        split, _ = split_k(cdiv(M, bm) * cdiv(N, bn), cdiv(K, 64), SPLITK_MIN_TILES, sms)
        if split > 1:
            return ("s", split, *cfg)
    return cfg


def _sync():
    try:
        from cuda.bindings import driver

        driver.cuCtxSynchronize()
    except ImportError:  # pragma: no cover - cuda-python is a dependency
        import torch

        torch.cuda.synchronize()


def choose(key, candidates, launch, flops: int):
    """The fastest of ``candidates`` for this problem bucket (timed once, then cached)."""
    cfg = tuned.get(key)
    if cfg is not None:
        return cfg
    capture.check_not_capturing(
        f"autotune a matmul of a new shape bucket {key} (timing synchronises the device); "
        "run the captured code once before capturing (warm-up)")
    best, best_t = None, math.inf
    reps = max(1, min(20, int(5e-3 / max(flops / 6e14, 1e-7))))
    for cand in candidates:
        try:
            launch(cand)  # compile and warm
            _sync()
            t0 = time.perf_counter()
            for _ in range(reps):
                launch(cand)
            _sync()
            t = time.perf_counter() - t0
        except Exception:  # out of shared memory or registers for this shape: skip it
            continue
        if t < best_t:
            best, best_t = cand, t
    if best is None:
        raise RuntimeError(f"matmul: no kernel configuration compiled for {key}")
    tuned[key] = best
    return best


def bucket(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())
