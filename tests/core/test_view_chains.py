"""Hypothesis: random chains of view ops (transpose, permute, slicing with steps, select,
narrow, unsqueeze, squeeze, expand, view, reshape, flatten, unflatten) give torch's shapes,
strides, offsets and values; writes through the last view land where torch's land; and
gradients through the chain match."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from op_table import to_torch

import genesis


def _apply(lib, x, step):
    kind, arg = step
    if kind == "transpose":
        return x.transpose(*arg)
    if kind == "permute":
        return x.permute(*arg)
    if kind == "slice":
        d, start, stop, stride = arg
        key = (slice(None),) * d + (slice(start, stop, stride),)
        return x[key]
    if kind == "select":
        return x.select(*arg)
    if kind == "narrow":
        return x.narrow(*arg)
    if kind == "unsqueeze":
        return x.unsqueeze(arg)
    if kind == "squeeze":
        return x.squeeze(arg)
    if kind == "expand":
        d, n = arg
        shape = list(x.shape)
        shape[d] = n
        return x.expand(*shape)
    if kind == "reshape":
        return x.reshape(*arg)
    if kind == "view":
        return x.view(*arg)
    if kind == "flatten":
        return x.flatten(*arg)
    if kind == "unflatten":
        return x.unflatten(*arg)
    raise AssertionError(kind)


@st.composite
def view_chain(draw):
    """A start shape and a chain of view steps valid for the shapes they meet."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    steps, cur = [], list(shape)
    for _ in range(draw(st.integers(1, 5))):
        nd = len(cur)
        kinds = ["transpose", "permute", "slice", "unsqueeze", "reshape", "flatten"]
        if nd == 0:
            kinds = ["unsqueeze", "reshape"]
        if nd > 1:
            kinds += ["select", "narrow"]
        if 1 in cur:
            kinds += ["squeeze", "expand"]
        if any(n % 2 == 0 and n > 1 for n in cur):
            kinds.append("unflatten")
        kind = draw(st.sampled_from(kinds))
        if kind == "transpose":
            a, b = draw(st.integers(-nd, nd - 1)), draw(st.integers(-nd, nd - 1))
            arg = (a, b)
            cur[a], cur[b] = cur[b], cur[a]
        elif kind == "permute":
            perm = draw(st.permutations(range(nd)))
            arg = tuple(perm)
            cur = [cur[p] for p in perm]
        elif kind == "slice":
            d = draw(st.integers(0, nd - 1))
            start = draw(st.integers(-cur[d], cur[d]))
            stop = draw(st.integers(-cur[d], cur[d]))
            stride = draw(st.integers(1, 3))
            arg = (d, start, stop, stride)
            cur[d] = len(range(*slice(start, stop, stride).indices(cur[d])))
        elif kind == "select":
            d = draw(st.integers(-nd, nd - 1))
            if cur[d] == 0:
                continue
            arg = (d, draw(st.integers(-cur[d], cur[d] - 1)))
            cur.pop(d)
        elif kind == "narrow":
            d = draw(st.integers(0, nd - 1))
            start = draw(st.integers(0, cur[d]))
            length = draw(st.integers(0, cur[d] - start))
            arg = (d, start, length)
            cur[d] = length
        elif kind == "unsqueeze":
            d = draw(st.integers(-nd - 1, nd))
            arg = d
            cur.insert(d % (nd + 1), 1)
        elif kind == "squeeze":
            d = draw(st.sampled_from([i for i, n in enumerate(cur) if n == 1]))
            arg = d
            cur.pop(d)
        elif kind == "expand":
            d = draw(st.sampled_from([i for i, n in enumerate(cur) if n == 1]))
            n = draw(st.integers(0, 3))
            arg = (d, n)
            cur[d] = n
        elif kind == "reshape":
            numel = int(np.prod(cur, dtype=np.int64))
            arg = (-1,) if numel == 0 else draw(st.sampled_from(
                [(-1,), (numel,), (1, -1), (-1, 1)] + ([(2, -1)] if numel % 2 == 0 else [])))
            cur = list(np.empty(cur).reshape(arg).shape)
        elif kind == "flatten":
            s = draw(st.integers(0, nd - 1))
            e = draw(st.integers(s, nd - 1))
            arg = (s, e)
            cur = cur[:s] + [int(np.prod(cur[s:e + 1]))] + cur[e + 1:]
        elif kind == "unflatten":
            d = draw(st.sampled_from([i for i, n in enumerate(cur) if n % 2 == 0 and n > 1]))
            arg = (d, (2, -1))
            cur = cur[:d] + [2, cur[d] // 2] + cur[d + 1:]
        steps.append((kind, arg))
    return shape, steps


@given(view_chain())
@settings(max_examples=250)
def test_view_chain_geometry_values_and_writes(chain):
    shape, steps = chain
    data = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    t_base, g_base = torch.tensor(data), genesis.tensor(data)
    t, g = t_base, g_base
    for step in steps:
        t = _apply(torch, t, step)
        g = _apply(genesis, g, step)
        assert tuple(g.shape) == tuple(t.shape), (steps, step)
        torch.testing.assert_close(to_torch(g), t)
        shares = t.data_ptr() >= t_base.data_ptr() and t.untyped_storage().data_ptr() == \
            t_base.untyped_storage().data_ptr()
        if shares and t.numel():  # a view in torch: same geometry in genesis
            # (the stride of a size-1 dim is arbitrary: torch and genesis may differ there)
            assert [s for s, n in zip(g.stride(), g.shape) if n > 1] == \
                [s for s, n in zip(t.stride(), t.shape) if n > 1], (steps, step)
            assert g.storage_offset() == t.storage_offset(), (steps, step)
        assert g.is_contiguous() == t.is_contiguous(), (steps, step)
        # the geometry a view was made with (``_geom``) is its array's, as the backend reads it
        be = g._backend
        assert g._geom in (None, (tuple(be.strides_of(g._data)), be.storage_offset_of(g._data)))
    # writes through the final tensor: torch's base changes iff genesis's does, the same way
    if t.numel() and 0 not in t.stride():
        t.fill_(-1.0)
        g.fill_(-1.0)
        torch.testing.assert_close(to_torch(g_base), t_base)


@given(view_chain())
@settings(max_examples=100)
def test_view_chain_gradients(chain):
    shape, steps = chain
    data = np.random.default_rng(0).standard_normal(shape)
    t_leaf = torch.tensor(data, requires_grad=True)
    g_leaf = genesis.tensor(data, requires_grad=True)
    t, g = t_leaf * 1, g_leaf * 1
    for step in steps:
        t, g = _apply(torch, t, step), _apply(genesis, g, step)
    w = np.random.default_rng(1).standard_normal(tuple(t.shape))
    (t * torch.tensor(w)).sin().sum().backward()
    (g * genesis.tensor(w)).sin().sum().backward()
    torch.testing.assert_close(to_torch(g_leaf.grad), t_leaf.grad)
