"""Grad modes: whether new ops record a graph (thread-local, as in torch)."""

from __future__ import annotations

import functools
import threading


class _GradState(threading.local):
    enabled: bool = True
    inference: bool = False


_state = _GradState()


def is_grad_enabled() -> bool:
    """Whether operations are currently recorded for autograd.

    Returns:
        A Python bool.
    """
    return _state.enabled


def is_inference_mode_enabled() -> bool:
    """Whether an ``inference_mode`` block is active.

    Returns:
        A Python bool.
    """
    return _state.inference


class _GradModeContext:
    """Base of the grad-mode context managers; each also works as a decorator."""

    def _enter_state(self) -> None:
        """Switch the state for the block (each subclass says how)."""

    def __enter__(self):
        self._prev = (_state.enabled, _state.inference)
        self._enter_state()
        return self

    def __exit__(self, *exc) -> None:
        _state.enabled, _state.inference = self._prev

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(*self._args()):
                return fn(*args, **kwargs)

        return wrapper

    def _args(self) -> tuple:
        return ()


class _NoParamContext(_GradModeContext):
    """A grad mode that also decorates without parentheses (``@genesis.no_grad``)."""

    def __new__(cls, orig_func=None):
        if orig_func is None:
            return super().__new__(cls)
        return cls()(orig_func)


class no_grad(_NoParamContext):  # noqa: N801 - torch's name
    """Disable gradient recording inside the block (or the decorated function).

    Example:
        >>> with genesis.no_grad():
        ...     y = x * 2   # y.requires_grad is False
    """

    def _enter_state(self):
        _state.enabled = False


class enable_grad(_NoParamContext):  # noqa: N801
    """Re-enable gradient recording inside a ``no_grad`` block."""

    def _enter_state(self):
        _state.enabled = True


class set_grad_enabled(_GradModeContext):  # noqa: N801
    """Turn gradient recording on or off; takes effect at once, or for a ``with`` block.

    Args:
        mode: True to record, False not to.
    """

    def __init__(self, mode: bool):
        self.mode = bool(mode)
        self._prev = (_state.enabled, _state.inference)
        _state.enabled = self.mode  # torch applies it immediately, even without `with`

    def _enter_state(self):
        _state.enabled = self.mode

    def __enter__(self):
        # __init__ already switched the mode; keep the state from before it for __exit__.
        return self

    def __call__(self, fn):
        # as a decorator it applies inside the function only: undo __init__'s switch (torch)
        _state.enabled, _state.inference = self._prev
        return super().__call__(fn)

    def _args(self) -> tuple:
        return (self.mode,)


class inference_mode(_GradModeContext):  # noqa: N801
    """Like ``no_grad``, for pure inference (tensors made inside never record a graph).

    Args:
        mode: False makes it a no-op, as in torch.
    """

    def __new__(cls, mode=True):
        if isinstance(mode, bool):
            return super().__new__(cls)
        return cls()(mode)  # bare ``@inference_mode``

    def __init__(self, mode: bool = True):
        self.mode = mode

    def _enter_state(self):
        if self.mode:
            _state.enabled = False
            _state.inference = True

    def _args(self) -> tuple:
        return (self.mode,)
