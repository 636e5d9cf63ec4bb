"""Concatenated projection weights for inference: several linears of one input as one matmul.

The q/k/v projections of attention and the gate/up projections of the MLP read the same
input; in inference (not training, no gradient) running them as one matmul over their
weights stacked along the output dim launches one kernel instead of three (two) and keeps
the bias in the matmul's epilogue. The parameters themselves stay separate (the checkpoint
names, training and its gradients are untouched); the stacked copy is kept between calls
and rewritten *in place* when a part changes (a new version from an optimizer step or
``load_state_dict``, or new memory from ``to()``), so a captured CUDA graph that reads it
stays valid.
"""

from __future__ import annotations

import genesis
import genesis.nn.functional as F
from genesis import Tensor

__all__ = ["FusedLinear"]


class FusedLinear:
    """The kept concatenation of some ``nn.Linear`` layers of one input.

    Args:
        linears: the layers, in output order; all with or all without bias.

    Example::

        >>> qkv = FusedLinear([attn.q_proj, attn.k_proj, attn.v_proj])
        >>> q, k, v = qkv(x)          # under genesis.no_grad(), views of one output
    """

    def __init__(self, linears) -> None:
        self.linears = list(linears)
        self.splits = [m.out_features for m in self.linears]
        self._key = self.weight = self.bias = None

    def parts(self) -> list[Tensor]:
        weights = [m.weight for m in self.linears]
        biases = [m.bias for m in self.linears if m.bias is not None]
        return weights + biases

    def refresh(self) -> tuple[Tensor, Tensor | None]:
        """The stacked ``(weight, bias)``, rebuilt (in place when the layout allows) if a
        part's memory, version or dtype has changed since the last call."""
        parts = self.parts()
        key = tuple((t.data_ptr(), t._version, t.dtype) for t in parts)
        if key == self._key:
            return self.weight, self.bias
        n = len(self.linears)
        with genesis.no_grad():
            weight = genesis.cat(parts[:n], dim=0)  # (sum of outputs, in_features)
            bias = genesis.cat(parts[n:], dim=0) if len(parts) > n else None
            if _same_layout(self.weight, weight) and (bias is None
                                                      or _same_layout(self.bias, bias)):
                self.weight.copy_(weight)  # in place: its address may be in a CUDA graph
                if bias is not None:
                    self.bias.copy_(bias)
            else:
                self.weight, self.bias = weight, bias
        self._key = key
        return self.weight, self.bias

    def __call__(self, x: Tensor) -> list[Tensor]:
        """Every layer's output for ``x`` (*, in): views of one ``(*, sum of outputs)``."""
        weight, bias = self.refresh()
        out = F.linear(x, weight, bias)
        views, start = [], 0
        for n in self.splits:
            views.append(out[..., start:start + n])
            start += n
        return views


def _same_layout(old: Tensor | None, new: Tensor) -> bool:
    return (old is not None and old.shape == new.shape and old.dtype is new.dtype
            and old.device == new.device)
