"""``Module``: the base class of every layer and model.

A module owns three ordered tables — ``_parameters``, ``_buffers`` and ``_modules`` — and
``__setattr__`` routes attribute assignments into them, so ``self.fc = Linear(...)`` or
``self.weight = Parameter(...)`` is all a subclass has to write. Everything else walks
those tables: recursive iteration, ``compile`` and ``repr`` here; state dicts in
``state_dict.py``, forward hooks (with ``__call__``) in ``hooks.py`` and device/dtype moves in
``conversion.py``, whose mixins are ``Module``'s bases.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import genesis
from genesis import Tensor
from genesis.nn.modules.conversion import ConversionMixin
from genesis.nn.modules.hooks import HooksMixin, RemovableHandle, _HookDict
from genesis.nn.modules.state_dict import StateDictMixin
from genesis.nn.parameter import Buffer, Parameter

# RemovableHandle is defined in hooks.py; re-exported here, where it has always been importable.
__all__ = ["Module", "RemovableHandle"]

# Bumped whenever any module's tables or attributes change: a module's compile guard state
# (its train/eval flags and parameter identities) is recomputed only after a bump.
_guard_epoch = [0]


def _addindent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    return lines[0] + "\n" + "\n".join(" " * spaces + line for line in lines[1:])


class Module(StateDictMixin, HooksMixin, ConversionMixin):
    """Base class for all neural-network modules.

    Subclasses create their parameters and submodules in ``__init__`` (after calling
    ``super().__init__()``) and compute their output in ``forward``; calling the module runs
    ``forward`` together with any registered hooks.

    Example::

        >>> class Model(genesis.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.fc1 = genesis.nn.Linear(4, 8)
        ...         self.fc2 = genesis.nn.Linear(8, 2)
        ...     def forward(self, x):
        ...         return self.fc2(genesis.nn.functional.relu(self.fc1(x)))
        >>> [name for name, _ in Model().named_parameters()]
        ['fc1.weight', 'fc1.bias', 'fc2.weight', 'fc2.bias']
    """

    training: bool
    _version: int = 1

    def __init__(self) -> None:
        # object.__setattr__: our own __setattr__ reads these tables, which do not exist yet.
        setattr_ = object.__setattr__
        setattr_(self, "training", True)
        setattr_(self, "_parameters", OrderedDict())
        setattr_(self, "_buffers", OrderedDict())
        setattr_(self, "_non_persistent_buffers_set", set())
        setattr_(self, "_modules", OrderedDict())
        setattr_(self, "_forward_pre_hooks", _HookDict())
        setattr_(self, "_forward_hooks", _HookDict())

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f'Module [{type(self).__name__}] is missing the required "forward" function'
        )

    # ------------------------------------------------------------ registration
    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Add a tensor that is module state but not a parameter (e.g. BatchNorm's running
        mean). Persistent buffers are saved in ``state_dict``; non-persistent ones are not.

        Args:
            name: attribute name of the buffer.
            tensor: the buffer, or ``None`` (registered but skipped by iteration and saving).
            persistent: whether the buffer belongs to the ``state_dict``.
        """
        _guard_epoch[0] += 1  # (a compiled call's guard state is recomputed)
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        self._check_new_name(name, "buffer", self._buffers)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(
                f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                "(genesis Tensor or None required)"
            )
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add a parameter under ``name`` (``None`` registers the name with no tensor).

        Args:
            name: attribute name of the parameter.
            param: a ``Parameter`` or ``None``.
        """
        _guard_epoch[0] += 1  # (a compiled call's guard state is recomputed)
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        self._check_new_name(name, "parameter", self._parameters)
        if param is None:
            self._parameters[name] = None
            return
        if not isinstance(param, Parameter):
            raise TypeError(
                f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                "(genesis.nn.Parameter or None required)"
            )
        if param.grad_fn is not None:
            raise ValueError(
                f"Cannot assign non-leaf Tensor to parameter '{name}'. Model parameters must "
                "be created explicitly. To express '{name}' as a function of another Tensor, "
                "compute the value in the forward() method."
            )
        self._parameters[name] = param

    def add_module(self, name: str, module: Module | None) -> None:
        """Add a child module under ``name`` (reachable as an attribute)."""
        _guard_epoch[0] += 1  # (a compiled call's guard state is recomputed)
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._check_new_name(name, "module", self._modules)
        self._modules[name] = module

    register_module = add_module

    def _check_new_name(self, name: str, kind: str, table: dict) -> None:
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string, got {type(name).__name__}")
        if name == "":
            raise KeyError(f'{kind} name can\'t be empty string ""')
        if "." in name:
            raise KeyError(f'{kind} name can\'t contain ".", got: {name}')
        if hasattr(self, name) and name not in table:
            raise KeyError(f"attribute '{name}' already exists")

    def get_submodule(self, target: str) -> Module:
        """The submodule at dotted path ``target`` (``""`` is the module itself)."""
        if target == "":
            return self
        mod: Module = self
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(f"{mod._get_name()} has no attribute `{item}`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return mod

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at dotted path ``target`` (e.g. ``"encoder.fc.weight"``)."""
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if name not in mod._parameters:
            raise AttributeError(f"{mod._get_name()} has no parameter `{name}`")
        return mod._parameters[name]

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at dotted path ``target``."""
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if name not in mod._buffers:
            raise AttributeError(f"{mod._get_name()} has no buffer `{name}`")
        return mod._buffers[name]

    # ---------------------------------------------------- attribute routing
    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup failed: look in the three tables.
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            t = d.get(table)
            if t is not None and name in t:
                return t[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        _guard_epoch[0] += 1  # (a compiled call's guard state is recomputed)
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._forget(name, d, self._buffers, self._modules)
            self._non_persistent_buffers_set.discard(name)
            self.register_parameter(name, value)
            return
        if params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                    "(genesis.nn.Parameter or None expected)"
                )
            self.register_parameter(name, value)
            return
        modules = d.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._forget(name, d, self._parameters, self._buffers)
            self._non_persistent_buffers_set.discard(name)
            modules[name] = value
            return
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as child module '{name}' "
                    "(genesis.nn.Module or None expected)"
                )
            modules[name] = value
            return
        if isinstance(value, Buffer):
            self._forget(name, d, self._parameters, self._modules)
            self.register_buffer(name, value.data, value.persistent)
            return
        buffers = d.get("_buffers")
        if buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                    "(genesis.Tensor or None expected)"
                )
            buffers[name] = value
            return
        object.__setattr__(self, name, value)

    @staticmethod
    def _forget(name: str, *tables: dict) -> None:
        for table in tables:
            table.pop(name, None)

    def __delattr__(self, name: str) -> None:
        _guard_epoch[0] += 1  # (a compiled call's guard state is recomputed)
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self) -> list[str]:
        keys = list(object.__dir__(self))
        keys += list(self._parameters) + list(self._buffers) + list(self._modules)
        return sorted(k for k in set(keys) if not k[0].isdigit())

    # ----------------------------------------------------------- iteration
    def _named_members(self, get_members: Callable, prefix: str = "", recurse: bool = True,
                       remove_duplicate: bool = True) -> Iterator[tuple[str, Any]]:
        seen: set[int] = set()
        modules = (self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
                   if recurse else [(prefix, self)])
        for module_prefix, module in modules:
            for name, value in get_members(module):
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                if remove_duplicate:
                    seen.add(id(value))
                yield (module_prefix + "." + name if module_prefix else name), value

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """The module's parameters (and its submodules' when ``recurse``), each once."""
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """``(dotted_name, parameter)`` pairs; a parameter shared by two modules is listed
        once unless ``remove_duplicate=False``."""
        return self._named_members(lambda m: m._parameters.items(), prefix, recurse,
                                   remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """The module's buffers (and its submodules' when ``recurse``)."""
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        """``(dotted_name, buffer)`` pairs."""
        return self._named_members(lambda m: m._buffers.items(), prefix, recurse,
                                   remove_duplicate)

    def children(self) -> Iterator[Module]:
        """The immediate child modules."""
        for _, module in self.named_children():
            yield module

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """``(name, module)`` for the immediate children, each module once."""
        seen: set[int] = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def modules(self) -> Iterator[Module]:
        """This module and all its descendants, depth first, each once."""
        for _, module in self.named_modules():
            yield module

    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        """``(dotted_name, module)`` for this module (name ``prefix``) and its descendants."""
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        if remove_duplicate:
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            sub_prefix = prefix + ("." if prefix else "") + name
            yield from module.named_modules(memo, sub_prefix, remove_duplicate)

    # --------------------------------------------------------------- modes
    def train(self, mode: bool = True) -> Module:
        """Set training mode (``mode=True``) or evaluation mode on this module and its
        descendants. Returns ``self``."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self) -> Module:
        """Set evaluation mode (same as ``train(False)``). Returns ``self``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Set ``requires_grad`` on every parameter. Returns ``self``."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all parameters: to ``None`` (default) or to zeros."""
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                grad = p.grad
                if grad.grad_fn is not None:
                    grad = grad.detach()
                    p.grad = grad
                with genesis.no_grad():
                    grad.zero_()

    def apply(self, fn: Callable[[Module], None]) -> Module:
        """Call ``fn`` on every submodule (children first) and then on ``self``; typically
        used to initialise weights. Returns ``self``."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------ compile
    def compile(self, *, fullgraph: bool = False, dynamic: bool | None = None,
                mode: str | None = None, options: dict | None = None) -> None:
        """Compile this module's call in place with ``genesis.compile`` (torch's
        ``Module.compile``): calling the module then replays traced graphs.

        Args:
            fullgraph, dynamic, mode, options: as ``genesis.compile``'s.

        Example::

            >>> model = genesis.nn.Linear(8, 8)
            >>> model.compile()
            >>> y = model(genesis.randn(2, 8))      # traced; later calls replay
        """
        self.__dict__["_compiled_call"] = genesis.compile(
            self._call_impl, fullgraph=fullgraph, dynamic=dynamic, mode=mode, options=options)

    def _compile_guard_state(self) -> tuple:
        """What a compiled call of this module is guarded on besides its inputs: every
        submodule's train/eval flag and every parameter's and buffer's identity (their
        shapes and dtypes the compiled call checks itself). Cached until a module changes."""
        cached = self.__dict__.get("_guard_state")
        if cached is not None and cached[0] == _guard_epoch[0] and cached[1] == id(self):
            return cached[2]  # (id: a deep copy carries the cache of its original)
        state = (tuple(m.training for m in self.modules()),
                 tuple(id(t) for t in self.parameters()), tuple(id(t) for t in self.buffers()))
        self.__dict__["_guard_state"] = (_guard_epoch[0], id(self), state)
        return state

    def _tables_changed(self) -> None:
        """Note that parameters or buffers were swapped behind ``__setattr__``'s back."""
        _guard_epoch[0] += 1

    # --------------------------------------------------------------- repr
    def extra_repr(self) -> str:
        """The module-specific part of ``repr`` (e.g. ``in_features=4, out_features=2``);
        subclasses override it."""
        return ""

    def _get_name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = []
        for key, module in self._modules.items():
            mod_str = _addindent(repr(module), 2)
            child_lines.append("(" + key + "): " + mod_str)
        lines = extra_lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

    # -------------------------------------------------------------- pickling
    def __setstate__(self, state: dict) -> None:
        compiled = state.pop("_compiled_call", None)
        state.pop("_guard_state", None)
        self.__dict__.update(state)
        if compiled is not None:  # a copy compiles its own call: the traces read the original
            self.compile(fullgraph=compiled.fullgraph, options=compiled.options)

