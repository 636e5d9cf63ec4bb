"""Memory of a training step against torch's: what the forward keeps for the backward
(``genesis.autograd.saved``; a gated MLP ``down(silu(gate(x)) * up(x))`` keeps no more than
torch's) and what a backward allocates (an embedding's gradient: one table-sized array)."""

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


def test_embedding_backward_adds_into_its_zeros(monkeypatch):
    # One weight-sized array: the zeros themselves get the rows (index_add_), where an
    # out-of-place index_add held the zeros and their copy (2 GiB at a 152k x 3584 bf16 table)
    w = genesis.randn(10, 4, requires_grad=True)
    backend = type(w._backend)
    calls = []
    monkeypatch.setattr(backend, "index_add", lambda *a: calls.append("index_add"))
    F.embedding(genesis.tensor([[1, 1, 7]]), w).sum().backward()
    assert not calls
    expect = np.zeros((10, 4), np.float32)
    expect[1], expect[7] = 2.0, 1.0
    np.testing.assert_array_equal(w.grad.numpy(), expect)
    monkeypatch.undo()  # create_graph keeps the differentiable op
    (g,) = genesis.autograd.grad(F.embedding(genesis.tensor([3]), w).pow(2).sum(), w,
                                 create_graph=True)
    assert g.requires_grad
