"""The compiled backward recomputes norms and aliasing autograd nodes (``compiler.recompute``).

A bf16 training step projects each norm's output several times (q/k/v, gate/up): without
recomputation the forward keeps the bf16 copy of the normalised residual stream for the
projections' weight gradients, though the norm's own gradient keeps its input anyway. And
attention's autograd node hands out the kernel's output as it is, so the reshaped copy the
output projection reads can be made again from the kept output. Each case checks what the
forward keeps, and values and gradients against eager (exactly: the backward runs the same
kernels on the same inputs).
"""

from __future__ import annotations

import genesis
import genesis.nn as nn
import genesis.nn.functional as F
from genesis.testing import assert_close


class NormThenProjections(nn.Module):
    def __init__(self, d: int = 32, norm: str = "rms"):
        super().__init__()
        self.norm = nn.RMSNorm(d) if norm == "rms" else nn.LayerNorm(d)
        self.q, self.k = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)

    def forward(self, x):
        h = self.norm(x)
        return (x + self.q(h) * self.k(h)).float().pow(2).mean()


class AttentionThenProjection(nn.Module):
    def __init__(self, heads: int = 2, dim: int = 8):
        super().__init__()
        self.heads, self.dim = heads, dim
        self.qkv = nn.Linear(heads * dim, 3 * heads * dim, bias=False)
        self.out = nn.Linear(heads * dim, heads * dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (t.view(b, s, self.heads, self.dim).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, -1)).float().sum()


def _kept_ops(compiled) -> list[str]:
    """The op that made each tensor the compiled forward keeps for its backward."""
    forward = compiled.graphs()[0]
    made = {}
    for node in forward.nodes:
        for v in (*node.outputs, *(s for s in node.saved if s is not None)):
            made[v.id] = node.op
    return [made.get(v.id, "input") for v in forward.outputs[1:]]


def _steps_match_eager(model, x, autocast: bool, options=None):
    def step(m):
        with genesis.autocast("cpu", dtype=genesis.bfloat16, enabled=autocast):
            loss = m(x)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
        model.zero_grad()
        x.grad = None
        return loss.detach(), grads

    eager_loss, eager_grads = step(model)
    compiled = genesis.compile(model, options=options)
    for _ in range(3):  # the trace, then replays
        loss, grads = step(compiled)
        assert_close(loss, eager_loss, rtol=0, atol=0)
        for g, e in zip(grads, eager_grads):
            assert_close(g, e, rtol=0, atol=0)
    return compiled


def test_a_norms_output_is_recomputed_not_kept_under_autocast():
    for norm in ("rms", "layer"):
        genesis.manual_seed(0)
        model = NormThenProjections(norm=norm)
        x = genesis.randn(16, 32, requires_grad=True)
        compiled = _steps_match_eager(model, x, autocast=True)
        kept = _kept_ops(compiled)
        assert not {"rms_norm", "layer_norm", "cast"} & set(kept), (norm, kept)
        report = compiled.saved_bytes()[0]
        assert report.after < report.before


def test_without_recompute_the_norms_bf16_output_is_kept():
    genesis.manual_seed(0)
    model = NormThenProjections()
    x = genesis.randn(16, 32, requires_grad=True)
    compiled = _steps_match_eager(model, x, autocast=True, options={"recompute": False})
    assert "cast" in _kept_ops(compiled)


def test_the_reshaped_attention_output_is_recomputed_from_the_kept_output():
    genesis.manual_seed(0)
    model = AttentionThenProjection()
    x = genesis.randn(2, 6, 16, requires_grad=True)
    compiled = _steps_match_eager(model, x, autocast=False)
    kept = _kept_ops(compiled)
    assert "scaled_dot_product_attention_kernel" in kept, kept  # (its output and lse)
    assert "view" not in kept and "fused_attention" not in kept, kept
