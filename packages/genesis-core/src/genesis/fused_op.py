"""The row type of a fused op, and the one function that runs it: a kernel, else the composite.

A fused op (softmax, the norms, attention, cross-entropy rows, SwiGLU, rotary, the optimizer
steps ...) is one computation a backend may do in a single kernel. Each is declared once, as
a row of its owning package's table, read like a line of PyTorch's ``derivatives.yaml``::

    fused("rms_norm", composite.rms_norm, backward=composite.rms_norm_backward)

* ``name`` names the op and its forward kernel; ``backward`` (the backward's composite) adds a
  backward kernel named ``<name>_backward``: together, the row's kernel pair (``kernels``).
  An op whose gradient is written otherwise has no backward kernel (rotary's backward is its
  forward kernel, inverted; a Function may also use another row's backward).
* ``composite`` is the reference: a function ``(backend, *args)`` written with the backend
  contract's primitives that returns exactly what the kernel returns. It is also the fallback:
  it runs wherever the backend has no kernel of that name. (Attention's row has none: its
  reference is written with differentiable tensor ops in ``F.scaled_dot_product_attention``,
  which runs it where ``forward`` returns ``NotImplemented``.)
* ``autocast`` is the op's category of ``genesis.autocast`` (its autograd Function reads it).

Backends register kernels by these names (``Backend.register_kernel("rms_norm", fn)``), each
with the signature of the row's composite minus the backend. A kernel that does not cover
the operands it is handed (a dtype, a head size, a layout) returns ``NotImplemented``, as a
Python binary operator does: the composite then runs. ``call_fused`` is where that happens,
for every fused op of every package:

    >>> y, rstd = RMS_NORM.forward(x._backend, x._data, None, 1e-6)  # kernel or composite

Core's rows are in ``genesis.fused_declarations``; genesis-nn's (attention, cross-entropy,
SwiGLU, rotary, the optimizer steps) in ``genesis.nn.fused_declarations``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["FusedOp", "call_fused", "fused"]


def call_fused(backend, name: str, composite: Callable | None, args: tuple):
    """Run the kernel ``backend`` registered as ``name`` on ``args``, else ``composite``.

    The one fallback of every fused op: the composite runs when the backend has no kernel of
    that name or its kernel returns ``NotImplemented`` for these operands.

    Args:
        backend: the ``genesis.backends.Backend`` holding the arrays.
        name: the kernel's name (a row's ``name`` or ``<name>_backward``).
        composite: ``(backend, *args)`` with the kernel's result; ``None`` where the op has
            no array-level composite (then ``NotImplemented`` is returned to the caller).
        args: the kernel's arguments (backend arrays and plain values).

    Returns:
        What the kernel (or the composite) returns.

    Example:
        >>> call_fused(cpu, "softmax", composite.softmax, (x, 1, False))
    """
    kernel = backend.kernel(name)
    if kernel is not None:
        result = kernel(*args)
        if result is not NotImplemented:
            return result
    if composite is None:
        return NotImplemented
    return composite(backend, *args)


@dataclass(frozen=True)
class FusedOp:
    """One declared fused op (see the module docstring for the fields)."""

    name: str
    composite: Callable | None
    backward_composite: Callable | None = None
    autocast: str | None = None
    backward_kernel: str | None = None  # the backward kernel's name; None: no backward kernel

    @property
    def kernels(self) -> tuple[str, str | None]:
        """The kernel pair: ``(forward kernel name, backward kernel name or None)``."""
        return self.name, self.backward_kernel

    def forward(self, backend, *args):
        """The forward on ``backend``'s arrays: its kernel ``name``, else the composite."""
        return call_fused(backend, self.name, self.composite, args)

    def backward(self, backend, *args):
        """The backward on ``backend``'s arrays: its backward kernel, else the backward
        composite."""
        return call_fused(backend, self.backward_kernel, self.backward_composite, args)


def fused(name: str, composite: Callable | None, backward: Callable | None = None,
          autocast: str | None = None, backward_kernel: str | None = None) -> FusedOp:
    """Declare the fused op ``name``.

    Args:
        name: the op's name, which is also its forward kernel's name.
        composite: the forward's reference and fallback, ``(backend, *args)``; None where the
            op's only composite is written with differentiable tensor ops (attention).
        backward: the backward's composite; it declares the backward kernel
            ``<name>_backward``.
        autocast: the op's autocast category (``"fp32"``, ``"lower"`` or None).
        backward_kernel: the backward kernel's name where there is no backward composite.

    Returns:
        The row.

    Example:
        >>> SOFTMAX = fused("softmax", composite.softmax, composite.softmax_backward,
        ...                 autocast="fp32")
    """
    if backward is not None and backward_kernel is None:
        backward_kernel = name + "_backward"
    return FusedOp(name, composite, backward, autocast, backward_kernel)
