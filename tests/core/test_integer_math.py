"""Integer arithmetic is exact and raises torch's errors, on every device (issue 32).

Values beyond 2**24 (float32's exact integers) and 2**53 (float64's) catch any float round
trip: a quotient, remainder, power or sum that went through floats comes out a few units
off. The reference is torch on the CPU; integer results are compared exactly.

Division by an integer zero: torch's CPU kernels raise ``RuntimeError: ZeroDivisionError``;
torch's CUDA kernels give an unspecified value and no error (checking would need the data
on the host). Genesis does the same per device: the CPU and the toy plugin (CPU kernels)
raise, CUDA does not.
"""

from __future__ import annotations

import pytest
import torch

import genesis

BIG = [123456789012, -123456789012, 2**53 + 1, -(2**53) - 3, 2**62 + 12345, -(2**62) - 7,
       7, -7, 0, 9007199254740993, -1]
DIVISORS = [7, 7, 3, -3, 1000003, -97, -2, 2, 5, 10, -1]
INT32 = [2**30 + 1, -(2**30) - 5, 2**24 + 1, -(2**24) - 1, 2**31 - 1, -(2**31), 13, -13]
INT32_DIVISORS = [3, 3, -7, 7, 2, 9, -4, -1]


def _pair(values, dtype, device):
    t = torch.tensor(values, dtype=dtype)
    return genesis.tensor(t.numpy(), device=device), t


def _same(got, expected):
    assert got.dtype == getattr(genesis, str(expected.dtype).removeprefix("torch."))
    torch.testing.assert_close(torch.from_numpy(got.cpu().numpy()), expected, rtol=0, atol=0)


_DIVISIONS = {
    "trunc": lambda lib, a, b: lib.div(a, b, rounding_mode="trunc"),
    "floor": lambda lib, a, b: lib.div(a, b, rounding_mode="floor"),
    "floordiv_operator": lambda lib, a, b: a // b,
    "remainder": lambda lib, a, b: lib.remainder(a, b),
    "mod_operator": lambda lib, a, b: a % b,
}


@pytest.mark.parametrize("op", list(_DIVISIONS))
@pytest.mark.parametrize("dtype,values,divisors", [
    (torch.int64, BIG, DIVISORS), (torch.int32, INT32, INT32_DIVISORS)], ids=["int64", "int32"])
def test_integer_division_is_exact_beyond_float_precision(device, op, dtype, values, divisors):
    fn = _DIVISIONS[op]
    a, ta = _pair(values, dtype, device)
    b, tb = _pair(divisors, dtype, device)
    _same(fn(genesis, a, b), fn(torch, ta, tb))
    for scalar in (7, -3, 1000003):  # a Python divisor
        _same(fn(genesis, a, scalar), fn(torch, ta, scalar))


@pytest.mark.parametrize("op", ["trunc", "floor", "remainder"])
def test_integer_division_with_a_python_dividend(device, op):
    fn = _DIVISIONS[op]
    b, tb = _pair(DIVISORS, torch.int64, device)
    _same(fn(genesis, 123456789012345, b), fn(torch, 123456789012345, tb))


def test_the_issue_example(device):
    a = genesis.tensor([123456789012], device=device)
    assert genesis.div(a, 7, rounding_mode="trunc").tolist() == [17636684144]
    assert genesis.div(-a, 7, rounding_mode="trunc").tolist() == [-17636684144]


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16])
@pytest.mark.parametrize("op", ["trunc", "floor", "remainder"])
def test_small_integer_division_edges(device, dtype, op):
    """The most negative value over -1 wraps as in torch; uint8 never rounds below zero."""
    fn = _DIVISIONS[op]
    info = torch.iinfo(dtype)
    values = [info.min, info.max, info.min + 1, 5, 0, info.max - 1]
    signs = [-1, 3, -1, -2, 7, 2] if info.min < 0 else [1, 3, 2, 2, 7, 200]
    a, ta = _pair(values, dtype, device)
    b, tb = _pair(signs, dtype, device)
    _same(fn(genesis, a, b), fn(torch, ta, tb))


@pytest.mark.parametrize("dtype", [genesis.int32, genesis.int64], ids=str)
@pytest.mark.parametrize("divisor", ["tensor", "scalar"])
def test_most_negative_over_minus_one_wraps_instead_of_trapping(device, dtype, divisor):
    """MIN / -1 overflows: x86's division instruction traps (torch's CPU kernel dies of
    SIGFPE, so torch is no reference here). The quotient wraps to MIN, as int8's does in
    torch and as every other integer overflow; the remainder is 0."""
    low = -(2**31) if dtype is genesis.int32 else -(2**63)
    a = genesis.tensor([low, 9, -9], device=device).to(dtype)
    b = genesis.tensor([-1, -1, 2], device=device).to(dtype) if divisor == "tensor" else -1
    last_q, last_t, last_r = (-5, -4, 1) if divisor == "tensor" else (9, 9, 0)
    assert (a // b).tolist() == [low, -9, last_q]
    assert genesis.div(a, b, rounding_mode="trunc").tolist() == [low, -9, last_t]
    assert (a % b).tolist() == [0, 0, last_r]
    inplace = a.clone()
    inplace //= b
    assert inplace.tolist() == [low, -9, last_q]


@pytest.mark.parametrize("op", list(_DIVISIONS))
@pytest.mark.parametrize("divisor", ["tensor", "scalar"])
def test_integer_division_by_zero_matches_torch_per_device(device, op, divisor):
    fn = _DIVISIONS[op]
    a = genesis.tensor([5, -5, 123456789012], device=device)
    b = genesis.tensor([1, 0, 3], device=device) if divisor == "tensor" else 0
    if device.startswith("cuda"):  # as torch on CUDA: no error, an unspecified value
        out = fn(genesis, a, b)
        assert out.shape == a.shape and out.dtype is genesis.int64
        return
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(genesis, a, b)
    ta = torch.tensor([5, -5, 123456789012])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):  # the reference does too
        fn(torch, ta, torch.tensor([1, 0, 3]) if divisor == "tensor" else 0)


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_float_division_by_zero_still_gives_infinities(device, mode):
    a = genesis.tensor([1.0, -1.0, 0.0], device=device)
    got = genesis.div(a, 0.0, rounding_mode=mode).cpu().numpy()
    expected = torch.div(torch.tensor([1.0, -1.0, 0.0]), 0.0, rounding_mode=mode)
    torch.testing.assert_close(torch.from_numpy(got), expected, equal_nan=True)


def test_integer_pow_is_exact(device):
    base, tb = _pair([3, -3, 2, -2, 7, 1, -1, 0], torch.int64, device)
    exp, te = _pair([39, 39, 62, 63, 22, 100, 101, 5], torch.int64, device)
    _same(base ** exp, tb ** te)
    _same(base ** 3, tb ** 3)
    _same(3 ** exp, 3 ** te)
    neg, tn = _pair([-1, -2, -3, -1, -5, -1, -7, -2], torch.int64, device)
    _same(base ** neg, tb ** tn)  # a tensor of negative exponents: 1, -1 or 0, as torch


@pytest.mark.parametrize("dtype", [genesis.int64, genesis.int32, genesis.uint8, genesis.bool])
def test_integer_to_a_negative_python_exponent_raises(device, dtype):
    a = genesis.tensor([1, 2], device=device).to(dtype)
    with pytest.raises(RuntimeError, match="Integers to negative integer powers"):
        a ** -1
    with pytest.raises(RuntimeError, match="Integers to negative integer powers"):
        genesis.pow(a, -2)


def test_mean_of_integers_is_refused(device):
    with pytest.raises(RuntimeError, match="mean\\(\\): could not infer output dtype"):
        genesis.tensor([1, 2], device=device).mean()


@pytest.mark.parametrize("op", ["var", "std", "var_mean", "std_mean"])
def test_variance_of_integers_is_refused_naming_var(device, op):
    with pytest.raises(RuntimeError, match="std and var only support floating point"):
        getattr(genesis, op)(genesis.tensor([1, 2], device=device))


def test_integer_sums_products_and_scans_are_exact(device):
    values = [2**53, 1, 1, -(2**40) - 3, 2**60 + 11, 3]
    a, ta = _pair(values, torch.int64, device)
    _same(a.sum(), ta.sum())
    _same(a.cumsum(0), ta.cumsum(0))
    _same(a.reshape(2, 3).sum(1), ta.reshape(2, 3).sum(1))
    p, tp = _pair([3**20, 3**19, -1, 1], torch.int64, device)
    _same(p.prod(), tp.prod())
    small, ts = _pair([2**30, 2**30, 2**30, -(2**29)], torch.int32, device)
    _same(small.sum(), ts.sum())  # int32 sums in int64, as torch
    _same(small.cumsum(0), ts.cumsum(0))


def test_integer_clamp_and_comparison_are_exact(device):
    a, ta = _pair([2**53 + 1, 2**53 + 2, 5, -(2**62)], torch.int64, device)
    _same(a.clamp(2**53 + 2, 2**60), ta.clamp(2**53 + 2, 2**60))
    _same(a.clamp(max=2**53 + 1), ta.clamp(max=2**53 + 1))
    _same(a == 2**53 + 2, ta == 2**53 + 2)
    _same(genesis.maximum(a, genesis.tensor(2**53 + 2, device=device)),
          torch.maximum(ta, torch.tensor(2**53 + 2)))


def test_integer_arithmetic_with_large_python_scalars(device):
    a, ta = _pair([2**53 + 1, -(2**53) - 1, 3], torch.int64, device)
    for s in (2**53 + 7, -(2**40) - 1):
        _same(a + s, ta + s)
        _same(a - s, ta - s)
        _same(a * 3, ta * 3)
        _same(s - a, s - ta)
