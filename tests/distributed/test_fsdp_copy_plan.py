"""FSDP's planned copies (``fsdp/copy_plan.py``): the copy-out after an all-gather and the
packing before a reduce-scatter give exactly what per-parameter indexing gives, for uneven
rows, 0-d and empty parameters, missing and non-contiguous gradients; and a resharding
leaves no view of the unsharded buffer alive (nor does a forward that reshards)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import genesis
from genesis import nn
from genesis.distributed.fsdp import fully_shard
from genesis.distributed.fsdp.copy_plan import CopyPlan
from genesis.distributed.fsdp.sharded_tensor import ShardLayout

# (with world 2, the last four have chunks of 6 elements, evenly spaced: one strided copy)
SHAPES = [(13, 8), (), (3,), (0, 4), (5, 0), (1,), (2, 3, 2), (4, 3), (1, 6), (2, 6)]


def _plan(world: int):
    layouts = [ShardLayout(s, world) for s in SHAPES]
    offsets, at = [], 0
    for lay in layouts:  # gaps between chunks, as the group's alignment leaves them
        offsets.append(at)
        at += lay.local_numel + 3
    return layouts, offsets, CopyPlan(layouts, offsets, world, at), at


def _values(seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_copy_out_rebuilds_every_whole_value(world):
    layouts, offsets, plan, numel = _plan(world)
    values = _values()
    gathered = genesis.full((world, numel), 7.0)  # 7: the gaps, never to be read
    for lay, off, v in zip(layouts, offsets, values):
        for r in range(world):
            chunk = lay.chunk_of(genesis.tensor(v), r).reshape(-1)
            gathered[r, off:off + lay.local_numel] = chunk
    wholes = plan.copy_out(gathered, genesis.empty(world * numel))
    if world == 2:
        assert len(plan.runs) == len(SHAPES) - 3
    for whole, v in zip(wholes, values):
        assert tuple(whole.shape) == v.shape and whole.is_contiguous()
        np.testing.assert_array_equal(whole.numpy(), v)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_pack_writes_each_gradient_into_its_columns(world):
    layouts, offsets, plan, numel = _plan(world)
    values = _values(1)
    grads = [genesis.tensor(v) for v in values]
    grads[1] = None  # a parameter without gradient: zeros
    grads[0] = genesis.tensor(values[0].T.copy()).t()  # non-contiguous, same values
    packed = genesis.full((world, numel), 7.0, dtype=genesis.float64)  # cast on the way in
    plan.pack(grads, packed, genesis.zeros(1, dtype=genesis.float64))
    got = packed.numpy()
    for lay, off, v, g in zip(layouts, offsets, values, grads):
        for r in range(world):
            want = (np.zeros(lay.local_numel) if g is None else
                    lay.chunk_of(genesis.tensor(v), r).reshape(-1).numpy())
            np.testing.assert_array_equal(got[r, off:off + lay.local_numel], want)
    gaps = np.ones(numel, bool)
    for lay, off in zip(layouts, offsets):
        gaps[off:off + lay.local_numel] = False
    assert (got[:, gaps] == 7.0).all()  # the alignment gaps are left untouched


def test_shard_views_are_each_padded_chunk_of_a_flat_buffer():
    layouts, offsets, plan, numel = _plan(2)
    flat = genesis.arange(numel, dtype=genesis.float32)
    views = plan.shard_views(flat, [0, 2, 5])
    for i, view in zip([0, 2, 5], views):
        lay = layouts[i]
        assert tuple(view.shape) == lay.local_shape
        np.testing.assert_array_equal(
            view.numpy().reshape(-1), np.arange(offsets[i], offsets[i] + lay.local_numel))
    flat.mul_(2)  # views, not copies
    assert views[0].reshape(-1)[0].item() == 2 * offsets[0]


def _plain():
    genesis.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.Sequential(nn.Linear(6, 5), nn.Tanh(),
                                                        nn.Linear(5, 6)), nn.Linear(6, 2))


def _model(frozen: bool = False):
    model = _plain()
    model[1][0].bias.requires_grad_(not frozen)  # (frozen before fully_shard, as documented)
    fully_shard(model[1])
    return fully_shard(model)


def _buffer_of(param):
    """A weak reference to the array an unsharded parameter's value views (CPU backend:
    the torch tensor every view of the unsharded buffer keeps alive as its base)."""
    data = param._data
    return weakref.ref(data._base if data._base is not None else data)


def test_reshard_frees_the_unsharded_buffer_and_unshard_reads_new_shards(world_of_one):
    model = _model()
    block = model[1]
    block.unshard()
    params = [fp.unsharded for fp in block._fsdp_state.group.params]
    alive = _buffer_of(params[0])
    assert all(_buffer_of(p)() is alive() for p in params)  # one buffer for the group
    first = params[0].detach().clone()
    block.reshard()
    gc.collect()
    assert alive() is None and all(p.numel() == 0 for p in params)
    with genesis.no_grad():
        block[0].weight.to_local().add_(1.0)  # the shards change: a new gather must see it
    block.unshard()
    np.testing.assert_allclose(params[0].detach().numpy(), first.numpy() + 1.0)
    block.reshard()


def test_forward_that_reshards_keeps_no_unsharded_buffer_for_backward(world_of_one):
    model = _model()
    seen = []
    model[1].register_forward_pre_hook(  # runs after fully_shard's own pre-hook
        lambda m, args: seen.append(_buffer_of(m[0].weight)))
    x = genesis.tensor(np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32))
    loss = model(x).square().sum()
    gc.collect()
    assert len(seen) == 1 and seen[0]() is None  # autograd kept only the parameter objects
    loss.backward()
    reference = _plain()
    reference(x).square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6, atol=1e-6,
                                   err_msg=name)


def test_frozen_parameter_in_a_block_is_packed_as_zeros_and_gets_no_gradient(world_of_one):
    model, reference = _model(frozen=True), _plain()
    reference[1][0].bias.requires_grad_(False)
    x = genesis.tensor(np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32))
    for _ in range(2):  # twice: the sharded gradients accumulate like the plain ones
        model(x).square().sum().backward()
        reference(x).square().sum().backward()
    assert model[1][0].bias.grad is None
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        if q.grad is not None:
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=name)


def test_a_group_packs_after_resharding_and_after_the_older_reduce_scatter(world_of_one):
    # torch FSDP2's order, for the peak: when a group's packed buffer is made, its unsharded
    # parameters are gone and the previous group's packed gradients are freed (its
    # reduce-scatter waited for), so neither sits beside the new buffer
    model = _model()
    groups = {id(m._fsdp_state.group): name for name, m in (("block", model[1]),
                                                             ("root", model))}
    seen = []
    for module in (model[1], model):
        group = module._fsdp_state.group
        pack = group.plan.pack

        def watching(grads, packed, zero, group=group, pack=pack):
            tree = model._fsdp_state.tree  # (made at the first forward)
            seen.append((groups[id(group)], group.is_unsharded, len(tree.pending)))
            return pack(grads, packed, zero)

        group.plan.pack = watching
    x = genesis.tensor(np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32))
    model(x).square().sum().backward()
    assert seen == [("block", False, 0), ("root", False, 0)]
