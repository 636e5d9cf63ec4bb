"""The ``Optimizer`` base class: parameter groups, per-parameter state, state dicts.

A concrete optimizer only says how ONE parameter changes given its gradient, its state
and its group's options (``init_state`` and ``update``, in the style of MLX's
``init_single``/``apply_single``); this class does the bookkeeping around it: grouping,
defaults, ``zero_grad``, ``step`` under ``no_grad``, and ``state_dict``/``load_state_dict``
in PyTorch's format (parameters referenced by their index across groups).
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import genesis


class _RequiredParameter:
    """Sentinel for a hyper-parameter with no default (each group must give one)."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()
_SET_ERROR = ("optimizer parameters need to be organized in ordered collections, but the "
              "ordering of tensors in sets will change between runs; use a list instead")


class _HookHandle:
    """Returned by the ``register_*_hook`` methods: ``remove()`` unregisters the hook."""

    def __init__(self, hooks: list, hook: Callable) -> None:
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


class Optimizer:
    """Base class of all optimizers.

    Args:
        params: an iterable of tensors, or of dicts each holding ``"params"`` (tensors) and
            per-group options that override ``defaults``.
        defaults: default value of every option (``lr``, ``betas``, ...).

    Subclasses implement ``init_state(param, state, group)`` (fill a fresh per-parameter
    state dict) and ``update(param, grad, state, group)`` (change ``param`` in place).

    Example::

        >>> opt = genesis.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        >>> opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    """

    def __init__(self, params: Iterable, defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self.state: defaultdict[Any, dict[str, Any]] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        self._step_pre_hooks: list[Callable] = []
        self._step_post_hooks: list[Callable] = []
        if isinstance(params, genesis.Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors "
                f"or dicts, but got {type(params).__name__}"
            )
        if isinstance(params, set):
            raise TypeError(_SET_ERROR)
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    # ------------------------------------------------------------------ groups
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of parameters with its own options (missing ones come from defaults).

        Args:
            param_group: a dict with ``"params"`` (a tensor or an iterable of tensors)
                and any option to override, e.g. ``{"params": head.parameters(), "lr": 1e-2}``.
        """
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        group = dict(param_group)
        params = group["params"]
        if isinstance(params, genesis.Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError(_SET_ERROR)
        params = list(params)
        for p in params:
            if not isinstance(p, genesis.Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params "
                                f"is {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        group["params"] = params
        for name, default in self.defaults.items():
            if default is required and name not in group:
                raise ValueError(f"parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            group.setdefault(name, default)
        if len({id(p) for p in params}) != len(params):
            raise ValueError("optimizer contains a parameter group with duplicate parameters")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    # ---------------------------------------------------------------- stepping
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of every parameter.

        Args:
            set_to_none: drop the gradients (``p.grad = None``, the default: saves memory
                and a kernel) instead of filling them with zeros.
        """
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    grad = p.grad.detach()
                    grad.zero_()
                    p.grad = grad

    def step(self, closure: Callable[[], Any] | None = None):
        """Update every parameter that has a gradient, once.

        Args:
            closure: optional function that re-evaluates the model and returns the loss;
                it runs with gradients enabled before the update.

        Returns:
            The closure's loss, or ``None``.
        """
        if "capturable" in self.defaults:
            self._check_capture()
        for hook in list(self._step_pre_hooks):
            hook(self, (closure,), {})
        loss = None
        if closure is not None:
            with genesis.enable_grad():
                loss = closure()
        with genesis.no_grad():
            for group in self.param_groups:
                if self._multi_tensor(group):
                    self._multi_tensor_step(group)
                    continue
                for p in group["params"]:
                    grad = p.grad
                    if grad is None:
                        continue
                    state = self.state.get(p)
                    if state is None:
                        state = {}
                        self.init_state(p, state, group)
                    self.update(p, grad, state, group)
                    if state:  # an optimizer without state (plain SGD) records none, as torch
                        self.state[p] = state
        for hook in list(self._step_post_hooks):
            hook(self, (closure,), {})
        return loss

    def _check_capture(self) -> None:
        """torch's capture health check, for optimizers with a ``capturable`` option: a step
        taken while a CUDA graph is captured must keep its step count on the device
        (``capturable=True``) and must find its state already made (a warm-up step), or
        every replay would repeat the captured step's bias correction or re-zero the state."""
        on_device = [p for g in self.param_groups for p in g["params"][:1]
                     if p.device.type == "cuda"]
        if not on_device or not genesis.cuda.is_current_stream_capturing():
            return
        name = type(self).__name__
        if not all(g["capturable"] for g in self.param_groups):
            raise genesis.cuda.GraphCaptureError(
                f"cannot capture step() of {name} with capturable=False in a CUDA graph: its "
                "step count is a host number, so every replay would repeat the captured "
                f"step's bias correction. Construct it with {name}(..., capturable=True) (the "
                "count then lives on the device; see docs/cuda_graphs.md).")
        for g in self.param_groups:
            lr = g.get("lr")
            if isinstance(lr, genesis.Tensor) and g["params"] \
                    and lr.device != g["params"][0].device:
                raise genesis.cuda.GraphCaptureError(
                    f"cannot capture step() of {name} with lr a tensor on {lr.device} while "
                    f"its parameters are on {g['params'][0].device}: the graph would keep a "
                    "copy of the value at capture time. Put the lr tensor on the parameters' "
                    "device.")
        if any(p.grad is not None and p not in self.state
               for g in self.param_groups for p in g["params"]):
            raise genesis.cuda.GraphCaptureError(
                f"cannot create {name}'s state while a CUDA graph is being captured: every "
                "replay would zero it again. Take one eager step before the capture "
                "(a warm-up), so the state exists.")

    def _multi_tensor(self, group: dict[str, Any]) -> bool:
        """Whether ``group`` steps through ``multi_update``: asked for with ``foreach`` or
        ``fused``, or (both left ``None``, torch's default) when its parameters are on an
        accelerator, as torch picks its foreach path for CUDA tensors."""
        if type(self).multi_update is Optimizer.multi_update:
            return False
        fused, foreach = group.get("fused"), group.get("foreach")
        if fused or foreach:
            return True
        if fused is None and foreach is None:
            params = group["params"]
            return bool(params) and params[0].device.type != "cpu"
        return False

    def _multi_tensor_step(self, group: dict[str, Any]) -> None:
        params, grads, states, new = [], [], [], []
        known = self.state.get
        for p in group["params"]:
            grad = p.grad
            if grad is None:
                continue
            state = known(p)
            if state is None:
                state = {}
                self.init_state(p, state, group)
                new.append((p, state))
            params.append(p)
            grads.append(grad)
            states.append(state)
        if params:
            self.multi_update(params, grads, states, group)
        for p, state in new:  # (the others are already there)
            if state:
                self.state[p] = state

    def multi_update(self, params: list, grads: list, states: list,
                     group: dict[str, Any]) -> None:
        """Apply one update to all ``params`` of ``group`` at once (the foreach/fused path).

        ``step`` takes this path only for subclasses that override it; this default is the
        per-parameter ``update`` in a loop."""
        for p, g, state in zip(params, grads, states):
            self.update(p, g, state, group)

    def _compile_guard_state(self) -> tuple:
        """What ``genesis.compile(opt.step)`` is guarded on: every group's hyperparameters
        (a scheduler's new ``lr`` is a new trace) and the Python numbers of the state (a
        step count kept on the host changes every step: such a step is traced anew each
        time, and runs eagerly past the cache limit; ``capturable=True`` keeps it a tensor)."""
        groups = tuple(tuple((k, v) for k, v in group.items()
                             if k != "params" and isinstance(v, (int, float, bool, tuple)))
                       for group in self.param_groups)
        numbers = tuple(tuple(v for v in st.values() if isinstance(v, (int, float)))
                        for st in self.state.values())
        return groups, numbers

    def register_step_pre_hook(self, hook: Callable) -> _HookHandle:
        """Call ``hook(optimizer, args, kwargs)`` before every ``step``.

        Returns:
            A handle whose ``remove()`` unregisters the hook.
        """
        self._step_pre_hooks.append(hook)
        return _HookHandle(self._step_pre_hooks, hook)

    def register_step_post_hook(self, hook: Callable) -> _HookHandle:
        """Call ``hook(optimizer, args, kwargs)`` after every ``step``.

        Returns:
            A handle whose ``remove()`` unregisters the hook.
        """
        self._step_post_hooks.append(hook)
        return _HookHandle(self._step_post_hooks, hook)

    def init_state(self, param, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Fill ``state`` (empty) for ``param`` before its first update. Default: nothing."""

    def update(self, param, grad, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Apply one update to ``param`` (in place) from ``grad``, ``state`` and ``group``."""
        raise NotImplementedError

    # ------------------------------------------------------------- state dicts
    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state as ``{"state": {index: {...}}, "param_groups": [...]}``.

        Parameters are replaced by their index, counted across groups in order, as torch
        does; the state tensors are references (save or clone them before stepping on).
        """
        index_of: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            ids = []
            for p in group["params"]:
                index_of.setdefault(id(p), len(index_of))
                ids.append(index_of[id(p)])
            packed["params"] = ids
            groups.append(packed)
        state = {index_of[id(p)]: s for p, s in self.state.items() if id(p) in index_of}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state from ``state_dict()`` (of an optimizer over the same parameters).

        Floating state tensors are cast to their parameter's dtype and device, and copied, so
        the loaded state never aliases ``state_dict``. ``step`` counters (torch saves 0-d
        tensors, genesis ints) become Python ints, or 0-d float32 tensors on the
        parameter's device in a ``capturable`` group, as torch loads them. Options the saved
        groups lack take the optimizer's defaults.
        """
        groups = self.param_groups
        saved_groups = copy.deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError(
                f"loaded state dict has a different number of parameter groups "
                f"({len(saved_groups)}) than the optimizer ({len(groups)})"
            )
        for i, (g, s) in enumerate(zip(groups, saved_groups)):
            if len(g["params"]) != len(s["params"]):
                raise ValueError(
                    f"loaded state dict contains a parameter group ({i}) that doesn't match "
                    f"the size of optimizer's group: {len(s['params'])} vs {len(g['params'])}"
                )
        id_map, group_of = {}, {}
        for g, s in zip(groups, saved_groups):
            for name, default in self.defaults.items():  # options older saves lack
                s.setdefault(name, default)
            for p, index in zip(g["params"], s["params"]):
                id_map[index] = p
                group_of[index] = s
        self.state = defaultdict(dict)
        for index, pstate in state_dict["state"].items():
            if index not in id_map:
                continue  # torch keeps unmatched entries only in a side table; we drop them
            param = id_map[index]
            capturable = bool(group_of[index].get("capturable", False))
            self.state[param] = {k: _cast_state(param, k, v, capturable)
                                 for k, v in pstate.items()}
        new_groups = []
        for g, s in zip(groups, saved_groups):
            s["params"] = g["params"]
            new_groups.append(s)
        self.param_groups = new_groups

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for key in sorted(k for k in group if k != "params"):
                lines.append(f"    {key}: {group[key]}")
        lines.append(")")
        return "\n".join(lines)


def check_foreach_fused(foreach: bool | None, fused: bool | None) -> None:
    """torch's rule for the two implementation flags."""
    if foreach and fused:
        raise RuntimeError("`fused` and `foreach` cannot be `True` together.")


def bucket_by_array(params: list, grads: list, states: list, extra=lambda state: ()) -> dict:
    """Group (param, grad, state) triples into multi-tensor buckets (one backend call each),
    keyed by ``(device, dtype, *extra(state))``. (A gradient always has its parameter's
    dtype, shape and device: assigning another one to ``.grad`` raises.)"""
    buckets: dict = {}
    last = items = None
    for p, g, state in zip(params, grads, states):
        key = (p.device, p.dtype) + tuple(extra(state))
        if key != last:  # (neighbours mostly share a bucket: compared, not hashed)
            items, last = buckets.setdefault(key, []), key
        items.append((p, g, state))
    return buckets


def bump_versions(*tensor_lists) -> None:
    """Record an in-place change of every tensor in ``tensor_lists`` (None entries skipped),
    as the in-place tensor ops do, so autograd notices edits of saved tensors."""
    for tensors in tensor_lists:
        for t in tensors:
            if t is not None:
                t._version_box[0] += 1


def _cast_state(param, key: str, value, capturable: bool = False):
    """A loaded state value moved to ``param``'s device (and dtype, for floating state).
    A ``step`` count is a Python int, or (``capturable``) a 0-d float32 tensor on
    ``param``'s device."""
    if key == "step" and isinstance(value, (int, float, genesis.Tensor)):
        if capturable:
            if isinstance(value, genesis.Tensor):
                moved = value.to(device=param.device, dtype=genesis.float32)
                return moved.clone() if moved is value else moved
            return genesis.tensor(float(value), dtype=genesis.float32, device=param.device)
        return int(value.item()) if isinstance(value, genesis.Tensor) else value
    if isinstance(value, genesis.Tensor):
        if param.is_floating_point() and value.is_floating_point():
            moved = value.to(device=param.device, dtype=param.dtype)
        else:
            moved = value.to(device=param.device)
        return moved.clone() if moved is value else moved
    if isinstance(value, dict):
        return {k: _cast_state(param, k, v, capturable) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_state(param, key, v, capturable) for v in value)
    return value
