"""Autocast's weight-cast cache: torch's rules (float32 leaves that require grad, cleared at
the outermost exit), plus safety against stale casts (grad mode, in-place updates)."""

from __future__ import annotations

import importlib

import numpy as np
import torch
from device_params import to_genesis, to_torch, torch_device
from torch.testing import assert_close

import genesis
import genesis.nn.functional as F
from genesis.dispatch import DispatchMode

_state = importlib.import_module("genesis.autocast")._state


def _casts_in(fn) -> int:
    """How many dtype conversions (the ``Cast`` op) ``fn`` runs."""
    seen = []

    class Watch(DispatchMode):
        def __genesis_dispatch__(self, op, args, kwargs):
            seen.append(op.name)
            return op(*args, **kwargs)

    with Watch():
        fn()
    return seen.count("cast")


def test_weight_cast_once_per_region_and_gradients_match_torch(device):
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((4, 8)).astype(np.float32)
    w_np = rng.standard_normal((8, 8)).astype(np.float32)
    kind = genesis.device(device).type
    x, w = to_genesis(x_np, device), to_genesis(w_np, device, True)

    def two_uses():
        return F.linear(F.linear(x, w).float(), w)  # the same weight twice

    with genesis.autocast(kind, dtype=genesis.bfloat16):
        many = _casts_in(two_uses)
        assert len(_state.cache) == 1
        y = two_uses()
    assert not _state.cache  # cleared at the exit
    with genesis.autocast(kind, dtype=genesis.bfloat16, cache_enabled=False):
        assert _casts_in(two_uses) > many
        assert not _state.cache
    y.float().sum().backward()

    td = torch_device(device)
    tx = torch.from_numpy(x_np).to(td)
    tw = torch.from_numpy(w_np).to(td).requires_grad_()
    with torch.autocast(torch.device(td).type, dtype=torch.bfloat16):
        ty = torch.nn.functional.linear(torch.nn.functional.linear(tx, tw).float(), tw)
    ty.float().sum().backward()
    assert_close(to_torch(y), ty.detach().cpu())
    assert_close(to_torch(w.grad), tw.grad.cpu())


def test_cache_rules():
    w = genesis.randn(4, 4, requires_grad=True)
    frozen = genesis.randn(4, 4)  # no grad: not cached
    x = genesis.randn(2, 4)
    with genesis.autocast("cpu", dtype=genesis.bfloat16):
        with genesis.autocast("cpu", dtype=genesis.bfloat16):
            F.linear(x, w)
            F.linear(x, frozen)
            F.linear(x, w[:2])  # a view: not cached
            F.linear(x, (w * 1).detach())  # not the leaf
        assert list(_state.cache) == [id(w)]  # kept: an inner exit is not the outermost
        first = _state.cache[id(w)][4]
        with genesis.no_grad():  # another grad mode: a cast of its own, no graph
            F.linear(x, w)
        assert _state.cache[id(w)][4] is not first
        y = F.linear(x, w)  # grad mode again: a new cast with a graph, not the no_grad one
        assert y.grad_fn is not None
        y.float().sum().backward()
        assert w.grad is not None
        with genesis.no_grad():
            w.add_(1.0)  # an in-place update: the cached cast is stale
        z = F.linear(genesis.ones(1, 4), w)
        assert_close(to_torch(z).float(),
                     (torch.ones(1, 4) @ to_torch(w).bfloat16().float().T),
                     rtol=1.6e-2, atol=1e-2)
    assert not _state.cache
