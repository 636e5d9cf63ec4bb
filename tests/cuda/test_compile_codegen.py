"""genesis-cuda's compiler: generated Triton kernels against eager genesis.

Each case records a small genesis function into a graph (``graph_recorder``), compiles it
with ``genesis_cuda.compiler.runner.CompiledGraph`` and compares the compiled run with the
eager one at the result dtype's tolerance (fused kernels keep intermediates in float32,
eager rounds each op to its dtype: at most a few ulps of a bfloat16 result apart).

Runs on a GPU (CUDA tensors, ``cuda`` marker) and, without one, under the Triton
interpreter on CPU tensors (``TRITON_INTERPRET=1``; ``test_compile_interpreted.py`` runs this
file that way in CI): the generated kernels then read the CPU backend's torch arrays.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("triton")  # the kernels are Triton code; CI machines may lack it

from graph_recorder import record  # noqa: E402

import genesis  # noqa: E402
import genesis.nn.functional as F  # noqa: E402
from genesis.dispatch import REGISTRY  # noqa: E402
from genesis.testing import assert_close, default_tolerances  # noqa: E402
from genesis_cuda.compiler.partition import Group, partition  # noqa: E402
from genesis_cuda.compiler.runner import CompiledGraph, FusedStep  # noqa: E402
from genesis_cuda.kernels import _launch  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEV = "cpu" if INTERPRET else "cuda"
pytestmark = [] if INTERPRET else [pytest.mark.cuda]
if INTERPRET:  # the interpreter reads the CPU backend's torch tensors as they are
    _launch.interpret_arg = lambda a: a


@pytest.fixture(autouse=True)
def _kernel_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GENESIS_COMPILE_CACHE_DIR", str(tmp_path / "cache"))


def randn(*shape, dtype=genesis.float32, seed=0):
    genesis.manual_seed(seed)
    return genesis.randn(*shape, device=DEV).to(dtype)


HALF = (genesis.float16, genesis.bfloat16)


def compiled_matches_eager(fn, *tensors, options=None, fused=1):
    """Compile ``fn``'s graph, check its outputs against eager and that it has at least
    ``fused`` fused kernels; returns the CompiledGraph.

    Half-precision results are compared with ``fn`` run eagerly in float32 (inputs made
    float32), at the half dtype's tolerance: a fused kernel keeps its intermediates in
    float32, so it is that close to the float32 result, while eager rounds every op."""
    graph, inputs, expected = record(fn, *tensors)
    run = CompiledGraph(graph, options or {}, lambda v: True)
    got = run(inputs)
    assert len(run.kernels) >= fused, [type(s).__name__ for s in run.steps]
    wide = None
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == e.dtype and tuple(g.shape) == tuple(e.shape)
        if e.dtype in HALF:
            if wide is None:
                wide = fn(*(t.float() if t.dtype in HALF else t for t in tensors))
                wide = list(wide) if isinstance(wide, (tuple, list)) else [wide]
            assert_close(g.float(), wide[i].float(), equal_nan=True,
                         **dict(zip(("rtol", "atol"), default_tolerances(e.dtype))))
        else:
            assert_close(g, e, equal_nan=True)
    return run


# ------------------------------------------------------------------ pointwise chains
CHAINS = {
    "mul_add_exp": lambda x, y, w: (x * w + y).exp(),
    "silu_mul": lambda x, y, w: F.silu(x) * y,
    "gelu_tanh": lambda x, y, w: F.gelu(x, approximate="tanh") * w,
    "scalar_left": lambda x, y, w: (1 - x.sigmoid()) * 0.5 - 2 / (y.abs() + 1),
    "where_clamp": lambda x, y, w: genesis.where(x > y, x.clamp(-0.5, 0.5), y * w),
    "compare_cast": lambda x, y, w: (x >= 0).to(x.dtype) * y + (y < w).to(x.dtype),
    "rsqrt_tanh": lambda x, y, w: (x * x + 1).rsqrt() * y.tanh(),
    "max_min": lambda x, y, w: genesis.maximum(x, y) - genesis.minimum(y, w),
}


@pytest.mark.parametrize("dtype", [genesis.float32, genesis.bfloat16], ids=str)
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_pointwise_chain_matches_eager(name, dtype):
    x, y = randn(4, 6, 40, dtype=dtype, seed=1), randn(4, 6, 40, dtype=dtype, seed=2)
    w = randn(40, dtype=dtype, seed=3)  # broadcast along the leading dims
    compiled_matches_eager(CHAINS[name], x, y, w)


@pytest.mark.parametrize("dtype", [genesis.float32, genesis.bfloat16], ids=str)
def test_non_contiguous_and_broadcast_inputs(dtype):
    base = randn(40, 6, 8, dtype=dtype, seed=4)
    xt = base.permute(2, 1, 0)  # (8, 6, 40), strides (1, 8, 48)
    ys = randn(8, 6, 80, dtype=dtype, seed=5)[:, :, ::2]  # a strided slice
    col = randn(8, 1, 1, dtype=dtype, seed=6)  # broadcast over two dims
    compiled_matches_eager(lambda a, b, c: (a * c + b).sigmoid() * a, xt, ys, col)


@pytest.mark.skipif(INTERPRET, reason="the Triton interpreter truncates float32 to bfloat16 "
                    "instead of rounding it to nearest")
def test_casts_round_through_their_dtype():
    x = randn(3, 70, seed=7) * 100
    compiled_matches_eager(lambda a: (a.to(genesis.bfloat16).float() * 3).to(genesis.float16),
                           x)


def test_int_and_bool_operands():
    i = (randn(5, 9, seed=8) * 10).to(genesis.int32)
    x = randn(5, 9, seed=9)
    compiled_matches_eager(lambda a, b: ((a * 2 + 1) % 7).to(genesis.float32) * b
                           + (a > 0).to(genesis.float32), i, x)


def test_rope_slices_and_cat_of_intermediates():
    # the composite RoPE of the issue: x * cos + cat(-x2, x1) * sin, on a permuted input
    q = randn(2, 5, 3, 16, seed=10).permute(0, 2, 1, 3)  # (B, H, S, D)
    cos, sin = randn(5, 16, seed=11), randn(5, 16, seed=12)

    def rope(x, c, s):
        h = x * 1.5  # an intermediate: its slices are never materialised
        x1, x2 = h[..., :8], h[..., 8:]
        return h * c + genesis.cat([-x2, x1], dim=-1) * s

    run = compiled_matches_eager(rope, q, cos, sin)
    assert len(run.kernels) == 1  # one kernel for the whole RoPE


def test_views_of_intermediates():
    x = randn(6, 8, seed=13)
    compiled_matches_eager(
        lambda a: (a.exp().view(2, 3, 8).permute(2, 0, 1) * 2).reshape(8, 6).unsqueeze(0) + 1,
        x)


def test_slice_backward_pads_intermediates_in_the_kernel():
    # the gradient of RoPE's slices: zeros around each piece, summed
    pad = REGISTRY["slice_backward"]
    g1, g2 = randn(2, 3, 4, seed=29), randn(2, 2, 4, seed=30)

    def fn(a, b):
        left = pad(a * 2, (2, 3, 8), (slice(None), slice(None), slice(None, 4)))
        odd = pad(-b, (2, 3, 8), (slice(None), slice(1, None, 1), slice(0, 8, 2)))
        return left + odd

    run = compiled_matches_eager(fn, g1, g2)
    assert len(run.kernels) == 1


# ------------------------------------------------------------------ row reductions
@pytest.mark.parametrize("dtype", [genesis.float32, genesis.bfloat16], ids=str)
def test_rms_norm_pattern_is_one_row_kernel(dtype):
    x, w = randn(3, 7, 96, dtype=dtype, seed=14), randn(96, dtype=dtype, seed=15)

    def rms_norm(a, weight):
        h = a.float()
        h = h * genesis.rsqrt((h * h).mean(-1, keepdim=True) + 1e-6)
        return (h * weight.float()).to(a.dtype)

    run = compiled_matches_eager(rms_norm, x, w)
    assert len(run.kernels) == 1 and run.kernels[0].spec.source.count("tl.sum") == 1


@pytest.mark.parametrize("dtype", [genesis.float32, genesis.bfloat16], ids=str)
def test_softmax_pattern_fuses_two_reductions(dtype):
    x = randn(10, 300, dtype=dtype, seed=16)

    def softmax(a):
        h = a.float()
        e = (h - h.amax(-1, keepdim=True)).exp()
        return (e / e.sum(-1, keepdim=True)).to(a.dtype), h.amax(-1)

    run = compiled_matches_eager(softmax, x)
    assert len(run.kernels) == 1


def test_cat_along_rows_feeding_a_row_reduction():
    a, b = randn(3, 40, seed=31), randn(2, 40, seed=32)

    def fn(x, y):
        h = genesis.cat([x, y], dim=0).exp()  # (5, 40): pieces picked per row
        return h / h.sum(-1, keepdim=True) + h.amax(-1, keepdim=True)

    run = compiled_matches_eager(fn, a, b)
    assert len(run.kernels) == 1


def test_reduction_over_another_dim_is_left_to_eager():
    x = randn(6, 10, seed=17)
    run = compiled_matches_eager(lambda a: (a.exp().sum(0) * 2).sigmoid(), x, fused=0)
    assert all("tl.sum" not in k.spec.source for k in run.kernels)


# ------------------------------------------------------------------ partition
def _steps(fn, *tensors):
    graph, inputs, _ = record(fn, *tensors)
    return graph, partition(graph, lambda v: True)


def test_a_value_read_outside_seals_its_group():
    x, w = randn(4, 8, seed=18), randn(8, 8, seed=19)

    def fn(a, m):
        h = a.exp() * 2  # group 1
        z = h @ m  # reads h: group 1 ends here
        return (z + h).sigmoid() * 3  # group 2: after the matmul

    graph, steps = _steps(fn, x, w)
    kinds = ["group" if isinstance(s, Group) else s.op for s in steps]
    assert kinds == ["group", "matmul", "group"], kinds


def test_in_place_ops_seal_open_groups_and_stay_in_order():
    x = randn(4, 8, seed=20)

    def fn(a):
        h = a * 2
        g = h + 1
        b = a.clone()
        b.add_(1)  # an edit: nothing fused before it may move after it
        return (g * b).exp(), h

    graph, steps = _steps(fn, x)
    ops = [s.op if not isinstance(s, Group) else "group" for s in steps]
    assert ops.index("add_") > ops.index("group")
    compiled_matches_eager(fn, x)


def test_a_view_returned_stays_a_view():
    x = randn(4, 8, seed=21)
    graph, steps = _steps(lambda a: (a * 2 + 1).t(), x)
    assert not isinstance(steps[-1], Group) and steps[-1].op == "permute"


def test_lone_ops_run_eagerly():
    x = randn(4, 8, seed=22)
    graph, steps = _steps(lambda a: a.exp(), x)
    assert [s.op for s in steps] == ["exp"]


# ------------------------------------------------------------------ sources
def test_generated_source_is_saved_and_readable(tmp_path, capsys, monkeypatch):
    x, w = randn(4, 8, seed=23), randn(8, seed=24)
    monkeypatch.setenv("GENESIS_COMPILE_DEBUG", "1")
    run = compiled_matches_eager(lambda a, b: (a * b).exp() + 1, x, w,
                                 options={"debug_dir": str(tmp_path / "dbg")})
    saved = list((tmp_path / "dbg").glob("fused_*.py"))
    assert len(saved) == 1
    text = saved[0].read_text()
    assert text == run.kernels[0].spec.source
    assert "@triton.jit" in text and '"exp"' in text and "= mul(" in text  # nodes listed
    assert "genesis.compile" in capsys.readouterr().err  # GENESIS_COMPILE_DEBUG printed it


def test_debug_dir_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GENESIS_COMPILE_DEBUG_DIR", str(tmp_path / "env"))
    compiled_matches_eager(lambda a: a.exp() * 2, randn(3, 5, seed=25))
    assert list((tmp_path / "env").glob("fused_*.py"))


def test_kernels_are_cached_by_source(tmp_path):
    x = randn(4, 8, seed=26)
    a = compiled_matches_eager(lambda t: t.sigmoid() * 3, x)
    b = compiled_matches_eager(lambda t: t.sigmoid() * 3, x)
    assert a.kernels[0].path == b.kernels[0].path and a.kernels[0].fn is b.kernels[0].fn


def test_other_strides_compile_a_variant():
    x = randn(6, 8, seed=27)
    graph, inputs, _ = record(lambda a: (a * 2).exp(), x)
    run = CompiledGraph(graph, {}, lambda v: True)
    step = next(s for s in run.steps if isinstance(s, FusedStep))
    xt = randn(8, 6, seed=28).t()  # same shape, transposed strides
    assert_close(run([xt])[0], (xt * 2).exp())
    assert len(step.variants) == 2
