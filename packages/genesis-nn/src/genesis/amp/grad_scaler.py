"""``GradScaler``: dynamic loss scaling, so float16 gradients neither underflow nor overflow.

The loss is multiplied by a large scale before ``backward``; gradients are divided by it
again (``unscale_``) before the optimizer sees them. A step whose gradients hold inf or NaN
is skipped entirely (the parameters and the optimizer state are not touched) and the scale
is cut by ``backoff_factor``; after ``growth_interval`` clean steps in a row it grows by
``growth_factor``. Same API and arithmetic as ``torch.amp.GradScaler``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from enum import Enum
from typing import Any

import numpy as np

import genesis
import genesis.cuda  # noqa: F401 - is_available() for the "cuda" device check
from genesis.nn.fused_declarations import AMP_UNSCALE


class OptState(Enum):
    """Where an optimizer is in the current iteration (reset by ``update``)."""

    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _f32(x: float) -> float:
    """``x`` rounded to float32: torch keeps the scale in a float32 tensor."""
    with np.errstate(over="ignore"):  # an overflow to inf is checked by the caller
        return float(np.float32(x))


def _fresh_state() -> dict[str, Any]:
    return {"stage": OptState.READY, "found_inf": {}, "found_inf_value": None}


class GradScaler:
    """Scale the loss, unscale the gradients, skip steps with inf/NaN gradients.

    Args:
        device: device type the model runs on (``"cuda"`` or ``"cpu"``); a CUDA scaler
            disables itself with a warning when CUDA is unavailable, as torch's does.
        init_scale: initial scale factor.
        growth_factor: factor applied to the scale after ``growth_interval`` clean steps.
        backoff_factor: factor applied to the scale after a step with inf/NaN gradients.
        growth_interval: number of consecutive clean steps before the scale grows.
        enabled: ``False`` makes every method a pass-through (``step`` just steps).

    Example::

        >>> scaler = genesis.amp.GradScaler("cuda")
        >>> for x, y in loader:
        ...     opt.zero_grad()
        ...     with genesis.autocast("cuda", dtype=genesis.float16):
        ...         loss = loss_fn(model(x), y)
        ...     scaler.scale(loss).backward()
        ...     scaler.unscale_(opt)                      # optional: to clip gradients
        ...     genesis.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        ...     scaler.step(opt)
        ...     scaler.update()
    """

    def __init__(self, device: str = "cuda", init_scale: float = 2.0**16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        self._device = str(device)
        if enabled and genesis.device(self._device).type == "cuda":
            if not genesis.cuda.is_available():
                warnings.warn("GradScaler is enabled, but CUDA is not available; disabling it",
                              UserWarning, stacklevel=2)
                enabled = False
        self._enabled = enabled
        if growth_factor <= 1.0:
            raise ValueError(f"growth_factor must be > 1.0, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"backoff_factor must be in (0, 1), got {backoff_factor}")
        if not isinstance(growth_interval, int) or growth_interval <= 0:
            raise ValueError(f"growth_interval must be a positive int, got {growth_interval}")
        self._scale = _f32(init_scale)
        self._growth_factor = growth_factor
        self._backoff_factor = backoff_factor
        self._growth_interval = growth_interval
        self._growth_tracker = 0
        self._per_optimizer_states: dict[int, dict[str, Any]] = {}

    # ------------------------------------------------------------- the loop
    def scale(self, outputs):
        """Multiply ``outputs`` (a tensor, or nested lists/tuples of tensors) by the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, genesis.Tensor):
            return outputs * self._scale
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        if isinstance(outputs, Iterable):
            return map(self.scale, outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def unscale_(self, optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale, in place, and look for inf/NaN.

        Call it at most once per optimizer between ``update()`` calls, e.g. before
        clipping gradients; ``step`` calls it when it has not been called.
        """
        if not self._enabled:
            return
        state = self._state_of(optimizer)
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since "
                               "the last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = _f32(1.0 / self._scale)
        groups: dict = {}  # (device, dtype) -> grads: one fused unscale + inf check each
        for group in optimizer.param_groups:
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                if grad.dtype is genesis.float16:
                    raise ValueError("Attempting to unscale FP16 gradients.")
                groups.setdefault((grad.device, grad.dtype), []).append(grad)
        found: dict = {}  # device -> 0-d float32 tensor on it (1.0: inf/NaN seen): no host
        # sync until step()
        with genesis.no_grad():
            for (device, _), grads in groups.items():
                flag = found.get(device)
                if flag is None:
                    flag = found[device] = genesis.zeros((), device=device)
                inv = genesis.full((), inv_scale, device=device)
                AMP_UNSCALE.forward(grads[0]._backend, [g._data for g in grads], inv._data,
                                    flag._data)
                for g in grads:
                    g._version_box[0] += 1
        state["found_inf"] = found
        state["stage"] = OptState.UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """Unscale (if not done yet) and step ``optimizer`` unless a gradient is inf/NaN.

        Returns:
            What ``optimizer.step`` returned, or ``None`` for a skipped step.
        """
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is "
                               "enabled.")
        state = self._state_of(optimizer)
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        state["found_inf_value"] = any(bool(f.item()) for f in state["found_inf"].values())
        result = None
        if not state["found_inf_value"]:
            result = optimizer.step(*args, **kwargs)
        state["stage"] = OptState.STEPPED
        return result

    def update(self, new_scale: float | None = None) -> None:
        """Adjust the scale for the next iteration (call once per iteration, after ``step``).

        Args:
            new_scale: set the scale to this value instead of the automatic rule.
        """
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = _f32(float(new_scale))
        else:
            found = [s["found_inf_value"] for s in self._per_optimizer_states.values()
                     if s["found_inf_value"] is not None]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update.")
            if any(found):
                self._scale = _f32(self._scale * self._backoff_factor)
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    grown = _f32(self._scale * self._growth_factor)
                    if np.isfinite(grown):
                        self._scale = grown
                    self._growth_tracker = 0
        self._per_optimizer_states = {}

    def _state_of(self, optimizer) -> dict[str, Any]:
        return self._per_optimizer_states.setdefault(id(optimizer), _fresh_state())

    # ------------------------------------------------------------ accessors
    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = new_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = new_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = new_interval

    def is_enabled(self) -> bool:
        return self._enabled

    # ------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """``scale``, ``growth_factor``, ``backoff_factor``, ``growth_interval`` and
        ``_growth_tracker`` (empty when disabled), as torch's keys."""
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state from ``state_dict()``."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._scale = _f32(float(state_dict["scale"]))
        self._growth_factor = state_dict["growth_factor"]
        self._backoff_factor = state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._growth_tracker = int(state_dict["_growth_tracker"])
