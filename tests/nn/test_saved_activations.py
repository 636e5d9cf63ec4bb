"""What the forward keeps for the backward: ``genesis.autograd.saved`` and, measured with it,
a gated MLP (``down(silu(gate(x)) * up(x))``) keeping no more than torch's does."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import genesis
import genesis.nn.functional as F
from genesis.autograd.saved import saved_bytes, saved_tensors


def test_saved_bytes_counts_shared_memory_once():
    x = genesis.randn(8, 16, requires_grad=True)
    w = genesis.randn(16, 16, requires_grad=True)
    h = x * 2.0  # saves nothing (a constant factor)
    y = (h @ w) + (h @ w.mT)  # both products save h and w (a view of w)
    assert saved_bytes(y) == h.numel() * 4 + w.numel() * 4
    total, per_node = saved_bytes(y, per_node=True)
    assert total == sum(per_node.values()) and set(per_node) == {"MatmulBackward"}


def test_saved_tensors_lists_nodes_in_graph_order():
    x = genesis.randn(3, requires_grad=True)
    y = (x * genesis.randn(3)).sigmoid()
    assert [name for name, _ in saved_tensors(y)] == ["SigmoidBackward", "MulBackward"]


def test_silu_saves_only_its_input():
    # x * x.sigmoid() kept x and sigmoid(x) (two tensors of the gate's size per MLP)
    x = genesis.randn(4, 6, requires_grad=True)
    kept = [t for _, t in saved_tensors(F.silu(x))]
    assert len(kept) == 1 and kept[0] is x


def _torch_saved_bytes(fn) -> tuple:
    """(output, bytes of the distinct storages torch's forward saves) of ``fn()``."""
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(storages.values())


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_gated_mlp_saves_no_more_than_torch(dtype):
    rng = np.random.default_rng(0)
    dim, ffn, tokens = 32, 88, 24
    arrays = [rng.standard_normal(s).astype(np.float32) * 0.1
              for s in ((tokens, dim), (ffn, dim), (ffn, dim), (dim, ffn))]

    def mlp(lib, x, wg, wu, wd):
        f = lib.nn.functional
        return f.linear(f.silu(f.linear(x, wg)) * f.linear(x, wu), wd)

    gx, *gw = (genesis.from_numpy(a).to(getattr(genesis, dtype)).requires_grad_() for a in arrays)
    tx, *tw = (torch.from_numpy(a).to(getattr(torch, dtype)).requires_grad_() for a in arrays)
    out = mlp(genesis, gx, *gw)
    ref, torch_bytes = _torch_saved_bytes(lambda: mlp(torch, tx, *tw))
    # x and the weights, gate, up, silu(gate) and the product: not sigmoid(gate) as well
    assert saved_bytes(out) <= torch_bytes
    if dtype == "bfloat16":
        return  # (bfloat16 gradients: silu's own rounding is the op table's business)
    out.sum().backward()
    ref.sum().backward()
    for g, t in zip([gx, *gw], [tx, *tw]):
        torch.testing.assert_close(torch.from_numpy(g.grad.float().numpy()), t.grad.float())
