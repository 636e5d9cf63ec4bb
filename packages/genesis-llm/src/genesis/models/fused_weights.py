"""Several linears of one input as one matmul, for inference.

The q/k/v projections of attention and the gate/up projections of the MLP read the same
input; in inference (not training, no gradient) running them as one matmul over their
weights stacked along the output dim launches one kernel instead of three (two) and keeps
the bias in the matmul's epilogue.

The layers keep their own parameters (the checkpoint names, training and its gradients are
untouched), but ``FusedLinear`` makes them *views of one buffer* (``share``): the stacked
weight then costs no memory and always holds the current values (an optimizer step or
``load_state_dict`` writes into it), and its address never changes, so a captured CUDA
graph that reads it stays valid. ``Module.to`` replaces each parameter's data;
``QwenForCausalLM`` shares them again afterwards. Should the layers have memory of their own
anyway (a parameter's ``data`` set by hand, or by FSDP's all-gather before each evaluation),
the fused call either keeps a stacked copy, rewritten in place when a part changes
(``copy=True``: q/k/v, whose weights are small), or runs the layers one by one
(``copy=False``: gate/up, too big to double). A part has changed when its version moved or
its data is another array, even one at the old address (a swapped-in buffer often lands
where the freed one was): the copy remembers each part's array by a weak reference, never by
its address alone.
"""

from __future__ import annotations

import weakref

import genesis
import genesis.nn.functional as F
from genesis import Tensor

__all__ = ["FusedLinear", "share_all", "views_of"]


class FusedLinear:
    """Linears of one input, run as one matmul (see the module docstring).

    Args:
        linears: ``nn.Linear`` layers of one input size, in output order; all with or all
            without bias. Their parameters are made views of one buffer.
        copy: whether to keep a stacked copy when the parameters no longer share memory.

    Example::

        >>> qkv = FusedLinear([attn.q_proj, attn.k_proj, attn.v_proj], copy=True)
        >>> out = qkv.output(x)       # (*, q + k + v features), under genesis.no_grad()
    """

    def __init__(self, linears, copy: bool) -> None:
        self.linears = list(linears)
        self.copy = copy
        self.shared = None  # (weight, bias): the buffers the layers' parameters view
        self._key = self._copy = None
        self.share()

    def share(self) -> None:
        """Make the layers' weights (and biases) row slices of one new buffer each, with
        their current values (the parameters keep their identity: their data is swapped).
        Done when built; ``QwenForCausalLM.to()`` does it again after moving them."""
        with genesis.no_grad():
            weights, biases = self._parts()
            weight = genesis.cat(weights, dim=0)
            bias = genesis.cat(biases, dim=0) if biases else None
            start = 0
            for m in self.linears:
                n = m.out_features
                m.weight.data = weight[start:start + n]
                if bias is not None:
                    m.bias.data = bias[start:start + n]
                start += n
        self.adopt(weight, bias)

    def adopt(self, weight: Tensor, bias: Tensor | None = None) -> None:
        """Record ``weight`` (and ``bias``) as the buffers the layers' parameters now view,
        where an owner made them slices of a bigger buffer of its own (stacked MoE experts)."""
        self.shared, self._key, self._copy = (weight, bias), None, None

    def _parts(self) -> tuple[list[Tensor], list[Tensor]]:
        return ([m.weight for m in self.linears],
                [m.bias for m in self.linears if m.bias is not None])

    def refresh(self) -> tuple[Tensor, Tensor | None] | None:
        """The stacked ``(weight, bias)``: the shared buffers while the layers still view
        them, else the kept copy (made or rewritten as needed), else None (``copy=False``:
        run the layers one by one)."""
        weights, biases = self._parts()
        if self.shared is not None:
            if views_of(self.shared[0], weights) and (
                    not biases or views_of(self.shared[1], biases)):
                return self.shared
            self.shared = None  # the layers have memory of their own now
        if not self.copy:
            return None
        parts = weights + biases
        if not _unchanged(self._key, parts):
            with genesis.no_grad():
                weight = genesis.cat(weights, dim=0)  # (sum of outputs, in_features)
                bias = genesis.cat(biases, dim=0) if biases else None
                old = self._copy
                if old is not None and _same_layout(old[0], weight) and (
                        bias is None or _same_layout(old[1], bias)):
                    old[0].copy_(weight)  # in place: its address may be in a CUDA graph
                    if bias is not None:
                        old[1].copy_(bias)
                else:
                    self._copy = (weight, bias)
            self._key = [_part_state(t) for t in parts]
        return self._copy

    def output(self, x: Tensor) -> Tensor | None:
        """The layers' outputs for ``x`` (*, in) side by side, ``(*, sum of outputs)`` from
        one matmul, or None where they cannot be fused (``copy=False``, see ``refresh``)."""
        stacked = self.refresh()
        return None if stacked is None else F.linear(x, stacked[0], stacked[1])


def views_of(buffer: Tensor, parts: list[Tensor]) -> bool:
    """Whether ``parts`` are still consecutive row slices of ``buffer``."""
    address, row = buffer.data_ptr(), buffer.stride(0) * buffer.element_size()
    for t in parts:
        if t.data_ptr() != address or t.dtype is not buffer.dtype or t.device != buffer.device:
            return False
        address += t.shape[0] * row
    return True


def _part_state(t: Tensor) -> tuple | None:
    """What tells whether part ``t`` changed since the stacked copy was made: its array
    (weakly referenced: a new array at the old address is another object), version and
    dtype; None for a backend array that takes no weak reference (the copy is then made
    again at every call)."""
    try:
        array = weakref.ref(t._data)
    except TypeError:
        return None
    return array, t._version, t.dtype


def _unchanged(key: list | None, parts: list[Tensor]) -> bool:
    """Whether ``parts`` hold what they held when ``key`` (their ``_part_state``s) was
    taken."""
    return key is not None and len(key) == len(parts) and all(
        state is not None and state[0]() is t._data and state[1] == t._version
        and state[2] is t.dtype for state, t in zip(key, parts))


def _same_layout(old: Tensor | None, new: Tensor) -> bool:
    return (old is not None and old.shape == new.shape and old.dtype is new.dtype
            and old.device == new.device)


def share_all(model) -> None:
    """``share()`` every ``FusedLinear`` held by ``model``'s modules, then call every module's
    own ``share_weights()`` where it has one (stacked MoE experts), after ``to()``."""
    for module in model.modules():
        for value in vars(module).values():
            if isinstance(value, FusedLinear):
                value.share()
    for module in model.modules():
        if callable(getattr(module, "share_weights", None)):
            module.share_weights()
