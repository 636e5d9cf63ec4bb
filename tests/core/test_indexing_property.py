"""Hypothesis: random index keys (ints, slices with steps and negative bounds, None,
Ellipsis, integer tensors broadcasting together, bool masks) — get, set and their gradients
against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from op_table import to_torch

import genesis


@st.composite
def index_case(draw):
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    key, dim, used_ellipsis = [], 0, False
    bshape = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    while dim < len(shape) and len(key) < 5:
        n = shape[dim]
        kind = draw(st.sampled_from(["int", "slice", "none", "tensor", "mask", "ellipsis",
                                     "full"]))
        if kind == "int":
            key.append(draw(st.integers(-n, n - 1)))
            dim += 1
        elif kind == "slice":
            start = draw(st.none() | st.integers(-n - 1, n + 1))
            stop = draw(st.none() | st.integers(-n - 1, n + 1))
            step = draw(st.none() | st.integers(1, 3))
            key.append(slice(start, stop, step))
            dim += 1
        elif kind == "none":
            key.append(None)
        elif kind == "tensor":
            # index tensors broadcast together: each takes bshape or a size-1 variant of it
            sub = tuple(1 if draw(st.booleans()) else s for s in bshape)
            vals = draw(st.lists(st.integers(-n, n - 1), min_size=int(np.prod(sub)),
                                 max_size=int(np.prod(sub))))
            key.append(("tensor", np.array(vals, dtype=np.int64).reshape(sub)))
            dim += 1
        elif kind == "mask" and not any(isinstance(k, tuple) for k in key):
            k = draw(st.integers(1, len(shape) - dim))
            mshape = shape[dim:dim + k]
            vals = draw(st.lists(st.booleans(), min_size=int(np.prod(mshape)),
                                 max_size=int(np.prod(mshape))))
            key.append(("mask", np.array(vals, dtype=bool).reshape(mshape)))
            dim += k
            break  # one mask per key (its nonzero count would need to match other tensors)
        elif kind == "ellipsis" and not used_ellipsis:
            key.append(Ellipsis)
            used_ellipsis = True
            dim = len(shape) - draw(st.integers(0, len(shape) - dim))
        else:
            key.append(slice(None))
            dim += 1
    return shape, key


def build_key(lib, key):
    out = []
    for k in key:
        if isinstance(k, tuple):
            out.append(lib.tensor(k[1]))
        else:
            out.append(k)
    return tuple(out)


@given(index_case())
@settings(max_examples=300)
def test_getitem_matches_torch(case):
    shape, key = case
    data = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    try:
        expected = torch.tensor(data)[build_key(torch, key)]
    except (IndexError, RuntimeError):
        with pytest.raises((IndexError, RuntimeError)):
            genesis.tensor(data)[build_key(genesis, key)]
        return
    if expected.numel() == 0 and _out_of_range(shape, key):
        # torch checks index bounds per element read, so an empty result hides a bad index;
        # genesis checks the index tensors up front (a clear error is fine too)
        return
    actual = genesis.tensor(data)[build_key(genesis, key)]
    torch.testing.assert_close(to_torch(actual), expected, msg=lambda m: f"{key}: {m}")


def _out_of_range(shape, key) -> bool:
    """Whether some index tensor of ``key`` holds a value out of its dim's range."""
    try:
        genesis.zeros(shape)[build_key(genesis, key)]
    except IndexError:
        return True
    return False


@given(index_case(), st.sampled_from(["scalar", "tensor"]))
@settings(max_examples=300)
def test_setitem_matches_torch(case, value_kind):
    shape, key = case
    data = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    t, g = torch.tensor(data), genesis.tensor(data)
    try:
        target_shape = tuple(t[build_key(torch, key)].shape)
    except (IndexError, RuntimeError):
        return
    if 0 in target_shape and _out_of_range(shape, key):
        return  # see test_getitem_matches_torch
    has_tensor = any(isinstance(k, tuple) and k[0] == "tensor" for k in key)
    if value_kind == "tensor" and not has_tensor:
        # distinct values (with repeated tensor indices torch's choice among writes is
        # unspecified, so those get a scalar)
        vals = -1.0 - np.arange(int(np.prod(target_shape))).reshape(target_shape)
        t[build_key(torch, key)] = torch.tensor(vals)
        g[build_key(genesis, key)] = genesis.tensor(vals)
    else:
        t[build_key(torch, key)] = -7.0
        g[build_key(genesis, key)] = -7.0
    torch.testing.assert_close(to_torch(g), t, msg=lambda m: f"{key}: {m}")


@given(index_case())
@settings(max_examples=150)
def test_getitem_gradient_matches_torch(case):
    shape, key = case
    data = np.random.default_rng(0).standard_normal(shape)
    t_leaf = torch.tensor(data, requires_grad=True)
    g_leaf = genesis.tensor(data, requires_grad=True)
    try:
        t_out = t_leaf[build_key(torch, key)]
    except (IndexError, RuntimeError):
        return
    if t_out.numel() == 0 and _out_of_range(shape, key):
        return  # see test_getitem_matches_torch
    g_out = g_leaf[build_key(genesis, key)]
    w = np.random.default_rng(1).standard_normal(tuple(t_out.shape))
    (t_out * torch.tensor(w)).sum().backward()
    (g_out * genesis.tensor(w)).sum().backward()
    torch.testing.assert_close(to_torch(g_leaf.grad), t_leaf.grad, msg=lambda m: f"{key}: {m}")
