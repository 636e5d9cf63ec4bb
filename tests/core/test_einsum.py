"""``genesis.einsum`` against ``torch.einsum``: forward and gradients over many equations
(matrix products, batches, diagonals and traces, ellipses, implicit outputs, broadcasting,
three operands), float64 gradcheck, and torch's errors for bad equations and shapes."""

from __future__ import annotations

import pytest
import torch
from device_params import to_genesis, to_torch
from torch.testing import assert_close

import genesis
from genesis.testing import gradcheck

# (equation, operand shapes)
CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("ij->ji", [(2, 3)]),
    ("ji", [(2, 3)]),
    ("ij->", [(2, 3)]),
    ("ij->j", [(2, 3)]),
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("i,i->i", [(3,), (3,)]),
    ("i,i->i", [(3,), (1,)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("iji->j", [(2, 3, 2)]),
    ("bii->bi", [(2, 3, 3)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("bhqk,bhkd->bqhd", [(2, 2, 3, 5), (2, 2, 5, 4)]),
    ("...ij->...ji", [(2, 3, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("...i,...i->...", [(2, 3), (5, 1, 3)]),
    ("...i->i", [(2, 3)]),
    ("i...j,j", [(2, 4, 3), (3,)]),
    ("i...->...", [(2, 3, 4)]),
    ("bA", [(2, 3)]),
    ("Ab,bc->Ac", [(2, 3), (3, 4)]),
    ("ij,kl->ik", [(2, 3), (4, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ab,bc,ca->", [(2, 3), (3, 4), (4, 2)]),
    ("i,j,k->ijk", [(2,), (3,), (4,)]),
    ("ij,ij->ij", [(2, 3), (2, 3)]),
    ("ijk,jil->kl", [(2, 3, 4), (3, 2, 5)]),
    ("i j , j k -> i k", [(2, 3), (3, 4)]),
    (",i->i", [(), (3,)]),
    ("ij,j", [(0, 3), (3,)]),
]


def _operands(shapes, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen, dtype=dtype) for s in shapes]


@pytest.mark.parametrize("equation,shapes", CASES, ids=[c[0] for c in CASES])
def test_forward_and_gradients_match_torch(equation, shapes, device):
    ref = [t.requires_grad_() for t in _operands(shapes)]
    ours = [to_genesis(t, device, requires_grad=True) for t in ref]
    expected = torch.einsum(equation, *ref)
    got = genesis.einsum(equation, *ours)
    assert_close(to_torch(got), expected.detach())
    upstream = torch.randn(expected.shape, generator=torch.Generator().manual_seed(1))
    expected.backward(upstream)
    got.backward(to_genesis(upstream, device))
    for r, o in zip(ref, ours):
        assert_close(to_torch(o.grad), r.grad)


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ii->i", [(3, 3)]),
    ("bij,bjk->bki", [(2, 2, 3), (2, 3, 2)]),
    ("...i,...i->...", [(2, 3), (1, 3)]),
    ("ab,bc,ca->", [(2, 3), (3, 2), (2, 2)]),
    ("iji->j", [(2, 3, 2)]),
])
def test_gradcheck_float64(equation, shapes):
    inputs = tuple(to_genesis(t, requires_grad=True) for t in _operands(shapes, torch.float64))
    assert gradcheck(lambda *ops: genesis.einsum(equation, *ops), inputs)


def test_list_form_and_non_contiguous_operands():
    a, b = _operands([(4, 3), (3, 5)])
    ga, gb = to_genesis(a).t(), to_genesis(b)  # (3, 4), non-contiguous
    assert_close(to_torch(genesis.einsum("ji,jk->ik", [ga, gb])),
                 torch.einsum("ji,jk->ik", [a.t(), b]))
    assert_close(to_torch(genesis.einsum("ii", to_genesis(a)[:3].t())),
                 torch.einsum("ii", a[:3].t()))


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(2, 3)]),
    ("ij", [(2, 3), (2, 3)]),
    ("ij,jk->iz", [(2, 3), (3, 4)]),
    ("ij,jk->ii", [(2, 3), (3, 4)]),
    ("ijk,jk", [(2, 3), (3, 4)]),
    ("ij,ik->ij", [(2, 3), (3, 4)]),
    ("i1,jk", [(2, 3), (3, 4)]),
    ("ii->i", [(2, 3)]),
    ("i.j", [(2, 3)]),
    ("......", [(2, 3)]),
    ("ij->j->k", [(2, 3)]),
])
def test_errors_match_torch(equation, shapes):
    ref = _operands(shapes)
    with pytest.raises(RuntimeError) as expected:
        torch.einsum(equation, *ref)
    with pytest.raises(RuntimeError) as got:
        genesis.einsum(equation, *[to_genesis(t) for t in ref])
    message = str(got.value)
    assert message.startswith(str(expected.value).split(" (")[0].split(" and no")[0]), message


def test_bad_operands_are_named():
    a = genesis.ones(2, 3)
    with pytest.raises(RuntimeError, match="float32.*operand 1 is genesis.float64"):
        genesis.einsum("ij,jk", a, genesis.ones(3, 2, dtype=genesis.float64))
    with pytest.raises(RuntimeError, match="at least one operand"):
        genesis.einsum("ij")
    with pytest.raises(TypeError, match="operand 1 must be a Tensor"):
        genesis.einsum("ij,jk", a, [[1.0]])
    with pytest.raises(RuntimeError,
                       match=r"ellipsis dim has size 3 .*size 2 \(operand 1 has shape \(3, 4\)"):
        genesis.einsum("...i,...i", genesis.ones(2, 4), genesis.ones(3, 4))
