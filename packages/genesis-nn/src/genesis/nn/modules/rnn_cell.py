"""Single-step recurrent cells ``RNNCell``, ``LSTMCell`` and ``GRUCell`` (torch's parameter
names ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``), computed by the step functions
of ``genesis.nn.functional.rnn``."""

from __future__ import annotations

import math

import genesis
from genesis import Tensor
from genesis.nn import init
from genesis.nn.functional.rnn import gru_cell, lstm_cell, rnn_relu_cell, rnn_tanh_cell
from genesis.nn.modules.module import Module
from genesis.nn.parameter import Parameter

__all__ = ["RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]


class RNNCellBase(Module):
    """Parameters, initialisation and input checks shared by the cells (use those).

    Args:
        input_size: features of the input.
        hidden_size: features of the hidden state.
        bias: learn ``bias_ih`` and ``bias_hh``.
        num_chunks: gate blocks (1 RNN, 4 LSTM, 3 GRU).
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int,
                 device=None, dtype=None) -> None:
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        kw = {"device": device, "dtype": dtype}
        self.weight_ih = Parameter(genesis.empty((num_chunks * hidden_size, input_size), **kw))
        self.weight_hh = Parameter(genesis.empty((num_chunks * hidden_size, hidden_size), **kw))
        if bias:
            self.bias_ih = Parameter(genesis.empty((num_chunks * hidden_size,), **kw))
            self.bias_hh = Parameter(genesis.empty((num_chunks * hidden_size,), **kw))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """torch's default: every weight and bias ``U(-1/sqrt(H), 1/sqrt(H))``."""
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0.0
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    def _batched(self, input: Tensor, hx, count: int) -> tuple[Tensor, tuple, bool]:
        """``(input (B, I), states each (B, H), unbatched)``: checked, zeros for no ``hx``."""
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D "
                             f"tensor of shape {list(input.shape)} instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"{name}: input has inconsistent input_size: got "
                               f"{input.shape[-1]} expected {self.input_size}")
        autocast = genesis.is_autocast_enabled(input.device.type)  # it reconciles dtypes
        if input.dtype != self.weight_ih.dtype and not autocast:
            raise TypeError(f"{name}: input dtype {input.dtype} does not match the weights' "
                            f"dtype {self.weight_ih.dtype}")
        unbatched = input.ndim == 1
        x = input.unsqueeze(0) if unbatched else input             # (B, I)
        if hx is None:
            zeros = genesis.zeros((x.shape[0], self.hidden_size), dtype=x.dtype,
                                  device=x.device)
            return x, (zeros,) * count, unbatched
        states = tuple(hx) if count > 1 else (hx,)
        if len(states) != count:
            raise TypeError(f"{name}: hx must be a tuple of {count} tensors")
        checked = []
        for k, h in enumerate(states):
            if h.ndim != input.ndim:
                raise ValueError(f"{name}: Expected hidden to be {input.ndim}D like the "
                                 f"input, got {h.ndim}D tensor of shape {list(h.shape)}")
            h = h.unsqueeze(0) if unbatched else h                 # (B, H)
            if h.shape[0] != x.shape[0]:
                raise RuntimeError(f"{name}: Input batch size {x.shape[0]} doesn't match "
                                   f"hidden{k} batch size {h.shape[0]}")
            if h.shape[1] != self.hidden_size:
                raise RuntimeError(f"{name}: hidden{k} has inconsistent hidden_size: got "
                                   f"{h.shape[1]}, expected {self.hidden_size}")
            checked.append(h)
        return x, tuple(checked), unbatched

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s


class RNNCell(RNNCellBase):
    """One Elman step: ``h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``.

    Args:
        input_size: features of the input.
        hidden_size: features of the hidden state.
        bias: learn ``bias_ih`` and ``bias_hh``.
        nonlinearity: ``"tanh"`` or ``"relu"``.

    Shape:
        input ``(N, I)`` or ``(I,)``; hx and output ``(N, H)`` or ``(H,)``.

    Example::

        >>> cell = genesis.nn.RNNCell(10, 20)
        >>> cell(genesis.randn(3, 10)).shape
        genesis.Size([3, 20])
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device=None, dtype=None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        super().__init__(input_size, hidden_size, bias, 1, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        """One step; returns ``h'``."""
        x, (h,), unbatched = self._batched(input, hx, 1)
        step = rnn_tanh_cell if self.nonlinearity == "tanh" else rnn_relu_cell
        out = step(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return out.squeeze(0) if unbatched else out


class LSTMCell(RNNCellBase):
    """One LSTM step (gates input, forget, cell, output).

    Args:
        input_size: features of the input.
        hidden_size: features of the hidden and cell states.
        bias: learn ``bias_ih`` and ``bias_hh``.

    Shape:
        input ``(N, I)`` or ``(I,)``; ``hx = (h, c)`` and the output pair ``(N, H)`` each.

    Example::

        >>> cell = genesis.nn.LSTMCell(10, 20)
        >>> h, c = cell(genesis.randn(3, 10))
        >>> c.shape
        genesis.Size([3, 20])
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, 4, device=device, dtype=dtype)

    def forward(self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None
                ) -> tuple[Tensor, Tensor]:
        """One step; returns ``(h', c')``."""
        x, state, unbatched = self._batched(input, hx, 2)
        h, c = lstm_cell(x, state, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return (h.squeeze(0), c.squeeze(0)) if unbatched else (h, c)


class GRUCell(RNNCellBase):
    """One GRU step (gates reset, update, new).

    Args:
        input_size: features of the input.
        hidden_size: features of the hidden state.
        bias: learn ``bias_ih`` and ``bias_hh``.

    Shape:
        input ``(N, I)`` or ``(I,)``; hx and output ``(N, H)`` or ``(H,)``.

    Example::

        >>> cell = genesis.nn.GRUCell(10, 20)
        >>> cell(genesis.randn(3, 10), genesis.zeros(3, 20)).shape
        genesis.Size([3, 20])
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, 3, device=device, dtype=dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        """One step; returns ``h'``."""
        x, (h,), unbatched = self._batched(input, hx, 1)
        out = gru_cell(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return out.squeeze(0) if unbatched else out
