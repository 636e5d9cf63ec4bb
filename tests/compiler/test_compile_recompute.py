"""genesis.compile's save-vs-recompute choice (``genesis.compiler.recompute``) on the CPU.

Each case runs a training step eagerly and compiled (traced, then replayed twice) and checks
values and gradients against eager, with recomputation on; and that the forward keeps fewer
bytes for backward than with ``options={"recompute": False}`` (which keeps what eager
autograd keeps).
"""

from __future__ import annotations

import genesis
import genesis.nn as nn
import genesis.nn.functional as F
from genesis.compiler.recompute import value_bytes
from genesis.testing import assert_close


class SwiGLU(nn.Module):
    def __init__(self, d: int = 16):
        super().__init__()
        self.gate = nn.Linear(d, 4 * d, bias=False)
        self.up = nn.Linear(d, 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def rms(x, w):  # RMSNorm written out, in float32 as the usual recipe
    h = x.float()
    return (h * genesis.rsqrt((h * h).mean(-1, keepdim=True) + 1e-6) * w).to(x.dtype)


def rope(x, cos, sin):  # (B, H, S, D)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + genesis.cat([-x2, x1], dim=-1) * sin


class RopeScores(nn.Module):
    def __init__(self, d: int = 16, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)

    def forward(self, x, cos, sin):  # (B, S, d)
        b, s, d = x.shape
        q, k = (p(x).view(b, s, self.heads, -1).transpose(1, 2) for p in (self.q, self.k))
        return (rope(q, cos, sin) * rope(k, cos, sin)).sum(-1)  # (B, H, S)


class Norm(nn.Module):
    def __init__(self, d: int = 16):
        super().__init__()
        self.w = nn.Parameter(genesis.rand(d) + 0.5)

    def forward(self, x):
        return rms(x, self.w)


class Decoder(nn.Module):
    """A decoder layer written the plain torch way (as tools/bench/compile_step.py's)."""

    def __init__(self, d: int = 32, heads: int = 4, p: float = 0.0):
        super().__init__()
        self.heads, self.p = heads, p
        self.norm1 = nn.Parameter(genesis.ones(d))
        self.norm2 = nn.Parameter(genesis.ones(d))
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.gate = nn.Linear(d, 4 * d, bias=False)
        self.up = nn.Linear(d, 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)

    def forward(self, x, cos, sin):  # (B, S, d)
        b, s, d = x.shape
        h = rms(x, self.norm1)
        q, k, v = (p(h).view(b, s, self.heads, -1).transpose(1, 2)
                   for p in (self.q, self.k, self.v))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + F.dropout(self.o(a.transpose(1, 2).reshape(b, s, d)), self.p, self.training)
        h = rms(x, self.norm2)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def step(model, run, args, autocast: bool, seed: int = 0):
    """Output and gradients (inputs' then parameters') of one step ``run(*args)``."""
    model.zero_grad()
    for a in args:
        a.grad = None
    genesis.manual_seed(seed)
    with genesis.autocast("cpu", dtype=genesis.bfloat16, enabled=autocast):
        out = run(*args)
        loss = out.float().pow(2).mean()
    loss.backward()
    grads = [a.grad.clone() for a in args if a.requires_grad]
    return out.detach().clone(), grads + [p.grad.clone() for p in model.parameters()]


def check_against_eager(model, args, autocast: bool = False, **options):
    """Compiled steps (the trace, then replays) equal eager's; returns the compiled callable."""
    compiled = genesis.compile(model, options=options or None)
    for seed in range(3):
        want = step(model, model, args, autocast, seed)
        got = step(model, compiled, args, autocast, seed)
        assert_close(got, want)
    (entry,) = compiled._entries.values()
    assert entry.plan is not None  # the compiled backward ran, not eager autograd
    return compiled


def saved(model, args, autocast: bool, recompute: bool):
    compiled = genesis.compile(model, options={"recompute": recompute})
    step(model, compiled, args, autocast)
    (report,) = compiled.saved_bytes()
    fwd, bwd = compiled.graphs()
    kept = fwd.outputs[1:]  # (after the one result)
    assert report.after == sum(value_bytes(v) for v in kept)
    assert report.after <= report.before
    return report, bwd


def rope_inputs(b=2, s=6, d=16, heads=2):
    x = genesis.randn(b, s, d, requires_grad=True)
    return x, genesis.randn(s, d // heads), genesis.randn(s, d // heads)


def test_swiglu_matches_eager_and_keeps_only_the_two_projections():
    genesis.manual_seed(0)
    model, x = SwiGLU(), genesis.randn(3, 5, 16, requires_grad=True)
    check_against_eager(model, (x,))
    on, bwd = saved(model, (x,), False, True)
    off, _ = saved(model, (x,), False, False)
    assert off.after == off.before and off.recomputed == 0
    assert on.after < off.after
    # gate(x) and up(x) are kept; sigmoid, silu and their product are recomputed
    assert on.tensors_after == 2 and on.after == 2 * 3 * 5 * 64 * 4
    assert {"sigmoid", "mul"} <= {node.op for node in bwd.nodes}


def test_swiglu_under_autocast_matches_eager():
    genesis.manual_seed(1)
    model, x = SwiGLU(), genesis.randn(3, 5, 16, requires_grad=True)
    check_against_eager(model, (x,), autocast=True)
    on, _ = saved(model, (x,), True, True)
    off, _ = saved(model, (x,), True, False)
    assert on.after < off.after  # (the weights' bf16 copies are made again from the weights)


def test_rope_with_cat_matches_eager_and_keeps_less():
    genesis.manual_seed(2)
    model, args = RopeScores(), rope_inputs()
    for autocast in (False, True):
        check_against_eager(model, args, autocast=autocast)
    on, _ = saved(model, args, True, True)
    off, _ = saved(model, args, True, False)
    assert on.after < off.after


def test_rmsnorm_written_out_matches_eager():
    genesis.manual_seed(3)
    model, x = Norm(), genesis.randn(4, 6, 16, requires_grad=True)
    check_against_eager(model, (x,))
    on, _ = saved(model, (x,), False, True)
    assert on.after < on.before  # x * rstd is made again from x and the small rstd


def test_decoder_layer_matches_eager():
    genesis.manual_seed(4)
    model, args = Decoder(), rope_inputs(d=32, heads=4)
    for autocast in (False, True):
        check_against_eager(model, args, autocast=autocast)
    # every gradient formula one whole node: recomputed Values reach into their saved tuples
    check_against_eager(model, args, autocast=True, backward="nodes")
    on, _ = saved(model, args, True, True)
    off, _ = saved(model, args, True, False)
    assert on.after < off.after


def test_dropout_mask_is_drawn_once_and_gradients_match_eager():
    genesis.manual_seed(5)
    model, args = Decoder(p=0.3), rope_inputs(d=32, heads=4)
    compiled = check_against_eager(model, args)
    fwd, bwd = compiled.graphs()
    assert "rand" in {node.op for node in fwd.nodes}
    assert not {node.op for node in bwd.nodes} & {"rand", "bernoulli", "randn"}


def test_random_and_in_place_ops_are_never_recomputed():
    w = genesis.randn(4, 8, requires_grad=True)

    def f(x):
        noise = genesis.rand(4, 8)                # random: drawn by the forward only
        h = (x * 2).sigmoid() * (noise + 1.0)
        y = (x + 1.0).tanh()                      # reads x, which the line below writes
        x.mul_(0.5)                               # in place, on an input
        return (h * w).sum() + (y * w).sum()

    x0 = genesis.randn(4, 8)
    genesis.manual_seed(6)
    x = x0.clone()
    f(x).backward()
    want = w.grad.clone()
    compiled = genesis.compile(f)
    for seed in (6, 6, 6):  # the trace, then replays drawing the same noise
        genesis.manual_seed(seed)
        w.grad = None
        x = x0.clone()
        compiled(x).backward()
        assert_close(w.grad, want)
        assert_close(x, x0 * 0.5)
    fwd, bwd = compiled.graphs()
    ops = {node.op for node in bwd.nodes}
    assert "rand" not in ops and not any(op.endswith("_") for op in ops)
    # tanh(x + 1) read x before the write: it is kept, not made again from the written x
    assert "tanh" not in ops


def test_saved_bytes_are_reported_in_the_printout_and_the_debug_output(monkeypatch, capsys):
    monkeypatch.setenv("GENESIS_COMPILE_DEBUG", "1")
    f = genesis.compile(lambda x: (x.sigmoid() * x).sum())  # sigmoid(x): 64 floats
    f(genesis.randn(64, requires_grad=True)).backward()
    line = "saved for backward: 1 tensors, 256 B -> 0 tensors, 0 B (1 ops recomputed)"
    assert str(f.saved_bytes()[0]) == line
    assert line in capsys.readouterr().err
    assert str(f.graphs()[0]).endswith(f"# {line}")
