"""Recurrent layers ``RNN``, ``LSTM`` and ``GRU``: torch's constructor arguments, parameter
names and shapes (a torch state dict loads as is), computed by
``genesis.nn.functional.rnn.rnn_layers``.

Parameters of layer ``k`` are ``weight_ih_l{k}`` ``(G*H, I_k)``, ``weight_hh_l{k}``
``(G*H, H_out)``, ``bias_ih_l{k}``, ``bias_hh_l{k}`` ``(G*H,)`` and, for an LSTM with
``proj_size > 0``, ``weight_hr_l{k}`` ``(P, H)``; the reverse direction adds ``_reverse``.
``G`` is 1 (RNN), 4 (LSTM: i, f, g, o) or 3 (GRU: r, z, n).
"""

from __future__ import annotations

import math
import numbers
import warnings

import genesis
from genesis import Tensor
from genesis.nn import init
from genesis.nn.functional.rnn import GATES, rnn_layers
from genesis.nn.modules.module import Module
from genesis.nn.parameter import Parameter
from genesis.nn.utils.rnn import PackedSequence

__all__ = ["RNNBase", "RNN", "LSTM", "GRU"]


class RNNBase(Module):
    """The shared machinery of ``RNN``, ``LSTM`` and ``GRU`` (use those).

    Args:
        mode: ``"RNN_TANH"``, ``"RNN_RELU"``, ``"LSTM"`` or ``"GRU"``.
        input_size: features of each input step.
        hidden_size: features of the hidden state.
        num_layers: stacked layers.
        bias: learn ``b_ih`` and ``b_hh``.
        batch_first: inputs and outputs are ``(N, L, *)`` instead of ``(L, N, *)`` (the
            hidden states are not affected).
        dropout: dropout on every layer's output except the last, while training.
        bidirectional: run a second, reversed pass and concatenate its features.
        proj_size: LSTM only: project ``h`` to this size (0: no projection).
    """

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None,
                 dtype=None) -> None:
        super().__init__()
        if mode not in GATES:
            raise ValueError(f"Unrecognized RNN mode: {mode}")
        if (not isinstance(dropout, numbers.Number) or isinstance(dropout, bool)
                or not 0 <= dropout <= 1):
            raise ValueError("dropout should be a number in range [0, 1] representing the "
                             "probability of an element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so "
                          f"non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}", stacklevel=2)
        for name, value in (("hidden_size", hidden_size), ("num_layers", num_layers)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable "
                             "projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if proj_size and mode != "LSTM":
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        kw = {"device": device, "dtype": dtype}
        dirs = 2 if bidirectional else 1
        gate_size = GATES[mode] * hidden_size
        out_size = proj_size if proj_size > 0 else hidden_size
        self._flat_weights_names: list[str] = []
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else out_size * dirs
            for d in range(dirs):
                suffix = f"_l{layer}" + ("_reverse" if d == 1 else "")
                shapes = [("weight_ih", (gate_size, layer_input)),
                          ("weight_hh", (gate_size, out_size))]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size > 0:
                    shapes.append(("weight_hr", (proj_size, hidden_size)))
                for stem, shape in shapes:
                    setattr(self, stem + suffix, Parameter(genesis.empty(shape, **kw)))
                    self._flat_weights_names.append(stem + suffix)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """torch's default: every weight and bias ``U(-1/sqrt(H), 1/sqrt(H))``."""
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0.0
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    def flatten_parameters(self) -> None:
        """Does nothing: torch compacts weights for cuDNN here; genesis has no cuDNN."""

    @property
    def _flat_weights(self) -> list[Tensor]:
        return [getattr(self, name) for name in self._flat_weights_names]

    @property
    def all_weights(self) -> list[list[Parameter]]:
        """The parameters grouped per layer and direction, in torch's order."""
        per = len(self._flat_weights_names) // (self.num_layers * (2 if self.bidirectional
                                                                      else 1))
        flat = self._flat_weights
        return [flat[i:i + per] for i in range(0, len(flat), per)]

    def _layer_weights(self) -> list[tuple]:
        """``(w_ih, w_hh, b_ih, b_hh, w_hr)`` per layer and direction (``None`` if absent)."""
        result = []
        for group in self.all_weights:
            w_ih, w_hh = group[0], group[1]
            b_ih, b_hh = (group[2], group[3]) if self.bias else (None, None)
            w_hr = group[-1] if self.proj_size > 0 else None
            result.append((w_ih, w_hh, b_ih, b_hh, w_hr))
        return result

    def _state_shapes(self, batch: int) -> list[tuple[int, ...]]:
        dirs = 2 if self.bidirectional else 1
        out = self.proj_size if self.proj_size > 0 else self.hidden_size
        shapes = [(self.num_layers * dirs, batch, out)]
        if self.mode == "LSTM":
            shapes.append((self.num_layers * dirs, batch, self.hidden_size))
        return shapes

    def _check_input(self, input: Tensor) -> None:
        name = type(self).__name__
        if input.ndim not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.ndim}D "
                             f"tensor of shape {list(input.shape)} instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {input.shape[-1]}")
        weight = self.weight_ih_l0
        autocast = genesis.is_autocast_enabled(input.device.type)  # it reconciles dtypes
        if input.dtype != weight.dtype and not autocast:
            raise TypeError(f"{name}: input dtype {input.dtype} does not match the weights' "
                            f"dtype {weight.dtype}")
        if input.device != weight.device:
            raise RuntimeError(f"{name}: input is on {input.device} but the weights are on "
                               f"{weight.device}")

    def _initial_state(self, hx, batch: int, unbatched: bool, like: Tensor) -> tuple:
        """``hx`` checked against the expected shapes (or zeros), batched, as a tuple."""
        shapes = self._state_shapes(batch)
        if hx is None:
            return tuple(genesis.zeros(s, dtype=like.dtype, device=like.device)
                         for s in shapes)
        if self.mode == "LSTM" and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError(f"LSTM: hx must be a tuple (h_0, c_0), got {type(hx).__name__}")
        states = tuple(hx) if self.mode == "LSTM" else (hx,)
        result = []
        for k, (state, shape) in enumerate(zip(states, shapes)):
            label = f"hidden[{k}]" if self.mode == "LSTM" else "hidden"
            if unbatched:
                if state.ndim != 2:
                    raise RuntimeError(f"For unbatched 2-D input, hx should also be 2-D but "
                                       f"got {state.ndim}-D tensor")
                state = state.unsqueeze(1)
            elif state.ndim != 3:
                raise RuntimeError(f"For batched 3-D input, hx should also be 3-D but got "
                                   f"{state.ndim}-D tensor")
            if tuple(state.shape) != shape:
                raise RuntimeError(f"Expected {label} size {shape}, got {list(state.shape)}")
            mixed = state.dtype != like.dtype and not genesis.is_autocast_enabled(
                like.device.type)
            if mixed or state.device != like.device:
                raise RuntimeError(f"Expected {label} of dtype {like.dtype} on {like.device}, "
                                   f"got {state.dtype} on {state.device}")
            result.append(state)
        return tuple(result)

    def _autocast_states(self, states: tuple, like: Tensor) -> tuple:
        """Under autocast the whole recurrence runs in the low dtype (as torch's fused RNN
        kernels do): the first matmul makes the activations low, so the states follow."""
        device = like.device.type
        if not genesis.is_autocast_enabled(device) or not like.is_floating_point():
            return states
        low = genesis.get_autocast_dtype(device)
        return tuple(s.to(low) for s in states)

    def _run(self, input, hx):
        """The forward pass shared by the three layers: ``(output, final states tuple)``."""
        if isinstance(input, PackedSequence):
            data, sizes = input.data, [int(b) for b in input.batch_sizes.tolist()]
            if data.ndim != 2:
                raise ValueError(f"{type(self).__name__}: packed data must be 2-D "
                                 f"(steps, features), got shape {list(data.shape)}")
            self._check_input(data)
            state = self._initial_state(hx, sizes[0], False, data)
            if input.sorted_indices is not None:
                state = tuple(s.index_select(1, input.sorted_indices) for s in state)
            state = self._autocast_states(state, data)
            out, final = rnn_layers(self.mode, data, sizes, state, self._layer_weights(),
                                    self.num_layers, self.dropout, self.training,
                                    self.bidirectional)
            if input.unsorted_indices is not None:
                final = tuple(s.index_select(1, input.unsorted_indices) for s in final)
            return PackedSequence(out, input.batch_sizes, input.sorted_indices,
                                  input.unsorted_indices), final
        self._check_input(input)
        unbatched = input.ndim == 2
        x = input.unsqueeze(1) if unbatched else input
        if self.batch_first and not unbatched:
            x = x.transpose(0, 1)                                  # (L, N, I)
        steps, batch = x.shape[0], x.shape[1]
        if steps == 0:
            raise RuntimeError(f"Expected sequence length to be larger than 0 in RNN, got "
                               f"input of shape {list(input.shape)}")
        state = self._autocast_states(self._initial_state(hx, batch, unbatched, input), input)
        flat = x.reshape(steps * batch, self.input_size)           # (L*N, I)
        out, final = rnn_layers(self.mode, flat, [batch] * steps, state,
                                self._layer_weights(), self.num_layers, self.dropout,
                                self.training, self.bidirectional)
        out = out.reshape(steps, batch, out.shape[-1])             # (L, N, D*H_out)
        if unbatched:
            return out.squeeze(1), tuple(s.squeeze(1) for s in final)
        if self.batch_first:
            out = out.transpose(0, 1)                              # (N, L, D*H_out)
        return out, final

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s


class RNN(RNNBase):
    """An Elman RNN: ``h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)``.

    Args:
        input_size: features of each input step.
        hidden_size: features of the hidden state.
        num_layers: stacked layers.
        nonlinearity: ``"tanh"`` or ``"relu"``.
        bias: learn ``b_ih`` and ``b_hh``.
        batch_first: inputs and outputs are ``(N, L, *)``.
        dropout: dropout between layers while training.
        bidirectional: add a reversed pass.

    Shape:
        input: ``(L, N, I)`` (``(N, L, I)`` if ``batch_first``), ``(L, I)`` unbatched, or a
        ``PackedSequence``. ``h_0``: ``(D * num_layers, N, H)``. Output: ``(L, N, D * H)``
        and ``h_n`` like ``h_0``.

    Example::

        >>> rnn = genesis.nn.RNN(10, 20, num_layers=2)
        >>> out, h_n = rnn(genesis.randn(5, 3, 10))
        >>> out.shape, h_n.shape
        (genesis.Size([5, 3, 20]), genesis.Size([2, 3, 20]))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, device=None,
                 dtype=None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or "
                             "'relu'.")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size,
                         hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx: Tensor | None = None):
        """Run the sequence; returns ``(output, h_n)``."""
        out, final = self._run(input, hx)
        return out, final[0]


class LSTM(RNNBase):
    """A long short-term memory network (gates input, forget, cell, output).

    Args:
        input_size: features of each input step.
        hidden_size: features of the cell state.
        num_layers: stacked layers.
        bias: learn ``b_ih`` and ``b_hh``.
        batch_first: inputs and outputs are ``(N, L, *)``.
        dropout: dropout between layers while training.
        bidirectional: add a reversed pass.
        proj_size: if > 0, ``h_t`` is projected to this size by ``weight_hr_l{k}``.

    Shape:
        input: as ``RNN``. ``(h_0, c_0)``: ``(D * num_layers, N, H_out)`` and
        ``(D * num_layers, N, H)`` (``H_out`` = ``proj_size`` or ``H``). Output:
        ``(L, N, D * H_out)`` and ``(h_n, c_n)`` like ``(h_0, c_0)``.

    Example::

        >>> lstm = genesis.nn.LSTM(10, 20, batch_first=True, bidirectional=True)
        >>> out, (h_n, c_n) = lstm(genesis.randn(3, 5, 10))
        >>> out.shape, c_n.shape
        (genesis.Size([3, 5, 40]), genesis.Size([2, 3, 20]))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None,
                 dtype=None) -> None:
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, device=device, dtype=dtype)

    def forward(self, input, hx: tuple[Tensor, Tensor] | None = None):
        """Run the sequence; returns ``(output, (h_n, c_n))``."""
        out, (h, c) = self._run(input, hx)
        return out, (h, c)


class GRU(RNNBase):
    """A gated recurrent unit network (gates reset, update, new).

    Args:
        input_size: features of each input step.
        hidden_size: features of the hidden state.
        num_layers: stacked layers.
        bias: learn ``b_ih`` and ``b_hh``.
        batch_first: inputs and outputs are ``(N, L, *)``.
        dropout: dropout between layers while training.
        bidirectional: add a reversed pass.

    Shape:
        as ``RNN``.

    Example::

        >>> gru = genesis.nn.GRU(10, 20)
        >>> out, h_n = gru(genesis.randn(5, 3, 10), genesis.zeros(1, 3, 20))
        >>> out.shape
        genesis.Size([5, 3, 20])
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, device=None, dtype=None) -> None:
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, device=device, dtype=dtype)

    def forward(self, input, hx: Tensor | None = None):
        """Run the sequence; returns ``(output, h_n)``."""
        out, final = self._run(input, hx)
        return out, final[0]
