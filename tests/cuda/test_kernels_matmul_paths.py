"""The matmul paths for decode and training shapes, against torch in float64.

* small M (``matmul_small``): M = 1 (the CUDA-core matrix-vector kernel) and 2..64 (swapped
  tensor-core products), odd N and K, bias, weight and transposed layouts, split-K reduced
  in the same launch (chunk counters of its own per plan, back at zero after each call);
* split-K of the TMA kernel on the three layouts of a linear layer: forward ``x @ W.T``,
  input gradient ``g @ W``, weight gradient ``g.T @ x``; all tiles split, or whole waves
  of tiles unsplit and the rest split;
* a batch of left operands times a broadcast right operand folded into one product.

Inputs are torch tensors seen through ``kernel_arrays.dev`` (no copy). Runs on the GPU and,
at these small sizes, under the Triton interpreter on the CPU, where the device has 4 SMs
(``_launch.sm_count``) so that small problems split K too::

    TRITON_INTERPRET=1 python -m pytest --noconftest -o addopts=--import-mode=importlib \\
        tests/cuda/test_kernels_matmul_paths.py

Tolerances: torch's defaults for the output dtype. The reference is the float64 product of
the same (rounded) inputs, rounded once to the dtype, as a fused epilogue rounds; inputs are
scaled by ``1/sqrt(K)`` so outputs are O(1) and float32 accumulation in another order stays
far inside them (see ``test_kernels_matmul.py``).
"""

from __future__ import annotations

import math

import pytest
import torch

pytestmark = pytest.mark.cuda
pytest.importorskip("triton")

from kernel_arrays import DEV, INTERPRET, dev, host  # noqa: E402

from genesis_cuda.kernels import _launch, matmul_small, matmul_tuning  # noqa: E402
from genesis_cuda.kernels import matmul as mm  # noqa: E402

HALF_AND_FLOAT = [torch.float32, torch.float16, torch.bfloat16]


def _rand(shape, dtype, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype).to(DEV)


def _ref_linear(x, w, b):
    out = torch.nn.functional.linear(x.double(), w.double(), None if b is None else b.double())
    return out.to(x.dtype)


def _linear(x, w, b):
    return host(mm.linear(dev(x), dev(w), None if b is None else dev(b)))


def _matmul(a, b):
    return host(mm.matmul(dev(a), dev(b)))


@pytest.fixture
def launched(monkeypatch):
    """``(kernel name, grid)`` of each launch by the plans made in the test (fresh plans)."""
    names = []
    launch = _launch.Site.launch
    matmul_kernels = {"_small_m_kernel", "_mm_kernel", "_mm_tma_kernel", "_tile_reduce_kernel",
                      "_mm_tma_batched_kernel", "_mm_tma_splitk_kernel",
                      "_mm_tma_persistent_kernel"}

    def recording(site, variant, device, g0, g1, args, objs=None, tail=()):
        name = site.launcher.fn.__name__
        if name in matmul_kernels:  # (not the elementwise launches of a plan's set-up)
            names.append((name, (g0, g1, 1)))
        launch(site, variant, device, g0, g1, args, objs, tail)

    monkeypatch.setattr(_launch.Site, "launch", recording)
    monkeypatch.setattr(mm, "_plans", {})
    return names


@pytest.mark.parametrize("dtype", HALF_AND_FLOAT, ids=str)
@pytest.mark.parametrize("M", [1, 3, 40])
@pytest.mark.parametrize("with_bias", [False, True])
def test_small_m_linear(launched, dtype, M, with_bias):
    # (N, K): odd sizes, a K tail after whole tiles, enough K to split into chunks (M = 1
    # splits only K-chunks of four 256-wide tiles or more: K = 2304), a K that takes a halved
    # BLOCK_K
    for i, (N, K) in enumerate([(5, 7), (33, 300), (130, 520), (64, 1100), (40, 384),
                                (24, 2304)]):
        x = _rand((M, K), dtype, 10 * i + M, 1 / math.sqrt(K))
        w = _rand((N, K), dtype, 10 * i + 1)
        b = _rand((N,), dtype, 10 * i + 2) if with_bias else None
        torch.testing.assert_close(_linear(x, w, b), _ref_linear(x, w, b))
    # one launch per product, split-K included (its last chunk per n-block reduces)
    assert {name for name, _ in launched} == {"_small_m_kernel"}
    assert len(launched) == 6 and any(grid[1] > 1 for _, grid in launched)


@pytest.mark.parametrize("M", [1, 3])
def test_small_m_unsplit(monkeypatch, launched, M):
    # waves = 0 turns split-K off: each program walks its whole K (several tiles)
    for bm, entry in list(matmul_small.SMALL_M_TILES.items()):
        monkeypatch.setitem(matmul_small.SMALL_M_TILES, bm, entry[:5] + (0,))
    for dtype in (torch.float32, torch.bfloat16):
        x = _rand((M, 1100), dtype, M, 1 / math.sqrt(1100))
        w = _rand((70, 1100), dtype, 2)
        b = _rand((70,), dtype, 3)
        torch.testing.assert_close(_linear(x, w, b), _ref_linear(x, w, b))
    assert {name for name, _ in launched} == {"_small_m_kernel"}
    assert all(grid[1] == 1 for _, grid in launched)


def test_small_m_splits_k():
    # The shapes above do split on a 4-SM interpreter device and on a 132-SM GPU alike.
    from genesis_cuda.kernels._launch import sm_count
    from genesis_cuda.kernels.matmul_tuning import split_k

    even = matmul_small._even_block_k
    assert (even(896, 256), even(4864, 256), even(96, 256), even(300, 256)) == (128, 256, 32, 256)
    sms = sm_count(0)
    for bm, (N, K) in ((1, (24, 2304)), (16, (130, 520))):
        bn, bk, _, _, min_tiles, waves = matmul_small.SMALL_M_TILES[bm]
        bk = matmul_small._even_block_k(K, bk)
        target = waves * sms
        split, per = split_k(-(-N // bn), -(-K // bk), min_tiles, target)
        assert split > 1 and (split - 1) * per * bk < K <= split * per * bk


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_small_m_layouts(dtype):
    K, N = 200, 72
    # leading dims folded into M (decode: batch x 1 token), bias
    x = _rand((4, 1, K), dtype, 1, 1 / math.sqrt(K))
    w = _rand((N, K), dtype, 2)
    b = _rand((N,), dtype, 3)
    torch.testing.assert_close(_linear(x, w, b), _ref_linear(x, w, b))
    # matmul with b row-major (K, N), a column-major, a strided row view
    a = _rand((K, 8), dtype, 4, 1 / math.sqrt(K)).T
    bb = _rand((K, N), dtype, 5)
    torch.testing.assert_close(_matmul(a, bb), (a.double() @ bb.double()).to(dtype))
    a2 = _rand((16, K), dtype, 6, 1 / math.sqrt(K))[::2]
    torch.testing.assert_close(_matmul(a2, bb), (a2.double() @ bb.double()).to(dtype))
    # weight as a strided view (every other column)
    w2 = _rand((N, 2 * K), dtype, 7)[:, ::2]
    torch.testing.assert_close(_linear(x, w2, None), _ref_linear(x, w2, None))


def test_small_m_deterministic():
    # the same bits again, from the same plan: its chunk counters are back at zero
    x = _rand((5, 1100), torch.bfloat16, 1, 1 / math.sqrt(1100))
    w = _rand((64, 1100), torch.bfloat16, 2)
    first = _linear(x, w, None)
    for _ in range(2):
        assert torch.equal(_linear(x, w, None), first)


def test_small_m_counters_never_shared(monkeypatch):
    """Each split plan gets chunk counters of its own from slabs that are never freed (a
    captured graph may outlive the plan); products still right across a slab change."""
    monkeypatch.setattr(matmul_small, "_COUNTER_SLAB", 4)
    monkeypatch.setattr(matmul_small, "_slabs", {})
    monkeypatch.setattr(mm, "_plans", {})
    device = dev(torch.zeros(1)).device
    spans = [(p.data_ptr(), p.data_ptr() + 12) for p in
             (matmul_small._counters(device, 3) for _ in range(3))]
    assert all(e1 <= s2 or e2 <= s1 for i, (s1, e1) in enumerate(spans)
               for (s2, e2) in spans[i + 1:])
    assert len(matmul_small._slabs[device][2]) == 3
    for i, N in enumerate((70, 130, 40)):  # 3, 5 and 2 n-blocks of 32
        x = _rand((1, 1100), torch.bfloat16, i, 1 / math.sqrt(1100))
        w = _rand((N, 1100), torch.bfloat16, 10 + i)
        torch.testing.assert_close(_linear(x, w, None), _ref_linear(x, w, None))
    # a new slab is never taken during a CUDA graph capture (it would be the graph's memory)
    from genesis_cuda import capture

    monkeypatch.setitem(capture._capturing, 0, object())
    with pytest.raises(capture.GraphCaptureError, match="split-K counters"):
        matmul_small._counters(device, 5)


# ------------------------------------------------------- SwiGLU folded into the small-M path
def _gate_up(M, K, dtype, seed, lead=()):
    """A gated MLP's (M, 2K) gate|up output, gate and up of order 1."""
    return _rand((*lead, M, 2 * K), dtype, seed)


def _ref_swiglu_linear(gate_up, w, b):
    """The swiglu kernel on the two halves (read in place), then the float64 product of its
    rounded output, rounded once. (The swiglu kernel, not torch: the Triton interpreter
    truncates float32 to bfloat16 where the GPU rounds to nearest, and the fused kernel
    must match swiglu's rounding, whichever it is.)"""
    K = gate_up.shape[-1] // 2
    return _ref_linear(_swiglu(gate_up, K), w, b)


def _swiglu(gate_up, K):
    from genesis_cuda.kernels import swiglu as sw

    return host(sw.swiglu(dev(gate_up[..., :K]), dev(gate_up[..., K:])))


def _swiglu_linear(gate_up, w, b):
    return host(mm.swiglu_linear(dev(gate_up), dev(w), None if b is None else dev(b)))


@pytest.mark.parametrize("dtype", HALF_AND_FLOAT, ids=str)
@pytest.mark.parametrize("M", [1, 3, 16, 40])
@pytest.mark.parametrize("with_bias", [False, True])
def test_small_m_swiglu_linear(launched, dtype, M, with_bias):
    # (N, K): odd sizes, a K tail after whole tiles, K split into chunks (M = 1: K = 2304),
    # a halved BLOCK_K
    for i, (N, K) in enumerate([(5, 7), (33, 300), (64, 1100), (40, 384), (24, 2304)]):
        x = _gate_up(M, K, dtype, 10 * i + M)
        w = _rand((N, K), dtype, 10 * i + 1, 1 / math.sqrt(K))
        b = _rand((N,), dtype, 10 * i + 2) if with_bias else None
        torch.testing.assert_close(_swiglu_linear(x, w, b), _ref_swiglu_linear(x, w, b))
    # one launch per product, the SwiGLU included; split-K reduced in the same launch
    assert {name for name, _ in launched} == {"_small_m_kernel"}
    assert len(launched) == 5 and any(grid[1] > 1 for _, grid in launched)


@pytest.mark.parametrize("M", [1, 3])
def test_small_m_swiglu_linear_unsplit(monkeypatch, launched, M):
    for bm, entry in list(matmul_small.SMALL_M_TILES.items()):
        monkeypatch.setitem(matmul_small.SMALL_M_TILES, bm, entry[:5] + (0,))
    for dtype in (torch.float32, torch.bfloat16):
        x = _gate_up(M, 1100, dtype, M)
        w = _rand((70, 1100), dtype, 2, 1 / math.sqrt(1100))
        b = _rand((70,), dtype, 3)
        torch.testing.assert_close(_swiglu_linear(x, w, b), _ref_swiglu_linear(x, w, b))
    assert {name for name, _ in launched} == {"_small_m_kernel"}
    assert all(grid[1] == 1 for _, grid in launched)


def test_small_m_swiglu_linear_layouts():
    dt, K, N = torch.bfloat16, 200, 72
    w = _rand((N, K), dt, 1, 1 / math.sqrt(K))
    # leading dims folded into M (decode: batch x 1 token)
    x = _gate_up(1, K, dt, 2, lead=(4,))
    torch.testing.assert_close(_swiglu_linear(x, w, None), _ref_swiglu_linear(x, w, None))
    # rows of a wider buffer (row stride 2K + 24) and every other row
    wide = _rand((6, 2 * K + 24), dt, 3)
    for x in (wide[:, :2 * K], wide[::2, 5:5 + 2 * K]):
        torch.testing.assert_close(_swiglu_linear(x, w, None), _ref_swiglu_linear(x, w, None))
    # gate|up with a column stride (every other column), the weight a strided view
    x = _rand((3, 4 * K), dt, 4)[:, ::2]
    w2 = _rand((N, 2 * K), dt, 5, 1 / math.sqrt(K))[:, ::2]
    torch.testing.assert_close(_swiglu_linear(x, w2, None), _ref_swiglu_linear(x, w2, None))


def test_small_m_swiglu_linear_matches_swiglu_then_linear():
    """bf16, M = 1 and 5: the same bits as the swiglu kernel followed by the plain product
    (the gated kernel rounds the SwiGLU product as swiglu does, then runs the same tiles)."""
    K, N = 520, 96
    w = _rand((N, K), torch.bfloat16, 1, 1 / math.sqrt(K))
    for M in (1, 5):
        x = _gate_up(M, K, torch.bfloat16, 2 + M)
        plain = _linear(_swiglu(x, K), w, None)
        assert torch.equal(_swiglu_linear(x, w, None), plain)


@pytest.fixture
def gpu_132(monkeypatch):
    """Plans made afresh for a 132-SM device (an H100/H200), whatever runs the kernels."""
    monkeypatch.setattr(mm, "sm_count", lambda device: 132)
    monkeypatch.setattr(mm, "_plans", {})


@pytest.mark.parametrize("timed", [False, True])
def test_training_layouts_split_k(monkeypatch, gpu_132, launched, timed):
    """The three products of a linear layer, bf16, each with K = 1024 and output tiles too
    few for the SMs: split-K on the TMA kernel, by the rule for problems too small to time
    and from the timed candidates (here the first split-K one is picked)."""
    seen = []

    def choose(key, candidates, launch, flops):
        seen.append([c for c in candidates if c[0] == "s"])
        return seen[-1][0]

    if timed:
        monkeypatch.setattr(mm, "_TUNE_MIN_FLOPS", 0)
        monkeypatch.setattr(matmul_tuning, "choose", choose)
    dt = torch.bfloat16
    # forward x @ W.T: x (256, 1024), W (136, 1024) -- B transposed
    x = _rand((256, 1024), dt, 1, 1 / 32)
    w = _rand((136, 1024), dt, 2)
    b = _rand((136,), dt, 3)
    torch.testing.assert_close(_linear(x, w, b), _ref_linear(x, w, b))
    # input gradient g @ W: g (256, 1024), W (1024, 136) -- both plain
    g = _rand((256, 1024), dt, 4, 1 / 32)
    w2 = _rand((1024, 136), dt, 5)
    torch.testing.assert_close(_matmul(g, w2), (g.double() @ w2.double()).to(dt))
    # weight gradient g.T @ x: g (1024 tokens, 128), x (1024, 136) -- A transposed
    g3 = _rand((1024, 128), dt, 6, 1 / 32)
    x3 = _rand((1024, 136), dt, 7)
    torch.testing.assert_close(_matmul(g3.T, x3), (g3.T.double() @ x3.double()).to(dt))
    if timed:
        assert len(seen) == 3 and all(seen)
    assert [name for name, _ in launched] == ["_mm_tma_splitk_kernel",
                                              "_tile_reduce_kernel"] * 3
    for M, N in ((256, 136), (128, 136)):  # the rule splits these too
        assert mm.small_config("half", M, N, 1024, 132)[0] == "s"


@pytest.mark.parametrize("with_bias", [False, True])
def test_split_k_after_whole_waves(monkeypatch, launched, with_bias):
    """Tiles that fill whole waves run unsplit, the tiles left over are split in K: on 4 SMs,
    5 output tiles of 64x64 are 4 whole tiles and one tile in 4 K-chunks. The three layouts
    of a linear layer, bias added by the whole tiles' epilogue and by the reduction."""
    monkeypatch.setattr(mm, "sm_count", lambda device: 4)
    monkeypatch.setattr(mm, "_TUNE_MIN_FLOPS", 0)
    cfg = ("s", 1, 64, 64, 64, 8, 2, 4)
    monkeypatch.setattr(matmul_tuning, "choose", lambda key, cands, launch, flops: cfg)
    assert mm.splitk_plan(320, 64, 1024, 4, 1, cfg[2:]) == (4, 1, 4, 4)
    dt, K = torch.bfloat16, 1024
    x = _rand((320, 1024), dt, 1, K ** -0.5)
    w = _rand((64, 1024), dt, 2)
    b = _rand((64,), dt, 3) if with_bias else None
    torch.testing.assert_close(_linear(x, w, b), _ref_linear(x, w, b))
    g = _rand((1024, 320), dt, 4, K ** -0.5)  # g.T @ x: A transposed, (320, 64) over K=1024
    x2 = _rand((1024, 64), dt, 5)
    torch.testing.assert_close(_matmul(g.T, x2), (g.T.double() @ x2.double()).to(dt))
    w3 = _rand((1024, 64), dt, 6)  # g @ W: (320, 1024) @ (1024, 64), both plain
    torch.testing.assert_close(_matmul(x, w3), (x.double() @ w3.double()).to(dt))
    assert launched == [("_mm_tma_splitk_kernel", (4 + 1 * 4, 1, 1)),
                        ("_tile_reduce_kernel", (1, 64 // 16, 1))] * 3


def test_split_candidates_for_weight_gradients():
    """Split-K candidates of Qwen2.5-0.5B's weight gradients on 132 SMs: whole waves of tiles
    stay unsplit, the split programs fill at most their waves, partials stay bounded."""
    from genesis_cuda.kernels import matmul_tuning as mt

    for M, N in ((896, 896), (128, 896), (4864, 896), (896, 4864)):
        for K in (8192, 16384):
            cands = mt.splitk_candidates(M, N, K, 132)
            assert cands, (M, N, K)
            for cand in cands:
                whole, rest, split, per = mt.splitk_plan(M, N, K, 132, cand[1], cand[2:])
                bm, bn, bk = cand[2:5]
                assert whole % 132 == 0 and whole + rest == -(-M // bm) * -(-N // bn)
                assert 1 < split and rest * split <= cand[1] * 132
                assert (split - 1) * per < -(-K // bk) <= split * per  # no empty chunk
                assert per >= mt.SPLITK_MIN_TILES
                assert rest * split * bm * bn * 4 <= mt.SPLITK_MAX_BYTES
    # gate_proj over 8k tokens: 133 tiles of 256x128 -> 132 whole, one in 32 chunks of 4
    assert mt.splitk_plan(4864, 896, 8192, 132, 1, (256, 128, 64)) == (132, 1, 32, 4)
    # tiles that fill whole waves exactly are never split (132 of 128x128 here)
    assert all(c[2:4] != (128, 128) for c in mt.splitk_candidates(128 * 132, 128, 8192, 132))


def test_rule_fills_the_sms():
    # Problems too small to time: the largest tile that gives each SM a program, else split-K
    sc = mm.small_config
    assert sc("half", 8192, 896, 128, 132)[:2] == (128, 128)  # 448 tiles
    assert sc("half", 8192, 128, 896, 132)[:2] == (64, 128)  # k_proj forward, 8k tokens
    wgrad = sc("half", 128, 896, 8192, 132)  # k_proj weight gradient: 7 tiles over 8k tokens
    assert wgrad[0] == "s" and mm.splitk_plan(128, 896, 8192, 132, 1, wgrad[2:]) == (0, 7, 16, 8)
    assert sc("half", 128, 128, 256, 132) == (128, 128, 64, 8, 3, 4)  # nothing fills, K short


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_broadcast_batch_folds_into_rows(launched, dtype):
    B, T, N, K = 3, 50, 40, 24
    g = _rand((B, T, N), dtype, 1, 1 / math.sqrt(N))
    w = _rand((N, K), dtype, 2)
    expect = (g.double() @ w.double()).to(dtype)
    torch.testing.assert_close(_matmul(g, w.expand(B, N, K)), expect)
    (name, grid), = launched
    assert name == "_mm_kernel" and grid[1] == 1  # one matrix of B*T rows, no batch axis
    # rows not evenly spaced across the batch (a sliced batch): the batched kernel
    gs = _rand((B, T + 2, N), dtype, 3, 1 / math.sqrt(N))[:, :T]
    torch.testing.assert_close(_matmul(gs, w.expand(B, N, K)),
                               (gs.double() @ w.double()).to(dtype))


# ------------------------------------------------------------------ the device at real sizes
def _rand_cuda(shape, dtype, seed, scale=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, generator=g, device="cuda") * scale).to(dtype)


@pytest.mark.skipif(INTERPRET, reason="real sizes: on the GPU")
@pytest.mark.parametrize("M", [1, 8, 32])
@pytest.mark.parametrize("fin,fout", [(896, 896), (896, 128), (4864, 896), (896, 4864),
                                      (896, 151936)], ids=str)
def test_decode_shapes(M, fin, fout):
    """Qwen2.5-0.5B's linear layers at decode sizes (split over all SMs), bf16 with bias."""
    dt = torch.bfloat16
    x = _rand_cuda((M, fin), dt, M, fin ** -0.5)
    w = _rand_cuda((fout, fin), dt, 1)
    b = _rand_cuda((fout,), dt, 2)
    got = _linear(x, w, b)
    torch.testing.assert_close(got, _ref_linear(x, w, b))
    assert torch.equal(got, _linear(x, w, b))  # the split-K sums are added in a fixed order


@pytest.mark.skipif(INTERPRET, reason="real sizes: on the GPU")
@pytest.mark.parametrize("fin,fout", [(896, 896), (896, 128)], ids=str)
def test_weight_gradient_8k_tokens(fin, fout):
    """grad.T @ x over 8192 tokens, bf16: 896 x 896 is timed among candidates that include
    split-K ones, and so is 128 x 896 (1.9 GFLOP, over the 1 GFLOP timing threshold)."""
    dt = torch.bfloat16
    g = _rand_cuda((8192, fout), dt, 1, 8192 ** -0.5)
    x = _rand_cuda((8192, fin), dt, 2)
    got = _matmul(g.T, x)
    # Outputs are of order 1 (8192 products of 1/90-scaled normals): float32 accumulation of
    # 8192 terms is off by up to ~1e-5 absolute, which bf16's default atol (1e-5) does not
    # allow on the few outputs near zero (one of 802,816 failed on an H100 with 1.05e-5).
    torch.testing.assert_close(got, (g.T.double() @ x.double()).to(dt), atol=1e-4,
                               rtol=1.6e-2)
    assert torch.equal(got, _matmul(g.T, x))


@pytest.mark.skipif(INTERPRET, reason="real sizes: on the GPU")
@pytest.mark.parametrize("cfg", [("s", 1, 256, 128, 64, 8, 3, 8), ("s", 1, 128, 256, 64, 8, 3, 8),
                                 ("s", 1, 128, 128, 64, 8, 4, 8)], ids=str)
def test_weight_gradient_whole_waves_and_split_rest(monkeypatch, cfg):
    """gate_proj's weight gradient over 8k tokens (4864 x 896) with each split-K tile forced:
    whole waves of tiles unsplit, the rest split (1 tile of 256x128 in 32 chunks; 20 of
    128x256; 2 of 128x128), against float64 (atol as in test_weight_gradient_8k_tokens), the
    same bits twice."""
    from genesis_cuda.kernels._launch import sm_count

    monkeypatch.setattr(matmul_tuning, "choose", lambda key, cands, launch, flops: cfg)
    monkeypatch.setattr(mm, "_plans", {})
    whole, rest, split, _ = mm.splitk_plan(4864, 896, 8192, sm_count(0), 1, cfg[2:])
    assert whole > 0 and rest > 0 and split > 1  # both kinds of program (132 SMs)
    dt = torch.bfloat16
    g = _rand_cuda((8192, 4864), dt, 1, 8192 ** -0.5)
    x = _rand_cuda((8192, 896), dt, 2)
    got = _matmul(g.T, x)
    torch.testing.assert_close(got, (g.T.double() @ x.double()).to(dt), atol=1e-4, rtol=1.6e-2)
    assert torch.equal(got, _matmul(g.T, x))


@pytest.mark.skipif(INTERPRET, reason="genesis CUDA tensors need the GPU")
def test_linear_autograd_3d_matches_torch():
    """nn.functional.linear forward and backward on (B, T, C) bf16 inputs: the input gradient
    takes the folded product, the weight gradient a split-K one."""
    import genesis
    import genesis.nn.functional as GF

    dt = torch.bfloat16
    x = _rand_cuda((2, 512, 896), dt, 1, 896 ** -0.5)
    w = _rand_cuda((128, 896), dt, 2)
    b = _rand_cuda((128,), dt, 3)
    gy = _rand_cuda((2, 512, 128), dt, 4, 1024 ** -0.5)
    gx_, gw_, gb_ = (genesis.from_dlpack(t.clone()).requires_grad_() for t in (x, w, b))
    out = GF.linear(gx_, gw_, gb_)
    out.backward(genesis.from_dlpack(gy.clone()))
    xd, wd, bd = (t.double().requires_grad_() for t in (x, w, b))
    ref = torch.nn.functional.linear(xd, wd, bd)
    ref.backward(gy.double())
    genesis.cuda.synchronize()
    for got, want in ((out, ref), (gx_.grad, xd.grad), (gw_.grad, wd.grad), (gb_.grad, bd.grad)):
        torch.testing.assert_close(torch.from_dlpack(got.detach()), want.to(dt))


@pytest.mark.skipif(INTERPRET, reason="CUDA graphs need the GPU")
def test_decode_linear_replays_in_a_cuda_graph():
    """A decode-sized linear with split-K (its float32 workspace taken from the graph's pool)
    captured once and replayed on new inputs gives the eager result, bit for bit."""
    import genesis
    import genesis.nn.functional as GF

    dt = torch.bfloat16
    x = genesis.from_dlpack(_rand_cuda((4, 1, 4864), dt, 1, 4864 ** -0.5))
    w = genesis.from_dlpack(_rand_cuda((896, 4864), dt, 2))
    b = genesis.from_dlpack(_rand_cuda((896,), dt, 3))
    GF.linear(x, w, b)  # warm-up: compiles the kernels
    graph = genesis.cuda.CUDAGraph()
    with genesis.cuda.graph(graph):
        static = GF.linear(x, w, b)
    for seed in range(3):
        new = genesis.from_dlpack(_rand_cuda((4, 1, 4864), dt, 10 + seed, 4864 ** -0.5))
        x.copy_(new)
        graph.replay()
        genesis.cuda.synchronize()
        assert torch.equal(torch.from_dlpack(static), torch.from_dlpack(GF.linear(new, w, b)))


@pytest.mark.gpu_timing
@pytest.mark.skipif(INTERPRET, reason="GPU timing")
@pytest.mark.parametrize("spin_ns", [2_000_000, 100_000])
def test_tuner_times_the_gpu_not_the_host(monkeypatch, spin_ns):
    """The autotuner's clock: a 50 us kernel measures ~50 us a call, and a launch whose host
    side takes 200 us longer than its GPU side still measures its GPU time, also where the
    first spin (100 us) runs out before the host has queued the calls (it is timed again
    behind a longer one)."""
    import time

    from genesis_cuda.kernels import matmul_tuning as mt

    monkeypatch.setattr(mt, "_SPIN_NS", spin_ns)

    def gpu_only():
        mt._spin((1,), 50_000)

    def slow_host():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 2e-4:
            pass
        gpu_only()

    gpu_only()
    for launch in (gpu_only, slow_host):
        t = mt._seconds_per_call(launch, 5)
        assert 45e-6 < t < 80e-6, (launch.__name__, t)
