"""``genesis.multinomial`` / ``Tensor.multinomial``: the draws follow the distribution
(chi-square tests on fixed seeds, so they are deterministic), the shapes and errors are
torch's, and ``manual_seed`` reproduces them. The indices are not torch's: genesis draws
from its own generator stream (what ``docs/porting.md`` says of every random op)."""

from __future__ import annotations

import itertools

import pytest
import torch

import genesis

PROBS = [0.1, 0.2, 0.3, 0.4, 0.0]
# chi-square quantiles at 0.999 (a fixed-seed test only fails on a real bias)
CHI2_999 = {3: 16.27, 11: 31.26}


def _chi_square(counts: list, expected: list) -> float:
    return sum((c - e) ** 2 / e for c, e in zip(counts, expected) if e > 0)


def _counts(values: list, categories: int) -> list:
    return [values.count(k) for k in range(categories)]


def test_with_replacement_follows_the_probabilities(device):
    genesis.manual_seed(0)
    n = 20000
    p = genesis.tensor([w * 3 for w in PROBS], device=device)  # unnormalised weights
    draws = genesis.multinomial(p, n, replacement=True)
    assert draws.shape == (n,) and draws.dtype is genesis.int64
    counts = _counts(draws.cpu().tolist(), len(PROBS))
    assert counts[4] == 0  # a zero weight is never drawn
    assert _chi_square(counts, [w * n for w in PROBS]) < CHI2_999[3]


def test_without_replacement_draws_in_proportion_to_what_is_left(device):
    """P(first=i, second=j) = p_i * p_j / (1 - p_i): the sequential law torch samples."""
    genesis.manual_seed(1)
    rows = 20000
    p = genesis.tensor([PROBS[:4]] * rows, device=device)  # (rows, 4)
    draws = p.multinomial(2)  # (rows, 2)
    assert draws.shape == (rows, 2)
    pairs = [tuple(r) for r in draws.cpu().tolist()]
    assert all(a != b for a, b in pairs)  # no category twice in a row
    cells = list(itertools.permutations(range(4), 2))
    counts = [pairs.count(c) for c in cells]
    expected = [rows * PROBS[i] * PROBS[j] / (1 - PROBS[i]) for i, j in cells]
    assert _chi_square(counts, expected) < CHI2_999[11]


def test_without_replacement_takes_every_category_once():
    genesis.manual_seed(2)
    out = genesis.multinomial(genesis.tensor([[1.0, 2.0, 3.0], [5.0, 0.5, 1.0]]), 3)
    assert sorted(out[0].tolist()) == [0, 1, 2] and sorted(out[1].tolist()) == [0, 1, 2]
    # torch too fills with zero-weight categories once the others are drawn
    assert sorted(genesis.multinomial(genesis.tensor([0.0, 1.0]), 2).tolist()) == [0, 1]


def test_rows_are_independent_and_2d_shapes():
    genesis.manual_seed(3)
    p = genesis.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    out = genesis.multinomial(p, 5, replacement=True)
    assert out.tolist() == [[0] * 5, [2] * 5]
    assert genesis.multinomial(genesis.ones(0, 3), 2, True).shape == (0, 2)


def test_manual_seed_and_generator_reproduce_the_draws():
    p = genesis.tensor([0.2, 0.3, 0.5], dtype=genesis.float64)
    genesis.manual_seed(7)
    a = [genesis.multinomial(p, 8, True).tolist(), genesis.multinomial(p, 3).tolist()]
    genesis.manual_seed(7)
    b = [genesis.multinomial(p, 8, True).tolist(), genesis.multinomial(p, 3).tolist()]
    assert a == b
    g = genesis.Generator().manual_seed(11)
    c = genesis.multinomial(p, 16, True, generator=g).tolist()
    g.manual_seed(11)
    assert p.multinomial(16, replacement=True, generator=g).tolist() == c


def test_half_precision_and_gradient_free_input():
    genesis.manual_seed(4)
    p = genesis.tensor([0.0, 1.0, 0.0], dtype=genesis.bfloat16, requires_grad=True)
    out = genesis.multinomial(p, 4, replacement=True)
    assert out.tolist() == [1, 1, 1, 1] and not out.requires_grad


@pytest.mark.parametrize("probs,n,replacement", [
    ([[0.5, -1.0]], 1, True),
    ([0.5, float("inf")], 1, True),
    ([0.5, float("nan")], 1, False),
    ([0.0, 0.0], 1, True),
    ([[1.0, 1.0], [0.0, 0.0]], 1, False),
    ([0.0, 1.0], 3, False),
    (1.0, 1, False),
    ([[[1.0]]], 1, False),
    ([1.0, 1.0], 0, True),
])
def test_errors_match_torch(probs, n, replacement):
    with pytest.raises(RuntimeError) as expected:
        torch.multinomial(torch.tensor(probs), n, replacement)
    with pytest.raises(RuntimeError) as got:
        genesis.multinomial(genesis.tensor(probs), n, replacement)
    assert str(got.value).startswith(str(expected.value).split(" (")[0])


def test_integer_and_empty_inputs_are_refused():
    with pytest.raises(RuntimeError, match="floating-point"):
        genesis.multinomial(genesis.tensor([1, 2]), 1, True)
    with pytest.raises(RuntimeError, match="no categories"):
        genesis.multinomial(genesis.ones(0), 1, True)
