"""genesis.compile through genesis-cuda's compile hook: a small model's step equals eager.

On a GPU the model runs on CUDA through ``CUDABackend.compile_graph`` as users get it
(fused kernels replayed as a CUDA graph). Without one, under the Triton interpreter
(``test_compile_interpreted.py``), the same hook's ``CompiledGraph`` is installed as the CPU
backend's hook for the test, so core's real traces — forward and backward graphs — run
through the generated kernels.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("triton")  # the kernels are Triton code; CI machines may lack it

import genesis  # noqa: E402
import genesis.nn as nn  # noqa: E402
import genesis.nn.functional as F  # noqa: E402
from genesis_cuda.compiler.runner import CompiledGraph  # noqa: E402
from genesis_cuda.kernels import _launch  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEV = "cpu" if INTERPRET else "cuda"
pytestmark = [] if INTERPRET else [pytest.mark.cuda]


@pytest.fixture(autouse=True)
def _hook(tmp_path, monkeypatch):
    monkeypatch.setenv("GENESIS_COMPILE_CACHE_DIR", str(tmp_path / "cache"))
    if INTERPRET:  # the generated kernels read the CPU backend's torch tensors
        monkeypatch.setattr(_launch, "interpret_arg", lambda a: a)
        backend = type(genesis.device("cpu").backend)
        monkeypatch.setattr(backend, "compile_graph",
                            lambda self, graph, options: CompiledGraph(graph, options,
                                                                       lambda v: True),
                            raising=False)


class Block(nn.Module):
    """Plain-torch-style decoder pieces: RMSNorm written out, composite RoPE, SiLU * up."""

    def __init__(self, d=16, hidden=32):
        super().__init__()
        self.norm_w = nn.Parameter(genesis.ones(d))
        self.q = nn.Linear(d, d, bias=False)
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x, cos, sin):
        h = x * genesis.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * self.norm_w
        q = self.q(h)
        q1, q2 = q[..., :8], q[..., 8:]
        q = q * cos + genesis.cat([-q2, q1], dim=-1) * sin
        return x + self.down(F.silu(self.gate(q)) * self.up(q))


def _inputs(seed=0):
    genesis.manual_seed(seed)
    x = genesis.randn(2, 5, 16, device=DEV)
    cos, sin = genesis.randn(5, 16, device=DEV), genesis.randn(5, 16, device=DEV)
    return x, cos, sin


def _model():
    genesis.manual_seed(1)
    return Block().to(DEV)


def close(a, b, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(a.detach().float().cpu().numpy(),
                               b.detach().float().cpu().numpy(), rtol=rtol, atol=atol)


def test_compiled_step_matches_eager_values_and_grads():
    model = _model()
    compiled = genesis.compile(model)
    for step in range(3):  # trace, then replays (captured as a CUDA graph on a GPU)
        x, cos, sin = _inputs(step)
        x.requires_grad_(True)
        loss = (model(x, cos, sin) ** 2).mean()
        loss.backward()
        want = [x.grad] + [p.grad for p in model.parameters()]
        x.grad = None
        for p in model.parameters():
            p.grad = None
        got_loss = (compiled(x, cos, sin) ** 2).mean()
        got_loss.backward()
        close(got_loss, loss)
        for g, w in zip([x.grad] + [p.grad for p in model.parameters()], want):
            close(g, w, rtol=1e-4, atol=1e-5)
        for p in model.parameters():
            p.grad = None


def test_compiled_training_loop_matches_eager_losses():
    losses = []
    for use_compile in (False, True):
        model = _model()
        opt = genesis.optim.AdamW(model.parameters(), lr=1e-2)
        run = genesis.compile(model) if use_compile else model
        run_losses = []
        for step in range(4):
            x, cos, sin = _inputs(step)
            loss = (run(x, cos, sin) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            run_losses.append(loss.item())
        losses.append(run_losses)
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-4)


class Stack(nn.Module):
    """Three blocks doing the same work on different weights (a model's layers)."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])

    def forward(self, x, cos, sin):
        for b in self.blocks:
            x = b(x, cos, sin)
        return x


def test_layers_doing_the_same_work_share_their_kernels(monkeypatch):
    """Kernels are numbered per kernel, not per graph, so the groups of every layer are one
    source, loaded and compiled once: a 3-layer model does not compile 3x the kernels."""
    from genesis_cuda.compiler import kernel_cache

    loaded, real = [], kernel_cache.load
    monkeypatch.setattr(kernel_cache, "load",
                        lambda spec, debug=None: loaded.append(real(spec, debug)) or loaded[-1])
    genesis.manual_seed(1)
    model = Stack().to(DEV)
    x, cos, sin = _inputs()
    x.requires_grad_(True)
    (genesis.compile(model)(x, cos, sin) ** 2).mean().backward()
    labels = {k.spec.label for k in loaded}
    functions = {id(k.fn) for k in loaded}
    assert len(labels) == len(loaded)  # every group keeps its own name for the debug dir
    assert len(functions) * 2 < len(loaded), (len(functions), len(loaded))


@pytest.mark.skipif(INTERPRET, reason="Triton compiles kernels only for a GPU")
def test_generated_kernels_are_compiled_before_their_first_launch(monkeypatch):
    """``precompile`` compiles a graph's kernels side by side as the graph is compiled (on
    worker processes, into Triton's cache, or on threads): no generated kernel is compiled
    at its first launch, every one Triton compiles then is a cache hit."""
    from triton import knobs

    from genesis_cuda.compiler import runner

    reports, compiled = [], []

    def spy(jobs):
        reports.append(real(jobs))
        return reports[-1]

    def listener(src, metadata, metadata_group, times, cache_hit):
        if src.fn.module.startswith("genesis_compiled_"):
            compiled.append(cache_hit)

    real = runner.precompile
    monkeypatch.setattr(runner, "precompile", spy)
    monkeypatch.setattr(knobs.compilation, "listener", listener)
    model = _model()
    # (sizes no other test uses: sizes are baked into the kernels, so these are new ones)
    x = genesis.randn(3, 7, 16, device=DEV, requires_grad=True)
    cos, sin = genesis.randn(7, 16, device=DEV), genesis.randn(7, 16, device=DEV)
    (genesis.compile(model)(x, cos, sin) ** 2).mean().backward()
    assert reports and sum(r.kernels for r in reports) > 0
    assert all(not r.errors for r in reports), [r.errors for r in reports]
    assert all(compiled), compiled  # launches found the workers' kernels (or none compiled)


@pytest.mark.skipif(INTERPRET, reason="CUDA graphs and their random state need a GPU")
@pytest.mark.filterwarnings("error")  # a capture that failed (eager fallback) warns
def test_dropout_draws_new_numbers_at_every_replay():
    x = genesis.ones(64, 64, device=DEV)
    drop = genesis.compile(lambda t: F.dropout(t * 2, 0.5, training=True) + 1)
    masks = [(drop(x) == 1).float() for _ in range(4)]  # trace, warm-up, capture, replay
    for a, b in zip(masks, masks[1:]):
        assert (a != b).any().item()
    frac = float(masks[-1].mean().item())
    assert 0.4 < frac < 0.6  # still dropout with p = 0.5


@pytest.mark.skipif(INTERPRET, reason="CUDA graphs need a GPU")
def test_outputs_of_a_replay_are_not_overwritten_by_the_next():
    fn = genesis.compile(lambda t: (t * 2).exp() + 1)
    xs = [genesis.full((8, 8), float(i), device=DEV) for i in range(5)]
    outs = [fn(x) for x in xs]
    for i, (x, y) in enumerate(zip(xs, outs)):
        close(x, genesis.full((8, 8), float(i), device=DEV))  # the caller's input untouched
        close(y, (x * 2).exp() + 1)


@pytest.mark.skipif(INTERPRET, reason="the CUDA backend's own hook needs a GPU")
def test_modes_and_the_debug_dir(tmp_path):
    from genesis_cuda.compiler.cuda_graph import Graphed

    backend = genesis.device("cuda").backend
    x = genesis.randn(4, 8, device=DEV)
    for mode, graphed in ((None, True), ("reduce-overhead", True),
                          ("max-autotune-no-cudagraphs", False)):
        fn = genesis.compile(lambda t: (t * 3).sigmoid() * t, mode=mode,
                             options={"debug_dir": str(tmp_path / str(mode))})
        for _ in range(3):
            close(fn(x), (x * 3).sigmoid() * x)
        assert list((tmp_path / str(mode)).glob("fused_*.py"))
        graph = fn.graphs()[0] if hasattr(fn, "graphs") else None
        if graph is not None:
            run = backend.compile_graph(graph, {"mode": mode})
            assert isinstance(run, Graphed) is graphed
    with pytest.raises(ValueError, match="unknown mode"):
        backend.compile_graph(graph, {"mode": "fastest"})


def test_backward_recomputing_forward_work_runs_through_the_generated_kernels():
    """With recompute on (the default), the backward graph makes SiLU, the RMSNorm product
    and the weights' reads again itself: its new nodes go through the same codegen, and the
    gradients equal those of the backward that reads everything the forward kept."""
    model = _model()
    x, cos, sin = _inputs(0)
    x.requires_grad_(True)
    grads = []
    for recompute in (False, True):
        compiled = genesis.compile(model, options={"recompute": recompute})
        for _ in range(2):  # the trace, then a replay through CompiledGraph
            x.grad = None
            model.zero_grad()
            (compiled(x, cos, sin) ** 2).mean().backward()
        grads.append([x.grad] + [p.grad for p in model.parameters()])
    (report,) = compiled.saved_bytes()
    assert report.recomputed > 0 and report.after < report.before
    bwd_ops = {node.op for node in compiled.graphs()[1].nodes}
    assert "sigmoid" in bwd_ops  # silu(gate) recomputed from gate
    for got, want in zip(*grads):
        close(got, want)
