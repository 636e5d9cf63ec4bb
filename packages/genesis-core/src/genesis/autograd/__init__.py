"""Autograd: the recorded graph, its backward engine, custom Functions and grad modes."""

from __future__ import annotations

from genesis.autograd.engine import run_backward
from genesis.autograd.function import Function, Node, once_differentiable
from genesis.autograd.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False,
             inputs=None) -> None:
    """Accumulate gradients of ``tensors`` into the leaves' ``.grad`` (see Tensor.backward)."""
    run_backward(tensors, grad_tensors, retain_graph, create_graph, inputs=inputs,
                 accumulate=True)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False) -> tuple:
    """Gradients of ``outputs`` with respect to ``inputs``, returned rather than accumulated.

    Args:
        outputs: tensors to differentiate.
        inputs: tensors to differentiate with respect to.
        grad_outputs: d(loss)/d(output) per output (needed for non-scalar outputs).
        retain_graph: keep the graph for another backward (default: create_graph).
        create_graph: record the computation, for higher-order derivatives.
        allow_unused: return None (rather than raise) for inputs the outputs don't use.

    Example:
        >>> (g,) = genesis.autograd.grad((x ** 3).sum(), x, create_graph=True)
    """
    single = not isinstance(inputs, (list, tuple))
    result = run_backward(outputs, grad_outputs, retain_graph, create_graph,
                          inputs=(inputs,) if single else tuple(inputs),
                          allow_unused=allow_unused, accumulate=False)
    return result


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
