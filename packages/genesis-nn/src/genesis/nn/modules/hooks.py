"""Forward hooks for ``Module``: ``RemovableHandle``, registration and ``__call__``.

``HooksMixin`` is one of ``Module``'s bases; it reads the ``_forward_pre_hooks`` and
``_forward_hooks`` tables (``_HookDict``s) that ``Module.__init__`` creates.
"""

from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["HooksMixin", "RemovableHandle"]


class RemovableHandle:
    """A handle whose ``remove()`` unregisters the hook it was returned for.

    Also a context manager: the hook is removed on exit.
    """

    _next_id = itertools.count()

    def __init__(self, hooks_dict: dict) -> None:
        # A weak reference: a handle kept around must not keep a dead module's hooks alive.
        self._hooks_ref = weakref.ref(hooks_dict)
        self.id = next(RemovableHandle._next_id)

    def remove(self) -> None:
        hooks = self._hooks_ref()
        if hooks is not None:
            hooks.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


class _HookDict(OrderedDict):
    """An OrderedDict that can be weakly referenced (plain dicts cannot)."""


class HooksMixin:
    """``Module``'s forward hooks and ``__call__`` (a base class of ``Module``)."""

    def register_forward_pre_hook(self, hook: Callable, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """Call ``hook(module, args)`` before every ``forward``.

        The hook may return ``None`` or replacement positional args (a tuple, or a single
        value that is wrapped in one). With ``with_kwargs=True`` it is called as
        ``hook(module, args, kwargs)`` and may return ``(args, kwargs)``.

        Returns:
            a handle whose ``remove()`` unregisters the hook.
        """
        handle = RemovableHandle(self._forward_pre_hooks)
        self._forward_pre_hooks[handle.id] = (hook, with_kwargs)
        if prepend:
            self._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_hook(self, hook: Callable, *, prepend: bool = False,
                              with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """Call ``hook(module, args, output)`` after every ``forward``.

        The hook may return ``None`` or a replacement output. With ``with_kwargs=True`` it
        is called as ``hook(module, args, kwargs, output)``.

        Returns:
            a handle whose ``remove()`` unregisters the hook.

        Example::

            >>> seen = []
            >>> lin = genesis.nn.Linear(2, 2)
            >>> handle = lin.register_forward_hook(lambda m, args, out: seen.append(out.shape))
            >>> _ = lin(genesis.zeros(3, 2)); handle.remove(); _ = lin(genesis.zeros(1, 2))
            >>> seen
            [genesis.Size([3, 2])]
        """
        handle = RemovableHandle(self._forward_hooks)
        self._forward_hooks[handle.id] = (hook, with_kwargs)
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return handle

    _compiled_call = None  # set by Module.compile(): the compiled _call_impl

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._compiled_call is not None:
            return self._compiled_call(*args, **kwargs)
        if not (self._forward_pre_hooks or self._forward_hooks):  # (as _call_impl begins:
            return self.forward(*args, **kwargs)  # one call with *args less a module)
        return self._call_impl(*args, **kwargs)

    def _call_impl(self, *args: Any, **kwargs: Any) -> Any:
        """The call itself: pre-hooks, ``forward``, hooks (what ``compile`` compiles)."""
        if not (self._forward_pre_hooks or self._forward_hooks):
            return self.forward(*args, **kwargs)
        for hook, with_kwargs in list(self._forward_pre_hooks.values()):
            if with_kwargs:
                result = hook(self, args, kwargs)
                if result is not None:
                    if not (isinstance(result, tuple) and len(result) == 2):
                        raise RuntimeError(
                            "forward pre-hook must return None or a tuple of (new_args, "
                            f"new_kwargs), but got {result}."
                        )
                    args, kwargs = result
            else:
                result = hook(self, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        output = self.forward(*args, **kwargs)
        for hook, with_kwargs in list(self._forward_hooks.values()):
            result = hook(self, args, kwargs, output) if with_kwargs else hook(self, args, output)
            if result is not None:
                output = result
        return output
