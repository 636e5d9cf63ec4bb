"""Recurrent networks as composites of genesis ops: the cell steps and the layer loop behind
``nn.RNN``, ``nn.LSTM``, ``nn.GRU`` and their cells.

The recurrence is written once over a *time-major flat* sequence: ``flat`` holds the inputs
of every time step one after another, ``(sum_t B_t, I)``, where step ``t`` has ``B_t`` rows
(``batch_sizes[t]``, non-increasing). A padded ``(T, B, I)`` input is the case
``B_t = B``; a ``PackedSequence`` is its ``data`` and ``batch_sizes`` as they are. The input
projection of a layer is one matmul over every step at once; only ``h W_hh^T`` runs per step.
When the batch shrinks (shorter sequences have ended) the finished rows' states are set
aside; they are the final states ``h_n`` of those sequences. The reverse direction walks the
steps backwards, and rows join (from ``h_0``) as their sequence starts.

Every operation is an ordinary differentiable genesis op, so gradients come from autograd on
every backend.
"""

from __future__ import annotations

import genesis
from genesis import Tensor
from genesis.autograd import Function
from genesis.nn.functional.dropout import dropout as _dropout
from genesis.nn.functional.linear import linear

__all__ = ["rnn_tanh_cell", "rnn_relu_cell", "lstm_cell", "gru_cell", "rnn_layers",
           "GATES"]

GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}  # gate blocks in w_ih / w_hh


class _Split(Function):
    """``x.split(sizes, dim)`` whose backward is one ``cat`` of the pieces' gradients.

    Each piece of a plain ``split`` is its own view op, whose backward scatters the piece's
    gradient into zeros of ``x``'s full size: splitting the input gates into ``T`` steps
    would cost ``T`` full-size tensors in backward (quadratic in the sequence length).
    """

    @staticmethod
    def forward(ctx, x, sizes, dim):
        ctx.dim = dim
        return tuple(x.split(sizes, dim))

    @staticmethod
    def backward(ctx, *grads):
        return genesis.cat(list(grads), ctx.dim), None, None


def _split(x: Tensor, sizes: list[int], dim: int) -> tuple:
    """``x.split(sizes, dim)`` as a tuple, with a linear-cost backward (see ``_Split``)."""
    return _Split.apply(x, list(sizes), dim)


def _tanh_step(gi: Tensor, state: tuple, w_hh, b_hh, w_hr) -> tuple:
    h = genesis.tanh(gi + linear(state[0], w_hh, b_hh))            # (B, H)
    return (h,)


def _relu_step(gi: Tensor, state: tuple, w_hh, b_hh, w_hr) -> tuple:
    h = genesis.relu(gi + linear(state[0], w_hh, b_hh))            # (B, H)
    return (h,)


def _lstm_step(gi: Tensor, state: tuple, w_hh, b_hh, w_hr) -> tuple:
    h, c = state
    gates = gi + linear(h, w_hh, b_hh)                             # (B, 4H): i, f, g, o
    i, f, g, o = _split(gates, [gates.shape[1] // 4] * 4, 1)       # (B, H) each
    c = genesis.sigmoid(f) * c + genesis.sigmoid(i) * genesis.tanh(g)   # (B, H)
    h = genesis.sigmoid(o) * genesis.tanh(c)                       # (B, H)
    if w_hr is not None:
        h = linear(h, w_hr)                                        # (B, P)
    return (h, c)


def _gru_step(gi: Tensor, state: tuple, w_hh, b_hh, w_hr) -> tuple:
    h = state[0]
    gh = linear(h, w_hh, b_hh)                                     # (B, 3H): r, z, n
    third = [gi.shape[1] // 3] * 3
    i_r, i_z, i_n = _split(gi, third, 1)                           # (B, H) each
    h_r, h_z, h_n = _split(gh, third, 1)                           # (B, H) each
    r = genesis.sigmoid(i_r + h_r)
    z = genesis.sigmoid(i_z + h_z)
    n = genesis.tanh(i_n + r * h_n)                                # (B, H)
    return (n + z * (h - n),)                                      # (1 - z) n + z h


_STEPS = {"RNN_TANH": _tanh_step, "RNN_RELU": _relu_step, "LSTM": _lstm_step, "GRU": _gru_step}


def rnn_tanh_cell(input: Tensor, hx: Tensor, w_ih: Tensor, w_hh: Tensor,
                  b_ih: Tensor | None = None, b_hh: Tensor | None = None) -> Tensor:
    """One Elman step: ``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)``.

    Args:
        input: ``(B, I)``.
        hx: ``(B, H)``.
        w_ih, w_hh: ``(H, I)`` and ``(H, H)``.
        b_ih, b_hh: ``(H,)`` or ``None``.

    Returns:
        ``h'``, ``(B, H)``.
    """
    return _tanh_step(linear(input, w_ih, b_ih), (hx,), w_hh, b_hh, None)[0]


def rnn_relu_cell(input: Tensor, hx: Tensor, w_ih: Tensor, w_hh: Tensor,
                  b_ih: Tensor | None = None, b_hh: Tensor | None = None) -> Tensor:
    """One Elman step with ReLU: ``h' = relu(x W_ih^T + b_ih + h W_hh^T + b_hh)``.

    Args:
        input: ``(B, I)``.
        hx: ``(B, H)``.
        w_ih, w_hh: ``(H, I)`` and ``(H, H)``.
        b_ih, b_hh: ``(H,)`` or ``None``.

    Returns:
        ``h'``, ``(B, H)``.
    """
    return _relu_step(linear(input, w_ih, b_ih), (hx,), w_hh, b_hh, None)[0]


def lstm_cell(input: Tensor, hx: tuple[Tensor, Tensor], w_ih: Tensor, w_hh: Tensor,
              b_ih: Tensor | None = None, b_hh: Tensor | None = None
              ) -> tuple[Tensor, Tensor]:
    """One LSTM step (gates in torch's order: input, forget, cell, output).

    Args:
        input: ``(B, I)``.
        hx: ``(h, c)``, each ``(B, H)``.
        w_ih, w_hh: ``(4H, I)`` and ``(4H, H)``.
        b_ih, b_hh: ``(4H,)`` or ``None``.

    Returns:
        ``(h', c')``, each ``(B, H)``.
    """
    h, c = _lstm_step(linear(input, w_ih, b_ih), tuple(hx), w_hh, b_hh, None)
    return h, c


def gru_cell(input: Tensor, hx: Tensor, w_ih: Tensor, w_hh: Tensor,
             b_ih: Tensor | None = None, b_hh: Tensor | None = None) -> Tensor:
    """One GRU step (gates in torch's order: reset, update, new).

    Args:
        input: ``(B, I)``.
        hx: ``(B, H)``.
        w_ih, w_hh: ``(3H, I)`` and ``(3H, H)``.
        b_ih, b_hh: ``(3H,)`` or ``None``.

    Returns:
        ``h'``, ``(B, H)``.
    """
    return _gru_step(linear(input, w_ih, b_ih), (hx,), w_hh, b_hh, None)[0]


def _run_forward(step, gi_steps: list, batch_sizes: list[int], state0: tuple, weights):
    """Steps ``0 .. T-1``; returns the per-step outputs and the final state of every row."""
    state, ended, outputs = state0, [], []
    for gi, batch in zip(gi_steps, batch_sizes):
        if batch < state[0].shape[0]:  # rows batch.. have ended: their state is final
            ended.append(tuple(s[batch:] for s in state))
            state = tuple(s[:batch] for s in state)
        state = step(gi, state, *weights)
        outputs.append(state[0])                                   # (B_t, H)
    ended.append(state)
    # the latest-ended rows are the lowest: the final state lists rows 0.. in order
    final = tuple(genesis.cat([part[k] for part in reversed(ended)], 0)
                  for k in range(len(state0)))
    return outputs, final


def _run_reverse(step, gi_steps: list, batch_sizes: list[int], state0: tuple, weights):
    """Steps ``T-1 .. 0``; rows join from ``state0`` when their sequence starts."""
    state = tuple(s[:batch_sizes[-1]] for s in state0)
    outputs = [None] * len(gi_steps)
    for t in range(len(gi_steps) - 1, -1, -1):
        batch, have = batch_sizes[t], state[0].shape[0]
        if batch > have:
            state = tuple(genesis.cat([s, s0[have:batch]], 0) for s, s0 in zip(state, state0))
        state = step(gi_steps[t], state, *weights)
        outputs[t] = state[0]                                      # (B_t, H)
    return outputs, state


def rnn_layers(mode: str, flat: Tensor, batch_sizes: list[int], hx: tuple,
               weights: list, num_layers: int, dropout: float, training: bool,
               bidirectional: bool) -> tuple[Tensor, tuple]:
    """A stack of recurrent layers over a time-major flat sequence (see the module doc).

    Args:
        mode: ``"RNN_TANH"``, ``"RNN_RELU"``, ``"LSTM"`` or ``"GRU"``.
        flat: ``(sum_t B_t, I)``, the steps one after another.
        batch_sizes: ``B_t`` for each step, non-increasing.
        hx: initial states, ``(h_0,)`` or ``(h_0, c_0)``, each ``(L * D, B_0, *)``.
        weights: per layer and direction (forward first), ``(w_ih, w_hh, b_ih, b_hh, w_hr)``
            (``None`` for an absent bias or projection).
        num_layers: ``L``.
        dropout: dropout on each layer's output except the last (while ``training``).
        training: whether dropout is applied.
        bidirectional: ``D = 2`` when true.

    Returns:
        ``(out, final)``: ``out`` is ``(sum_t B_t, D * H_out)``; ``final`` holds tensors
        like ``hx``: every row's state after its last step.
    """
    step = _STEPS[mode]
    dirs = 2 if bidirectional else 1
    finals: list[list] = [[] for _ in hx]
    layer_in = flat
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            w_ih, w_hh, b_ih, b_hh, w_hr = weights[layer * dirs + d]
            gi_steps = _split(linear(layer_in, w_ih, b_ih), batch_sizes, 0)  # (B_t, G*H) each
            state0 = tuple(s[layer * dirs + d] for s in hx)                # (B_0, *) each
            run = _run_reverse if d == 1 else _run_forward
            outputs, final = run(step, gi_steps, batch_sizes, state0, (w_hh, b_hh, w_hr))
            outs.append(genesis.cat(outputs, 0))                           # (sum B_t, H_out)
            for k, s in enumerate(final):
                finals[k].append(s)
        layer_in = outs[0] if dirs == 1 else genesis.cat(outs, 1)          # (sum B_t, D*H)
        if dropout > 0 and training and layer < num_layers - 1:
            layer_in = _dropout(layer_in, dropout, True)
    return layer_in, tuple(genesis.stack(f, 0) for f in finals)           # (L*D, B_0, *)
