"""What a user porting a torch script hits first (core): ops torch has, torch's error
messages, the ``.data`` idiom. The nn side is in ``tests/nn/test_porting_nn.py``."""

from __future__ import annotations

import pytest

import genesis
from genesis.testing import gradcheck


def _raises(exc, pattern, fn, *args, **kwargs):
    with pytest.raises(exc, match=pattern) as info:
        fn(*args, **kwargs)
    return str(info.value)


# ------------------------------------------------------- allclose / bincount
def test_allclose_returns_a_python_bool():
    a = genesis.tensor([1.0, 2.0])
    assert genesis.allclose(a, a + 1e-7) is True
    assert a.allclose(a + 1.0) is False
    assert genesis.allclose(genesis.tensor([float("nan")]), genesis.tensor([float("nan")]),
                            equal_nan=True) is True


def test_isclose_records_no_graph():
    a = genesis.tensor([1.0, 2.0], requires_grad=True)
    out = genesis.isclose(a, a * 1.0)
    assert not out.requires_grad and out.dtype is genesis.bool


def test_bincount_weights_gradient():
    """torch has no gradient for bincount; genesis's is d out[v] / d w[i] = [input[i] == v]."""
    idx = genesis.tensor([0, 2, 0, 3])
    w = genesis.tensor([1.0, 2.0, 3.0, 4.0], dtype=genesis.float64, requires_grad=True)
    upstream = genesis.tensor([1.0, 10.0, 100.0, 1000.0], dtype=genesis.float64)
    (genesis.bincount(idx, w) * upstream).sum().backward()
    assert w.grad.tolist() == [1.0, 100.0, 1.0, 1000.0]
    assert gradcheck(lambda w: genesis.bincount(idx, w, minlength=6), (w.detach()
                                                                       .requires_grad_(),))
