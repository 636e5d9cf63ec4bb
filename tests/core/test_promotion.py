"""Type promotion and broadcasting, as Hypothesis properties checked against torch.

* ``genesis.result_type`` equals ``torch.result_type`` for every pair (exhaustively) and
  for triples (n-ary reference: torch's own ``torch._prims_common.elementwise_dtypes``) of
  dim tensors, 0-d tensors and Python scalars over all 10 dtypes.
* binary ops give torch's dtype and values, or both raise.
* broadcasting: random shape pairs give torch's result shape, or both raise.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes
from op_table import ALL, g_dtype, t_dtype, to_torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

import genesis

SCALARS = {"bool": True, "int": 3, "float": 1.5}
# operand kinds: ("dim", dtype), ("0-d", dtype), ("scalar", python type name)
KINDS = ([("dim", d) for d in ALL] + [("0-d", d) for d in ALL]
         + [("scalar", s) for s in SCALARS])


def make(kind, lib, values=None):
    """An operand of ``kind`` in genesis ('g') or torch ('t')."""
    form, what = kind
    if form == "scalar":
        return SCALARS[what] if values is None else values
    shape = (3,) if form == "dim" else ()
    data = np.ones(shape) if values is None else values
    t = torch.tensor(data).to(t_dtype(what))
    if lib == "t":
        return t
    if t.dtype is torch.bfloat16:
        return genesis.tensor(t.float().numpy()).to(genesis.bfloat16)
    return genesis.tensor(t.numpy())


def _has_tensor(kinds) -> bool:
    return any(k[0] != "scalar" for k in kinds)


def test_result_type_every_pair_matches_torch():
    bad = []
    for ka, kb in itertools.product(KINDS, KINDS):
        if not _has_tensor((ka, kb)):
            continue
        expected = torch.result_type(make(ka, "t"), make(kb, "t"))
        actual = genesis.result_type(make(ka, "g"), make(kb, "g"))
        if actual.name != str(expected).split(".")[-1]:
            bad.append(f"{ka} {kb}: genesis {actual}, torch {expected}")
    assert not bad, f"{len(bad)} pairs differ:\n" + "\n".join(bad[:20])


def test_promote_types_table_matches_torch():
    for a, b in itertools.product(ALL, ALL):
        expected = torch.promote_types(t_dtype(a), t_dtype(b))
        assert genesis.promote_types(g_dtype(a), g_dtype(b)).name == str(expected)[6:], (a, b)


def test_result_type_every_triple_matches_torch():
    """All 23**3 triples, against torch's n-ary promotion (its PrimTorch reference)."""
    g_ops = {k: make(k, "g") for k in KINDS}
    t_ops = {k: make(k, "t") for k in KINDS}
    kind = ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT
    bad = []
    for ks in itertools.product(KINDS, repeat=3):
        if not _has_tensor(ks):
            continue
        _, expected = elementwise_dtypes(*[t_ops[k] for k in ks], type_promotion_kind=kind)
        actual = genesis.result_type(*[g_ops[k] for k in ks])
        if actual.name != str(expected)[6:]:
            bad.append(f"{ks}: genesis {actual}, torch {expected}")
    assert not bad, f"{len(bad)} triples differ:\n" + "\n".join(bad[:20])


@given(st.lists(st.sampled_from(KINDS), min_size=1, max_size=3))
@settings(max_examples=300)
def test_result_type_nary_matches_torch(kinds):
    if not _has_tensor(kinds):
        return
    _, expected = elementwise_dtypes(
        *[make(k, "t") for k in kinds],
        type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    actual = genesis.result_type(*[make(k, "g") for k in kinds])
    assert actual.name == str(expected)[6:], (kinds, actual, expected)


def test_result_type_follows_default_dtype():
    genesis.set_default_dtype(genesis.float64)
    torch.set_default_dtype(torch.float64)
    try:
        x = genesis.ones(2, dtype=genesis.int32)
        assert genesis.result_type(x, 1.5) is genesis.float64
        assert (x * 1.5).dtype is genesis.float64
        assert genesis.tensor(1.5).dtype is genesis.float64
    finally:
        torch.set_default_dtype(torch.float32)


_BINARY = ["add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "maximum",
           "minimum", "eq", "lt", "ge", "logical_and", "logical_xor"]


def _values(kind, rng):
    form, what = kind
    if form == "scalar":
        return {"bool": bool(rng.integers(0, 2)), "int": int(rng.integers(-3, 4)),
                "float": float(np.round(rng.uniform(-3, 3), 3))}[what]
    shape = (3,) if form == "dim" else ()
    if what == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if what == "uint8":
        return rng.integers(0, 6, size=shape)
    if what in ("int8", "int16", "int32", "int64"):
        return rng.integers(-3, 4, size=shape)
    return rng.uniform(-3, 3, size=shape)


def _half_with_wider_zero_dim(ka, kb) -> bool:
    """A half-precision tensor with dims beside a 0-d float32/float64 tensor (either side)."""
    halves, wider = ("float16", "bfloat16"), ("float32", "float64")
    return any(x[0] == "dim" and x[1] in halves and y[0] == "0-d" and y[1] in wider
               for x, y in ((ka, kb), (kb, ka)))


@given(op=st.sampled_from(_BINARY), ka=st.sampled_from(KINDS), kb=st.sampled_from(KINDS),
       seed=st.integers(0, 2**16))
@settings(max_examples=400)
def test_binary_op_dtype_and_values_match_torch(op, ka, kb, seed):
    if not _has_tensor((ka, kb)):
        return
    if op == "floor_divide" and _half_with_wider_zero_dim(ka, kb):
        return  # a known difference at rounding boundaries: the strict xfail test below
    rng = np.random.default_rng(seed)
    va, vb = _values(ka, rng), _values(kb, rng)
    ta, tb = make(ka, "t", va), make(kb, "t", vb)
    ga, gb = make(ka, "g", va), make(kb, "g", vb)
    try:
        expected = getattr(torch, op)(ta, tb)
    except TypeError:
        return  # torch's signature refuses a Python scalar here (maximum); genesis may accept
    except Exception:  # torch refuses the values: genesis must refuse too, never a wrong result
        with pytest.raises(Exception):  # noqa: B017 - torch's exception types vary by op
            getattr(genesis, op)(ga, gb)
        return
    actual = getattr(genesis, op)(ga, gb)
    torch.testing.assert_close(to_torch(actual), expected, equal_nan=True,
                               msg=lambda m: f"{op}({ka}={va!r}, {kb}={vb!r}): {m}")


@pytest.mark.xfail(strict=True, reason="torch's CPU kernels read a 0-d CPU tensor in the op's "
                   "compute type (float32 for half inputs), unrounded; genesis first casts it "
                   "to the result dtype. floor is discontinuous, so at a rounding boundary the "
                   "two differ by 1 (69 of 5,000 random bfloat16-by-float32-0-d cases; found "
                   "by the test above)")
def test_floor_divide_of_a_half_tensor_by_a_wider_zero_dim_tensor_matches_torch_cpu():
    a = torch.tensor([1.131057]).to(torch.bfloat16)  # 1.1328125 in bfloat16
    b = torch.tensor(1.133214438156383, dtype=torch.float32)  # also 1.1328125 in bfloat16
    expected = torch.floor_divide(a, b)  # 0: 1.1328125 / 1.1332144 < 1
    actual = genesis.floor_divide(genesis.tensor(a.float().numpy()).to(genesis.bfloat16),
                                  genesis.tensor(b.numpy()))
    assert actual.dtype is genesis.bfloat16
    assert actual.float().tolist() == expected.float().tolist()


def _shapes(max_dims=4):
    return st.lists(st.integers(0, 3), min_size=0, max_size=max_dims).map(tuple)


@given(a=_shapes(), b=_shapes())
@settings(max_examples=300)
def test_broadcast_shapes_random_pairs(a, b):
    """Random (mostly incompatible) pairs: same shape as torch, or both raise."""
    try:
        expected = tuple(torch.broadcast_shapes(a, b))
    except RuntimeError:
        with pytest.raises(RuntimeError) as info:
            genesis.zeros(a) + genesis.zeros(b)
        # the message names both shapes
        assert str(a) in str(info.value) and str(b) in str(info.value), str(info.value)
        return
    assert tuple((genesis.zeros(a) + genesis.zeros(b)).shape) == expected
    assert tuple(genesis.zeros(b).expand(expected).shape) == expected


@given(shapes=mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=4, max_side=3))
@settings(max_examples=200)
def test_broadcast_compatible_shapes(shapes):
    """Compatible triples (where's three operands): torch's shape and values."""
    c, a, b = shapes.input_shapes
    rng = np.random.default_rng(0)
    cond, x, y = rng.random(c) < 0.5, rng.standard_normal(a), rng.standard_normal(b)
    expected = torch.where(torch.tensor(cond), torch.tensor(x), torch.tensor(y))
    actual = genesis.where(genesis.tensor(cond), genesis.tensor(x), genesis.tensor(y))
    assert tuple(actual.shape) == shapes.result_shape
    torch.testing.assert_close(to_torch(actual), expected)


_INPLACE = ["add_", "sub_", "mul_", "div_", "remainder_", "pow_", "__iadd__", "__imul__"]


@given(op=st.sampled_from(_INPLACE), ka=st.sampled_from([k for k in KINDS if k[0] == "dim"]),
       kb=st.sampled_from(KINDS), seed=st.integers(0, 2**16))
@settings(max_examples=400)
def test_in_place_ops_keep_dtype_or_raise_like_torch(op, ka, kb, seed):
    """``x.op_(y)``: torch's result (x keeps its dtype), or torch refuses and so do we."""
    rng = np.random.default_rng(seed)
    va, vb = _values(ka, rng), _values(kb, rng)
    ta, tb = make(ka, "t", va), make(kb, "t", vb)
    ga, gb = make(ka, "g", va), make(kb, "g", vb)
    try:
        expected = getattr(ta, op)(tb)
    except TypeError:
        return  # a signature torch does not offer
    except Exception:
        with pytest.raises(Exception):  # noqa: B017 - torch's exception types vary by op
            getattr(ga, op)(gb)
        return
    actual = getattr(ga, op)(gb)
    assert actual is ga
    torch.testing.assert_close(to_torch(actual), expected, equal_nan=True,
                               msg=lambda m: f"{ka}.{op}({kb}={vb!r}): {m}")
