"""What a user porting a torch script hits first: names reachable after ``import genesis``,
torch's index dtypes, torch's checks and error messages, the ``.data`` idiom."""

from __future__ import annotations

import subprocess
import sys

import pytest

import genesis
from genesis.testing import gradcheck


def _raises(exc, pattern, fn, *args, **kwargs):
    with pytest.raises(exc, match=pattern) as info:
        fn(*args, **kwargs)
    return str(info.value)


# ------------------------------------------------- sub-packages of other wheels
def test_subpackages_resolve_after_import_genesis():
    """``import genesis`` then ``genesis.nn.Linear`` works, as ``torch.nn`` after ``import torch``
    (a fresh interpreter: in this one another test may already have imported them)."""
    code = ("import genesis\n"
            "print(genesis.nn.Linear.__name__, genesis.optim.AdamW.__name__,"
            " genesis.amp.GradScaler.__name__, genesis.utils.data.DataLoader.__name__,"
            " genesis.profiler.__name__, genesis.nn.functional.relu.__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["Linear", "AdamW", "GradScaler", "DataLoader",
                                  "genesis.profiler", "relu"]


@pytest.mark.parametrize(("name", "dist"), [("models", "genesis-llm"), ("nn", "genesis-nn"),
                                            ("distributed", "genesis-distributed")])
def test_missing_subpackage_names_the_distribution(monkeypatch, name, dist):
    # `None` in sys.modules makes the import fail exactly as an absent package does
    monkeypatch.setitem(sys.modules, f"genesis.{name}", None)
    monkeypatch.delattr(genesis, name, raising=False)
    _raises(AttributeError, f"genesis.{name}.*{dist}.*pip install {dist}",
            getattr, genesis, name)
    assert not hasattr(genesis, name)


def test_unknown_attribute_is_still_an_attribute_error():
    _raises(AttributeError, "no attribute 'not_a_thing'$", getattr, genesis, "not_a_thing")


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
