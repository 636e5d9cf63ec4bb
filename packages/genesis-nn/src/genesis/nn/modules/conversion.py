"""Device and dtype moves for ``Module``: ``to``, ``cuda``, ``cpu``, ``float`` and friends.

``ConversionMixin`` is one of ``Module``'s bases; it walks the ``_parameters``,
``_buffers`` and ``_modules`` tables that ``Module.__init__`` creates. Parameters keep their
identity through a move (their data is swapped), so an optimizer built before ``to`` still
holds the module's parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import genesis
from genesis import Tensor
from genesis.dtypes import DType

__all__ = ["ConversionMixin"]


def _is_floating(t: Tensor) -> bool:
    return t.dtype.is_floating_point


class ConversionMixin:
    """``Module``'s device/dtype moves (a base class of ``Module``)."""

    def _apply(self, fn: Callable[[Tensor], Tensor]) -> Any:
        """Replace every parameter, gradient and buffer ``t`` by ``fn(t)``.

        Parameters keep their identity (their data is swapped) so that references held
        elsewhere, e.g. by an optimizer, still point at the module's parameters.
        """
        for module in self.children():
            module._apply(fn)
        for param in self._parameters.values():
            if param is None:
                continue
            with genesis.no_grad():
                new_data = fn(param)
            if new_data is not param:
                _swap_data(param, new_data)
            if param.grad is not None:
                with genesis.no_grad():
                    new_grad = fn(param.grad)
                if new_grad is not param.grad:
                    param.grad = new_grad
        for key, buf in self._buffers.items():
            if buf is not None:
                with genesis.no_grad():
                    self._buffers[key] = fn(buf)
        self._tables_changed()
        return self

    def to(self, *args: Any, **kwargs: Any) -> Any:
        """Move and/or cast parameters and buffers, in place; returns ``self``.

        Forms: ``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(tensor)`` (its device
        and dtype), and the keywords ``device=``, ``dtype=``, ``non_blocking=``. A dtype
        applies only to floating-point parameters and buffers (integer buffers such as
        BatchNorm's ``num_batches_tracked`` keep their type), as in torch.

        Example::

            >>> model = genesis.nn.Linear(2, 2).to("cpu", genesis.float64)
            >>> model.weight.dtype
            genesis.float64
        """
        device, dtype, non_blocking = _parse_to(args, kwargs)
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError(
                f"nn.Module.to only accepts floating point dtypes, but got desired dtype={dtype}"
            )

        def convert(t: Tensor) -> Tensor:
            target = dtype if (dtype is not None and _is_floating(t)) else None
            if target is None:
                if device is None:
                    return t
                return t.to(device, non_blocking=non_blocking)
            if device is None:
                return t.to(target)
            return t.to(device, target, non_blocking=non_blocking)

        return self._apply(convert)

    def cuda(self, device: Any = None) -> Any:
        """Move all parameters and buffers to a CUDA device (``cuda:0`` by default)."""
        if device is None:
            device = "cuda"
        elif isinstance(device, int):
            device = f"cuda:{device}"
        return self.to(device)

    def cpu(self) -> Any:
        """Move all parameters and buffers to the CPU."""
        return self.to("cpu")

    def _cast_floating(self, dtype) -> Any:
        return self._apply(lambda t: t.to(dtype) if _is_floating(t) else t)

    def float(self) -> Any:
        """Cast floating-point parameters and buffers to float32."""
        return self._cast_floating(genesis.float32)

    def double(self) -> Any:
        """Cast floating-point parameters and buffers to float64."""
        return self._cast_floating(genesis.float64)

    def half(self) -> Any:
        """Cast floating-point parameters and buffers to float16."""
        return self._cast_floating(genesis.float16)

    def bfloat16(self) -> Any:
        """Cast floating-point parameters and buffers to bfloat16."""
        return self._cast_floating(genesis.bfloat16)

    def type(self, dst_type) -> Any:
        """Cast all parameters and buffers (floating or not) to ``dst_type``."""
        return self._apply(lambda t: t.to(dst_type))

def _swap_data(param: Tensor, new: Tensor) -> None:
    """Make ``param`` hold ``new``'s data (device/dtype may differ), keeping its identity."""
    param.data = new


def _parse_to(args: tuple, kwargs: dict):
    """Split ``Module.to``'s arguments into ``(device, dtype, non_blocking)``."""
    device = kwargs.pop("device", None)
    dtype = kwargs.pop("dtype", None)
    non_blocking = kwargs.pop("non_blocking", False)
    kwargs.pop("copy", None)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    for arg in args:
        if isinstance(arg, Tensor):
            device, dtype = arg.device, arg.dtype
        elif isinstance(arg, DType):
            dtype = arg
        elif isinstance(arg, bool):
            non_blocking = arg
        elif arg is not None:
            device = arg
    if device is not None:
        device = genesis.device(device) if not isinstance(device, int) else \
            genesis.device("cuda", device)
    return device, dtype, non_blocking
