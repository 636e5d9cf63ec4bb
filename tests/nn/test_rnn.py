"""RNN, LSTM, GRU and their cells against torch with the same weights copied in: outputs,
final states, and the gradients of the input, the initial states and every parameter."""

from __future__ import annotations

import pytest
import torch
from device_params import cpu, to_genesis, to_torch, torch_device
from torch.testing import assert_close

import genesis
import genesis.nn as nn
from genesis.nn.functional.rnn import gru_cell, lstm_cell, rnn_relu_cell, rnn_tanh_cell
from genesis.testing import gradcheck


def _copy_module(t_mod: torch.nn.Module, g_mod: nn.Module, device: str) -> None:
    """Load ``t_mod``'s state dict into ``g_mod`` (the names and shapes must agree)."""
    state = {k: to_genesis(v, device) for k, v in t_mod.state_dict().items()}
    g_mod.load_state_dict(state)
    assert [n for n, _ in g_mod.named_parameters()] == [n for n, _ in t_mod.named_parameters()]


def _compare_grads(t_mod, g_mod, t_inputs, g_inputs) -> None:
    for (name, tp), (_, gp) in zip(t_mod.named_parameters(), g_mod.named_parameters()):
        assert gp.grad is not None, name
        assert_close(to_torch(gp.grad), cpu(tp.grad), msg=lambda m, n=name: f"{n}: {m}")
    for t, g in zip(t_inputs, g_inputs):
        assert_close(to_torch(g.grad), cpu(t.grad))


def _leaf(t: torch.Tensor, device: str):
    """The same values as a torch leaf on the torch device and a genesis leaf on ``device``."""
    t = t.detach().clone().to(torch_device(device)).requires_grad_(True)
    return t, to_genesis(t, device, requires_grad=True)


CONFIGS = [
    # (class, kwargs, with initial state)
    ("RNN", {}, False),
    ("RNN", {"nonlinearity": "relu", "num_layers": 2, "batch_first": True}, True),
    ("RNN", {"bidirectional": True, "bias": False}, True),
    ("LSTM", {}, True),
    ("LSTM", {"num_layers": 2, "bidirectional": True, "batch_first": True}, True),
    ("LSTM", {"proj_size": 3, "num_layers": 2}, True),
    ("LSTM", {"proj_size": 2, "bidirectional": True, "bias": False}, False),
    ("GRU", {}, False),
    ("GRU", {"num_layers": 3, "bidirectional": True}, True),
    ("GRU", {"batch_first": True, "dropout": 0.0, "num_layers": 2}, True),
]
SEQ_LEN = {"GRU": 1}  # the plain GRU runs one step: the input gates split into one piece


def _states(kind: str, t_mod, batch: int, unbatched: bool = False):
    dirs = 2 if t_mod.bidirectional else 1
    out = t_mod.proj_size if getattr(t_mod, "proj_size", 0) else t_mod.hidden_size
    shapes = [(t_mod.num_layers * dirs, batch, out)]
    if kind == "LSTM":
        shapes.append((t_mod.num_layers * dirs, batch, t_mod.hidden_size))
    if unbatched:
        shapes = [(s[0], s[2]) for s in shapes]
    return [torch.randn(*s, dtype=torch.float64) for s in shapes]


def _pack_hx(kind, states):
    return None if not states else (tuple(states) if kind == "LSTM" else states[0])


@pytest.mark.parametrize("kind,kwargs,with_hx", CONFIGS)
def test_matches_torch_forward_and_backward(kind, kwargs, with_hx, device):
    torch.manual_seed(0)
    t_mod = getattr(torch.nn, kind)(4, 5, **kwargs).double().to(torch_device(device))
    g_mod = getattr(nn, kind)(4, 5, dtype=genesis.float64, device=device, **kwargs)
    _copy_module(t_mod, g_mod, device)
    steps = SEQ_LEN.get(kind, 6) if not kwargs else 6
    shape = (2, steps, 4) if kwargs.get("batch_first") else (steps, 2, 4)
    t_x, g_x = _leaf(torch.randn(*shape, dtype=torch.float64), device)
    pairs = [_leaf(s, device) for s in _states(kind, t_mod, 2)] if with_hx else []
    t_hx, g_hx = [p[0] for p in pairs], [p[1] for p in pairs]
    t_out, t_state = t_mod(t_x, _pack_hx(kind, t_hx))
    g_out, g_state = g_mod(g_x, _pack_hx(kind, g_hx))
    t_state = t_state if kind == "LSTM" else (t_state,)
    g_state = g_state if kind == "LSTM" else (g_state,)
    assert_close(to_torch(g_out), cpu(t_out))
    for g, t in zip(g_state, t_state):
        assert_close(to_torch(g), cpu(t))
    # one backward through the output and every final state
    t_loss = (t_out * t_out.detach().cos()).sum() + sum((s * 1.5).sum() for s in t_state)
    g_loss = (g_out * g_out.detach().cos()).sum() + sum((s * 1.5).sum() for s in g_state)
    t_loss.backward()
    g_loss.backward()
    _compare_grads(t_mod, g_mod, [t_x, *t_hx], [g_x, *g_hx])


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_float32_unbatched_matches_torch(kind):
    torch.manual_seed(1)
    t_mod = getattr(torch.nn, kind)(3, 4, num_layers=2, bidirectional=True)
    g_mod = getattr(nn, kind)(3, 4, num_layers=2, bidirectional=True)
    _copy_module(t_mod, g_mod, "cpu")
    x = torch.randn(5, 3)
    states = [s.float() for s in _states(kind, t_mod, 1, unbatched=True)]
    t_out, t_state = t_mod(x, _pack_hx(kind, states))
    g_out, g_state = g_mod(to_genesis(x), _pack_hx(kind, [to_genesis(s) for s in states]))
    assert_close(to_torch(g_out), t_out.detach())
    t_state = t_state if kind == "LSTM" else (t_state,)
    g_state = g_state if kind == "LSTM" else (g_state,)
    for g, t in zip(g_state, t_state):
        assert tuple(g.shape) == tuple(t.shape)
        assert_close(to_torch(g), t.detach())


@pytest.mark.parametrize("kind,kwargs", [
    ("LSTM", {"num_layers": 2, "bidirectional": True}),
    ("GRU", {"batch_first": True, "bidirectional": True}),
    ("RNN", {"num_layers": 2}),
    ("LSTM", {"proj_size": 2, "batch_first": True}),
])
def test_packed_unsorted_input_matches_torch(kind, kwargs, device):
    """``enforce_sorted=False`` with unsorted lengths: the packed output, the final states
    (in the original batch order) and all gradients agree with torch."""
    torch.manual_seed(2)
    bf = kwargs.get("batch_first", False)
    t_mod = getattr(torch.nn, kind)(3, 4, **kwargs).double().to(torch_device(device))
    g_mod = getattr(nn, kind)(3, 4, dtype=genesis.float64, device=device, **kwargs)
    _copy_module(t_mod, g_mod, device)
    lengths = [3, 6, 1, 4]
    shape = (4, 6, 3) if bf else (6, 4, 3)
    t_x, g_x = _leaf(torch.randn(*shape, dtype=torch.float64), device)
    pairs = [_leaf(s, device) for s in _states(kind, t_mod, 4)]
    t_hx, g_hx = [p[0] for p in pairs], [p[1] for p in pairs]
    t_packed = torch.nn.utils.rnn.pack_padded_sequence(t_x, lengths, batch_first=bf,
                                                       enforce_sorted=False)
    g_packed = nn.utils.rnn.pack_padded_sequence(g_x, lengths, batch_first=bf,
                                                 enforce_sorted=False)
    assert_close(to_torch(g_packed.data), cpu(t_packed.data))
    assert g_packed.batch_sizes.tolist() == t_packed.batch_sizes.tolist()
    t_out, t_state = t_mod(t_packed, _pack_hx(kind, t_hx))
    g_out, g_state = g_mod(g_packed, _pack_hx(kind, g_hx))
    assert isinstance(g_out, nn.utils.rnn.PackedSequence)
    assert_close(to_torch(g_out.data), cpu(t_out.data))
    t_pad, t_len = torch.nn.utils.rnn.pad_packed_sequence(t_out, batch_first=bf,
                                                          padding_value=-1.0, total_length=7)
    g_pad, g_len = nn.utils.rnn.pad_packed_sequence(g_out, batch_first=bf, padding_value=-1.0,
                                                    total_length=7)
    assert_close(to_torch(g_pad), cpu(t_pad))
    assert g_len.tolist() == t_len.tolist() == lengths
    t_state = t_state if kind == "LSTM" else (t_state,)
    g_state = g_state if kind == "LSTM" else (g_state,)
    for g, t in zip(g_state, t_state):
        assert_close(to_torch(g), cpu(t))
    t_loss = (t_pad * t_pad.detach().sin()).sum() + sum(s.sum() * 0.5 for s in t_state)
    g_loss = (g_pad * g_pad.detach().sin()).sum() + sum(s.sum() * 0.5 for s in g_state)
    t_loss.backward()
    g_loss.backward()
    _compare_grads(t_mod, g_mod, [t_x, *t_hx], [g_x, *g_hx])


def test_torch_state_dict_keys_and_shapes_port():
    t_mod = torch.nn.LSTM(6, 8, num_layers=2, bidirectional=True, proj_size=3)
    g_mod = nn.LSTM(6, 8, num_layers=2, bidirectional=True, proj_size=3)
    t_shapes = {k: tuple(v.shape) for k, v in t_mod.state_dict().items()}
    g_shapes = {k: tuple(v.shape) for k, v in g_mod.state_dict().items()}
    assert list(g_shapes) == list(t_shapes) and g_shapes == t_shapes
    assert len(g_mod.all_weights) == 4 and len(g_mod.all_weights[0]) == 5
    g_mod.flatten_parameters()  # a no-op that torch scripts call
    bound = 1 / 8 ** 0.5
    assert all(float(p.abs().max()) <= bound for p in g_mod.parameters())


# ------------------------------------------------------------------------------ cells
@pytest.mark.parametrize("kind,kwargs", [("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu"}),
                                         ("LSTMCell", {}), ("GRUCell", {}),
                                         ("GRUCell", {"bias": False})])
@pytest.mark.parametrize("batched", [True, False])
def test_cells_match_torch(kind, kwargs, batched, device):
    torch.manual_seed(3)
    t_mod = getattr(torch.nn, kind)(3, 5, **kwargs).double().to(torch_device(device))
    g_mod = getattr(nn, kind)(3, 5, dtype=genesis.float64, device=device, **kwargs)
    _copy_module(t_mod, g_mod, device)
    lead = (4,) if batched else ()
    t_x, g_x = _leaf(torch.randn(*lead, 3, dtype=torch.float64), device)
    count = 2 if kind == "LSTMCell" else 1
    pairs = [_leaf(torch.randn(*lead, 5, dtype=torch.float64), device) for _ in range(count)]
    t_hx, g_hx = [p[0] for p in pairs], [p[1] for p in pairs]
    t_out = t_mod(t_x, tuple(t_hx) if count == 2 else t_hx[0])
    g_out = g_mod(g_x, tuple(g_hx) if count == 2 else g_hx[0])
    t_out = t_out if count == 2 else (t_out,)
    g_out = g_out if count == 2 else (g_out,)
    for g, t in zip(g_out, t_out):
        assert_close(to_torch(g), cpu(t))
    sum((t * t.detach().cos()).sum() for t in t_out).backward()
    sum((g * g.detach().cos()).sum() for g in g_out).backward()
    _compare_grads(t_mod, g_mod, [t_x, *t_hx], [g_x, *g_hx])
    assert tuple(g_mod(g_x).__getitem__(0).shape if count == 2 else g_mod(g_x).shape) == (
        *lead, 5)


@pytest.mark.parametrize("cell,gates,pair", [(rnn_tanh_cell, 1, False),
                                             (rnn_relu_cell, 1, False),
                                             (lstm_cell, 4, True), (gru_cell, 3, False)])
def test_cells_gradcheck_float64(cell, gates, pair):
    genesis.manual_seed(0)

    def leaf(*shape):
        return genesis.randn(*shape, dtype=genesis.float64, requires_grad=True)

    x, h, c = leaf(2, 3), leaf(2, 4), leaf(2, 4)
    w_ih, w_hh, b_ih, b_hh = leaf(gates * 4, 3), leaf(gates * 4, 4), leaf(gates * 4), leaf(
        gates * 4)
    if pair:
        def fn(x, h, c, *w):
            return genesis.cat(list(cell(x, (h, c), *w)), 1)
        assert gradcheck(fn, (x, h, c, w_ih, w_hh, b_ih, b_hh))
    else:
        assert gradcheck(cell, (x, h, w_ih, w_hh, b_ih, b_hh))


# ---------------------------------------------------------------------------- bad input
def _raises(exc, pattern, fn, *args, **kwargs):
    with pytest.raises(exc, match=pattern):
        fn(*args, **kwargs)


def test_bad_inputs_have_clear_errors():
    lstm = nn.LSTM(4, 5, num_layers=2)
    _raises(RuntimeError, r"input.size\(-1\) must be equal to input_size. Expected 4, got 3",
            lstm, genesis.randn(6, 2, 3))
    _raises(ValueError, "Expected input to be 2D or 3D, got 4D", lstm, genesis.randn(1, 6, 2, 4))
    _raises(RuntimeError, "Expected sequence length to be larger than 0", lstm,
            genesis.randn(0, 2, 4))
    _raises(RuntimeError, r"Expected hidden\[0\] size \(2, 2, 5\), got \[1, 2, 5\]", lstm,
            genesis.randn(6, 2, 4), (genesis.zeros(1, 2, 5), genesis.zeros(2, 2, 5)))
    _raises(RuntimeError, r"Expected hidden\[1\] size \(2, 2, 5\), got \[2, 3, 5\]", lstm,
            genesis.randn(6, 2, 4), (genesis.zeros(2, 2, 5), genesis.zeros(2, 3, 5)))
    _raises(TypeError, r"hx must be a tuple \(h_0, c_0\), got Tensor", lstm,
            genesis.randn(6, 2, 4), genesis.zeros(2, 2, 5))
    _raises(RuntimeError, "hx should also be 2-D", nn.GRU(4, 5), genesis.randn(6, 4),
            genesis.zeros(1, 1, 5))
    _raises(TypeError, "input dtype genesis.float64 does not match", nn.RNN(4, 5),
            genesis.randn(6, 2, 4, dtype=genesis.float64))
    _raises(ValueError, "Unknown nonlinearity 'sigmoid'", nn.RNN, 4, 5, nonlinearity="sigmoid")
    _raises(ValueError, "proj_size has to be smaller than hidden_size", nn.LSTM, 4, 5,
            proj_size=5)
    _raises(ValueError, "dropout should be a number in range", nn.GRU, 4, 5, dropout=1.5)
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.GRU(4, 5, dropout=0.5)
    cell = nn.LSTMCell(4, 5)
    _raises(RuntimeError, "input has inconsistent input_size: got 3 expected 4", cell,
            genesis.randn(2, 3))
    _raises(RuntimeError, "Input batch size 2 doesn't match hidden0 batch size 3", cell,
            genesis.randn(2, 4), (genesis.zeros(3, 5), genesis.zeros(3, 5)))
    _raises(RuntimeError, "hidden1 has inconsistent hidden_size: got 6, expected 5", cell,
            genesis.randn(2, 4), (genesis.zeros(2, 5), genesis.zeros(2, 6)))


def test_dropout_between_layers_only_while_training():
    genesis.manual_seed(0)
    gru = nn.GRU(3, 4, num_layers=2, dropout=0.5)
    x = genesis.randn(5, 2, 3)
    gru.eval()
    first = gru(x)[0]
    assert genesis.equal(first, gru(x)[0])
    gru.train()
    assert not genesis.equal(first, gru(x)[0])


# ------------------------------------------------------------------------ nn.utils.rnn
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_sequence_matches_torch(batch_first, side):
    seqs = [torch.randn(n, 2, requires_grad=True) for n in (2, 5, 3)]
    g_seqs = [to_genesis(s, requires_grad=True) for s in seqs]
    t = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=batch_first, padding_value=7.0,
                                        padding_side=side)
    g = nn.utils.rnn.pad_sequence(g_seqs, batch_first=batch_first, padding_value=7.0,
                                  padding_side=side)
    assert_close(to_torch(g), t.detach())
    (t * t.detach()).sum().backward()
    (g * g.detach()).sum().backward()
    for ts, gs in zip(seqs, g_seqs):
        assert_close(to_torch(gs.grad), ts.grad)


def test_pack_sequence_and_unpack_round_trip_like_torch():
    seqs = [torch.randn(n, 3) for n in (2, 5, 3)]
    t = torch.nn.utils.rnn.pack_sequence(seqs, enforce_sorted=False)
    g = nn.utils.rnn.pack_sequence([to_genesis(s) for s in seqs], enforce_sorted=False)
    assert_close(to_torch(g.data), t.data)
    assert g.batch_sizes.tolist() == t.batch_sizes.tolist()
    assert g.sorted_indices.tolist() == t.sorted_indices.tolist()
    assert g.unsorted_indices.tolist() == t.unsorted_indices.tolist()
    for got, want in zip(nn.utils.rnn.unpack_sequence(g), seqs):
        assert_close(to_torch(got), want)
    padded = nn.utils.rnn.pad_sequence([to_genesis(s) for s in seqs])
    for got, want in zip(nn.utils.rnn.unpad_sequence(padded, [2, 5, 3]), seqs):
        assert_close(to_torch(got), want)
    perm = genesis.tensor([2, 0, 3, 1])
    assert nn.utils.rnn.invert_permutation(perm).tolist() == [1, 3, 0, 2]
    assert g.to(genesis.float64).data.dtype is genesis.float64
    assert g.to("cpu") is g and not g.is_cuda


def test_packing_without_feature_dims_matches_torch():
    x = torch.randn(5, 3)
    t = torch.nn.utils.rnn.pack_padded_sequence(x, [2, 5, 3], enforce_sorted=False)
    g = nn.utils.rnn.pack_padded_sequence(to_genesis(x), [2, 5, 3], enforce_sorted=False)
    assert_close(to_torch(g.data), t.data)
    t_pad, _ = torch.nn.utils.rnn.pad_packed_sequence(t, padding_value=9.0)
    g_pad, _ = nn.utils.rnn.pad_packed_sequence(g, padding_value=9.0)
    assert_close(to_torch(g_pad), t_pad)


def test_packing_errors():
    x = genesis.randn(4, 3, 2)
    _raises(RuntimeError, "must be sorted in decreasing order", nn.utils.rnn.pack_padded_sequence,
            x, [2, 4, 1])
    _raises(RuntimeError, "greater than 0", nn.utils.rnn.pack_padded_sequence, x, [3, 0, 1])
    _raises(ValueError, "Expected `len.lengths.` to be equal to batch_size",
            nn.utils.rnn.pack_padded_sequence, x, [3, 1])
    packed = nn.utils.rnn.pack_padded_sequence(x, [4, 2, 1])
    _raises(ValueError, "total_length=3 and max sequence length being 4",
            nn.utils.rnn.pad_packed_sequence, packed, total_length=3)
    _raises(RuntimeError, "sequence 1 has shape", nn.utils.rnn.pad_sequence,
            [genesis.ones(2, 3), genesis.ones(2, 4)])


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_autocast_runs_the_recurrence_in_the_low_dtype(kind):
    m = getattr(nn, kind)(4, 5, num_layers=2, bidirectional=True)
    x = genesis.randn(6, 2, 4, requires_grad=True)
    with genesis.autocast("cpu", dtype=genesis.bfloat16):
        out, state = m(x)
    states = state if kind == "LSTM" else (state,)
    assert out.dtype is genesis.bfloat16
    assert all(s.dtype is genesis.bfloat16 for s in states)
    out.float().sum().backward()
    assert x.grad.dtype is genesis.float32 and m.weight_hh_l1.grad.dtype is genesis.float32
    with genesis.autocast("cpu", dtype=genesis.bfloat16):  # low input, float32 weights/h_0
        out, _ = m(x.bfloat16(), _pack_hx(kind, [genesis.zeros(4, 2, 5) for _ in states]))
    assert out.dtype is genesis.bfloat16
