"""``genesis.testing``: assert_close behaves like torch.testing.assert_close (same default
tolerances, same pass/fail decisions) and gradcheck catches wrong backward formulas."""

from __future__ import annotations

import math

import pytest
import torch
from op_table import FLOATS, INTS, g_dtype, t_dtype

import genesis
from genesis.testing import (
    GradcheckError,
    assert_close,
    default_tolerances,
    gradcheck,
    gradgradcheck,
)


@pytest.mark.parametrize("dtype", FLOATS + INTS + ("bool",))
def test_default_tolerances_are_torchs(dtype):
    from torch.testing._comparison import default_tolerances as torch_defaults

    rtol, atol = torch_defaults(torch.empty(0, dtype=t_dtype(dtype)))
    assert default_tolerances(g_dtype(dtype)) == pytest.approx((rtol, atol))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("scale", [0.3, 0.9, 1.1, 3.0])
def test_pass_fail_decisions_match_torch(dtype, scale):
    """Perturb by a multiple of the allowed error: both must agree on pass/fail."""
    rtol, atol = default_tolerances(g_dtype(dtype))
    base = [0.0, 1.0, -250.0, 1e-3]
    exp_t = torch.tensor(base, dtype=torch.float64)
    act_t = exp_t + scale * (atol + rtol * exp_t.abs())
    exp_t, act_t = exp_t.to(t_dtype(dtype)), act_t.to(t_dtype(dtype))
    exp_g = genesis.tensor(exp_t.double().numpy()).to(g_dtype(dtype))
    act_g = genesis.tensor(act_t.double().numpy()).to(g_dtype(dtype))
    try:
        torch.testing.assert_close(act_t, exp_t)
        torch_ok = True
    except AssertionError:
        torch_ok = False
    try:
        assert_close(act_g, exp_g)
        ours_ok = True
    except AssertionError:
        ours_ok = False
    assert ours_ok == torch_ok


def test_assert_close_checks_and_messages():
    x = genesis.tensor([1.0, 2.0, 3.0])
    assert_close(x, x.clone())
    assert_close(x, torch.tensor([1.0, 2.0, 3.0]))  # a torch expectation is fine
    assert_close([x, 2.0], [x, 2.0])
    assert_close({"a": x}, {"a": x})
    with pytest.raises(AssertionError, match=r"(?s)Mismatched elements: 1 / 3.*index \(2,\)"):
        assert_close(x, genesis.tensor([1.0, 2.0, 3.5]))
    with pytest.raises(AssertionError, match="dtype"):
        assert_close(x, x.double())
    assert_close(x, x.double(), check_dtype=False)
    with pytest.raises(AssertionError, match="shape"):
        assert_close(x, x[:2])
    with pytest.raises(AssertionError, match="not equal"):
        assert_close(genesis.tensor([1, 2]), genesis.tensor([1, 3]))
    nan = genesis.tensor([math.nan, 1.0])
    with pytest.raises(AssertionError):
        assert_close(nan, nan)
    assert_close(nan, nan, equal_nan=True)
    inf = genesis.tensor([math.inf, -math.inf])
    assert_close(inf, inf)
    assert_close(x, x + 0.05, rtol=0.0, atol=0.1)
    with pytest.raises(ValueError, match="rtol"):
        assert_close(x, x, atol=1.0)
    with pytest.raises(AssertionError, match="custom"):
        assert_close(x, x + 1, msg="custom")


def test_gradcheck_passes_correct_and_catches_wrong_backward():
    x = genesis.randn(3, 2, dtype=genesis.float64, requires_grad=True)
    w = genesis.randn(2, dtype=genesis.float64, requires_grad=True)
    assert gradcheck(lambda a, b: (a * b).sin().sum(1), (x, w))
    assert gradgradcheck(lambda a: (a * a * a).sum(), (x,))

    class WrongSquare(genesis.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t * t

        @staticmethod
        def backward(ctx, g):
            (t,) = ctx.saved_tensors
            return g * t  # should be 2 * g * t

    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        gradcheck(WrongSquare.apply, (x,))
    assert gradcheck(WrongSquare.apply, (x,), raise_exception=False) is False
    with pytest.raises(ValueError, match="float64"):
        gradcheck(lambda a: a * 2, (genesis.ones(2, requires_grad=True),))
    with pytest.raises(ValueError, match="requires_grad"):
        gradcheck(lambda a: a * 2, (genesis.ones(2, dtype=genesis.float64),))


def test_gradcheck_handles_views_integer_outputs_and_unused_inputs():
    x = genesis.randn(2, 3, dtype=genesis.float64, requires_grad=True)
    y = genesis.randn(3, dtype=genesis.float64, requires_grad=True)
    assert gradcheck(lambda a, b: a.T.sort(0), (x, y))  # (values, int indices); b unused
    assert gradcheck(lambda a: a.expand(2, 2, 3)[..., ::2], (x,))
