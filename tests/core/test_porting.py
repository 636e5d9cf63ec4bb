"""What a user porting a torch script hits first (core): ops torch has, torch's error
messages, the ``.data`` idiom. The nn side is in ``tests/nn/test_porting_nn.py``."""

from __future__ import annotations

import re

import pytest
import torch

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


# ------------------------------------------------------------- error messages
@pytest.mark.parametrize("data", [[[1, 2], [3]], [[[1, 2], [3, 4]], [[3, 4], [5]]],
                                  [[1.0, 2.0], [3.0, 4.0, 5.0]]])
def test_ragged_data_names_the_dim_and_lengths_as_torch(data):
    with pytest.raises(ValueError) as expected:
        torch.tensor(data)
    _raises(ValueError, f"^{re.escape(str(expected.value))}$", genesis.tensor, data)


@pytest.mark.parametrize("data", [[[1, 2], 3], [1, [2, 3]]])
def test_mixed_nesting_names_the_dim(data):
    _raises(ValueError, "at dim 1", genesis.tensor, data)


def test_ragged_list_of_tensors_names_the_dim():
    _raises(ValueError, r"length 2 at dim 1 \(got 3\)", genesis.tensor,
            [genesis.ones(2), genesis.ones(3)])


@pytest.mark.parametrize("spec", ["float33", "gpu", "tpu:0"])
def test_to_a_string_that_is_no_device_says_so(spec):
    msg = _raises(RuntimeError, f"'{spec}' is neither a valid device.*nor a dtype",
                  genesis.ones(2).to, spec)
    assert "cpu" in msg and "not installed" not in msg


def test_to_a_dtype_name_string_points_at_the_dtype():
    _raises(RuntimeError, "'float16' is not a device.*genesis.float16",
            genesis.ones(2).to, "float16")


def test_unknown_device_type_is_not_a_valid_device():
    msg = _raises(RuntimeError, "'gpu' is not a valid device type", genesis.zeros, 2,
                  device="gpu")
    assert "cpu" in msg


# ------------------------------------------------------------------ .data
@pytest.mark.parametrize("lib", [torch, genesis], ids=["torch", "genesis"])
def test_data_edit_after_forward_keeps_backward_working(lib):
    """``p.data.mul_(0.5)`` (weight decay, EMA, clipping by hand) after a forward that saved
    ``p``: ``.data`` has a version counter of its own, so backward runs on the new values."""
    p = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x = lib.tensor([4.0, 5.0, 6.0], requires_grad=True)
    loss = (p * x).sum()  # Mul saves both p and x
    p.data.mul_(0.5)
    p.data[0] = 10.0  # a view of .data shares .data's counter, still not p's
    loss.backward()
    assert x.grad.tolist() == [10.0, 1.0, 1.5]
    assert p.grad.tolist() == [4.0, 5.0, 6.0]


@pytest.mark.parametrize("lib", [torch, genesis], ids=["torch", "genesis"])
def test_detach_edit_after_forward_is_still_caught(lib):
    p = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
    loss = (p * lib.tensor([4.0, 5.0, 6.0], requires_grad=True)).sum()
    p.detach().mul_(0.5)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
