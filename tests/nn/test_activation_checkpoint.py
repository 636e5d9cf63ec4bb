"""``genesis.utils.checkpoint``: a checkpointed block gives the gradients of the plain run
(dropout included, from the preserved RNG state), keeps only its inputs for backward,
and follows torch's rules for ``use_reentrant``, keyword arguments and sequences."""

from __future__ import annotations

import pytest
import torch
from device_params import to_genesis, to_torch
from torch.testing import assert_close

import genesis
import genesis.nn as nn
from genesis.utils.checkpoint import checkpoint, checkpoint_sequential


def _block(seed=0, dropout=0.0, device="cpu"):
    genesis.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Dropout(dropout), nn.Linear(16, 6),
                         nn.GELU()).to(device)


def _grads(model, x):
    return [to_torch(p.grad) for p in model.parameters()] + [to_torch(x.grad)]


def _run(model, x, wrap, seed=123):
    genesis.manual_seed(seed)  # the dropout masks drawn in forward
    out = wrap(model, x)
    genesis.manual_seed(seed + 1)  # something else draws before backward's re-run
    genesis.rand(7)
    (out * out).sum().backward()
    return to_torch(out), _grads(model, x)


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_gradients_equal_the_plain_run_with_dropout(use_reentrant, device):
    x_data = torch.randn(4, 6)
    plain_model, ckpt_model = _block(dropout=0.3, device=device), \
        _block(dropout=0.3, device=device)
    x1, x2 = to_genesis(x_data, device, True), to_genesis(x_data, device, True)
    out1, grads1 = _run(plain_model, x1, lambda m, x: m(x))
    out2, grads2 = _run(ckpt_model, x2,
                        lambda m, x: checkpoint(m, x, use_reentrant=use_reentrant))
    assert_close(out2, out1)
    for a, b in zip(grads2, grads1):
        assert_close(a, b)


def test_without_preserved_rng_state_dropout_draws_new_masks():
    x_data = torch.randn(4, 6)
    plain, ckpt = _block(dropout=0.5), _block(dropout=0.5)
    _, grads1 = _run(plain, to_genesis(x_data, requires_grad=True), lambda m, x: m(x))
    _, grads2 = _run(ckpt, to_genesis(x_data, requires_grad=True),
                     lambda m, x: checkpoint(m, x, use_reentrant=False,
                                             preserve_rng_state=False))
    assert not torch.allclose(grads1[0], grads2[0])


def test_matches_torch_checkpoint_without_dropout():
    x_data = torch.randn(3, 6, dtype=torch.float64)
    model = _block().double()
    ref = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Dropout(0.0),
                              torch.nn.Linear(16, 6), torch.nn.GELU()).double()
    with torch.no_grad():
        for p, q in zip(ref.parameters(), model.parameters()):
            p.copy_(to_torch(q))
    x, tx = to_genesis(x_data, requires_grad=True), x_data.clone().requires_grad_()
    checkpoint(model, x, use_reentrant=False).pow(2).sum().backward()
    torch.utils.checkpoint.checkpoint(ref, tx, use_reentrant=False).pow(2).sum().backward()
    for p, q in zip(ref.parameters(), model.parameters()):
        assert_close(to_torch(q.grad), p.grad)
    assert_close(to_torch(x.grad), tx.grad)


def _saved_tensor_count(out) -> int:
    """How many tensors the graph behind ``out`` holds for backward."""
    seen, stack, count = set(), [out.grad_fn], 0
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        count += len([t for t in (getattr(node, "_saved", None) or ()) if t is not None])
        stack.extend(edge[0] for edge in getattr(node, "next_functions", ()) if edge)
    return count


def test_keeps_only_the_inputs_for_backward():
    model, x = _block(), genesis.randn(4, 6, requires_grad=True)
    plain = _saved_tensor_count(model(x))
    kept = _saved_tensor_count(checkpoint(model, x, use_reentrant=False))
    assert kept == 1 and plain > 3  # x alone, against every layer's activations


def test_runs_the_block_twice_and_once_under_no_grad():
    calls = []

    def block(x):
        calls.append(1)
        return (x * x).sin()

    x = genesis.randn(3, requires_grad=True)
    checkpoint(block, x, use_reentrant=True).sum().backward()
    assert len(calls) == 2
    assert_close(to_torch(x.grad), to_torch((2 * x * (x * x).cos()).detach()))
    with genesis.no_grad():
        out = checkpoint(block, x, use_reentrant=False)
    assert len(calls) == 3 and not out.requires_grad


def test_parameters_get_gradients_when_no_input_requires_grad():
    model, x = _block(), genesis.randn(2, 6)
    checkpoint(model, x, use_reentrant=False).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    model2 = _block()
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        out = checkpoint(model2, x, use_reentrant=True)
    assert not out.requires_grad  # as torch's reentrant variant: nothing to differentiate


def test_keyword_arguments_and_mixed_outputs():
    def block(x, scale, *, shift=0.0):
        return x * scale + shift, "label", x.sum()

    x = genesis.randn(3, requires_grad=True)
    y, label, total = checkpoint(block, x, 2.0, shift=1.0, use_reentrant=False)
    assert label == "label"
    (y.sum() + total).backward()
    assert x.grad.tolist() == [3.0, 3.0, 3.0]
    with pytest.raises(ValueError, match="Unexpected keyword arguments: shift"):
        checkpoint(block, x, 2.0, shift=1.0, use_reentrant=True)
    with pytest.raises(ValueError, match="Unexpected keyword arguments"):
        checkpoint(block, x, 2.0, shift=1.0)


@pytest.mark.parametrize("segments", [1, 2, 3, 5])
def test_checkpoint_sequential_equals_the_plain_run(segments):
    def model():
        genesis.manual_seed(0)
        return nn.Sequential(*[m for _ in range(5) for m in (nn.Linear(4, 4), nn.Tanh())])

    x_data = torch.randn(2, 4)
    plain, ckpt = model(), model()
    x1, x2 = to_genesis(x_data, requires_grad=True), to_genesis(x_data, requires_grad=True)
    plain(x1).sum().backward()
    checkpoint_sequential(ckpt, segments, x2, use_reentrant=False).sum().backward()
    for a, b in zip(_grads(ckpt, x2), _grads(plain, x1)):
        assert_close(a, b)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: foo"):
        checkpoint_sequential(ckpt, 2, x2, foo=1)


def test_an_input_edited_in_place_before_backward_is_caught():
    x = genesis.randn(3, requires_grad=True)
    h = x * 2
    out = checkpoint(lambda t: t.sin(), h, use_reentrant=False)
    with genesis.no_grad():
        h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
