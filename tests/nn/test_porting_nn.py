"""What a user porting a torch script hits first (nn side): ``genesis.nn`` and friends
reachable after ``import genesis``, torch's checks and messages in the losses."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import genesis
import genesis.nn.functional as F


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


# ------------------------------------------------------------------ losses
_NAN = float("nan")


@pytest.mark.parametrize(("inp", "tgt", "which"), [
    ([1.5, 0.5], [1.0, 0.0], "input"), ([-0.1, 0.5], [1.0, 0.0], "input"),
    ([_NAN, 0.5], [1.0, 0.0], "input"), ([0.5, 0.5], [2.0, 0.0], "target"),
    ([0.3, 0.5], [_NAN, 0.0], "target")])
def test_binary_cross_entropy_refuses_values_outside_0_1(inp, tgt, which):
    msg = f"all elements of {which} should be between 0 and 1"
    with pytest.raises(RuntimeError, match=msg):
        torch.nn.functional.binary_cross_entropy(torch.tensor(inp), torch.tensor(tgt))
    _raises(RuntimeError, msg, F.binary_cross_entropy, genesis.tensor(inp), genesis.tensor(tgt))


def test_binary_cross_entropy_in_range_still_matches_torch():
    inp, tgt = [0.0, 0.25, 1.0], [0.0, 0.5, 1.0]
    expected = torch.nn.functional.binary_cross_entropy(torch.tensor(inp), torch.tensor(tgt))
    got = F.binary_cross_entropy(genesis.tensor(inp), genesis.tensor(tgt))
    assert abs(got.item() - expected.item()) < 1e-6


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
@pytest.mark.parametrize(("target", "bad"), [([1, 7], 7), ([-3, 0], -3), ([[1, 5, 0]], 5)])
def test_out_of_range_target_names_the_target_and_class_count(loss, target, bad):
    shape = (2, 5) if len(target) == 2 else (1, 5, 3)
    with pytest.raises(IndexError, match=f"Target {bad} is out of bounds."):
        getattr(torch.nn.functional, loss)(torch.zeros(shape), torch.tensor(target))
    msg = _raises(IndexError, f"^Target {bad} is out of bounds.", getattr(F, loss),
                  genesis.zeros(shape), genesis.tensor(target))
    assert "5 classes" in msg and "gather" not in msg


def test_ignored_target_outside_the_classes_is_fine():
    logits = [[0.1, 0.2, 0.3], [1.0, -1.0, 0.5]]
    expected = torch.nn.functional.cross_entropy(torch.tensor(logits), torch.tensor([2, 9]),
                                                 ignore_index=9)
    got = F.cross_entropy(genesis.tensor(logits), genesis.tensor([2, 9]), ignore_index=9)
    assert abs(got.item() - expected.item()) < 1e-6
