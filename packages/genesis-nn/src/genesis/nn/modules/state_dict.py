"""State-dict saving and loading for ``Module``: ``state_dict`` / ``load_state_dict``.

``StateDictMixin`` is one of ``Module``'s bases; it walks the module's ``_parameters``,
``_buffers`` (persistent ones) and ``_modules`` tables, which ``Module.__init__`` creates.
Subclasses customise loading by overriding ``_load_from_state_dict`` (as BatchNorm does).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, namedtuple
from typing import TYPE_CHECKING

import genesis
from genesis import Tensor
from genesis.nn.parameter import Parameter

if TYPE_CHECKING:
    from genesis.nn.modules.module import Module

__all__ = ["StateDictMixin"]


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What ``load_state_dict`` returns: the keys the module expected but did not get, and
    the keys it got but does not have."""

    __slots__ = ()

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class StateDictMixin:
    """``Module``'s ``state_dict`` / ``load_state_dict`` (a base class of ``Module``)."""

    def state_dict(self, *, destination: dict | None = None, prefix: str = "",
                   keep_vars: bool = False) -> dict[str, Tensor]:
        """An ordered dict of every parameter and persistent buffer by dotted name.

        Tensors are detached (they share memory with the module) unless ``keep_vars``.

        Example::

            >>> list(genesis.nn.Linear(2, 3).state_dict())
            ['weight', 'bias']
        """
        if destination is None:
            destination = OrderedDict()
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if keep_vars else buf.detach()
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".",
                                  keep_vars=keep_vars)
        return destination

    def _load_from_state_dict(self, state_dict: dict, prefix: str, strict: bool,
                              missing_keys: list, unexpected_keys: list,
                              error_msgs: list, assign: bool) -> None:
        persistent = {k: v for k, v in self._buffers.items()
                      if k not in self._non_persistent_buffers_set}
        local_state = {k: v for k, v in itertools.chain(self._parameters.items(),
                                                        persistent.items()) if v is not None}
        for name, param in local_state.items():
            key = prefix + name
            if key not in state_dict:
                missing_keys.append(key)
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor):
                error_msgs.append(
                    f'While copying the parameter named "{key}", expected genesis.Tensor '
                    f"from checkpoint but received {type(value).__name__}"
                )
                continue
            if tuple(value.shape) != tuple(param.shape):
                error_msgs.append(
                    f"size mismatch for {key}: copying a param with shape "
                    f"{tuple(value.shape)} from checkpoint, the shape in current model is "
                    f"{tuple(param.shape)}."
                )
                continue
            try:
                if assign:
                    self._assign_loaded(name, param, value)
                else:
                    with genesis.no_grad():
                        param.copy_(value)
            except Exception as exc:  # report every bad key, not only the first
                error_msgs.append(
                    f'While copying the parameter named "{key}", whose dimensions in the '
                    f"model are {tuple(param.shape)} and whose dimensions in the checkpoint "
                    f"are {tuple(value.shape)}, an exception occurred : {exc.args}."
                )
        if strict:
            for key in state_dict:
                if not key.startswith(prefix):
                    continue
                first, dot, _ = key[len(prefix):].partition(".")
                # a dotted key belongs to a child module (which reports its own unexpected
                # keys); "weight.foo" under a parameter is unexpected, not the parameter
                owned = self._modules.get(first) is not None if dot else first in local_state
                if not owned:
                    unexpected_keys.append(key)

    def _assign_loaded(self, name: str, old: Tensor, value: Tensor) -> None:
        if name in self._parameters:
            if isinstance(value, Parameter):
                value.requires_grad_(old.requires_grad)
            else:
                value = Parameter(value, requires_grad=old.requires_grad)
            self._parameters[name] = value
        else:
            self._buffers[name] = value

    def load_state_dict(self, state_dict: dict, strict: bool = True,
                        assign: bool = False) -> _IncompatibleKeys:
        """Copy parameters and buffers from ``state_dict`` into this module.

        Values are copied into the existing tensors under ``no_grad`` (casting dtype and
        moving device as needed), so optimizers holding the parameters stay valid. With
        ``assign=True`` the state dict's tensors replace the module's instead.

        Args:
            state_dict: a dict from ``state_dict()`` (of this or an equal architecture).
            strict: raise if keys are missing or unexpected (default ``True``).
            assign: replace tensors instead of copying into them.

        Returns:
            ``(missing_keys, unexpected_keys)``, a named tuple.

        Raises:
            RuntimeError: listing every missing/unexpected key (when ``strict``) and every
                shape mismatch.
        """
        if not isinstance(state_dict, dict):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing: list[str] = []
        unexpected: list[str] = []
        error_msgs: list[str] = []

        def load(module: Module, prefix: str) -> None:
            module._load_from_state_dict(state_dict, prefix, True, missing, unexpected,
                                         error_msgs, assign)
            for name, child in module._modules.items():
                if child is not None:
                    load(child, prefix + name + ".")

        load(self, "")
        if strict:
            if unexpected:
                error_msgs.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected)))
            if missing:
                error_msgs.insert(0, "Missing key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in missing)))
        if error_msgs:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                type(self).__name__, "\n\t".join(error_msgs)))
        return _IncompatibleKeys(missing, unexpected)
