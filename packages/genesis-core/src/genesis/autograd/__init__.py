"""Autograd: the recorded graph, its backward engine, custom Functions and grad modes."""

from __future__ import annotations

from genesis.autograd.engine import backward, grad
from genesis.autograd.function import Function, Node, once_differentiable
from genesis.autograd.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)


def gradcheck(*args, **kwargs):
    """Compare autograd with float64 finite differences (see ``genesis.testing.gradcheck``)."""
    from genesis.testing import gradcheck as check

    return check(*args, **kwargs)


def gradgradcheck(*args, **kwargs):
    """Check second derivatives (see ``genesis.testing.gradgradcheck``)."""
    from genesis.testing import gradgradcheck as check

    return check(*args, **kwargs)


__all__ = [
    "Function", "Node", "backward", "enable_grad", "grad", "gradcheck", "gradgradcheck",
    "inference_mode", "is_grad_enabled", "is_inference_mode_enabled", "no_grad",
    "once_differentiable", "set_grad_enabled",
]
