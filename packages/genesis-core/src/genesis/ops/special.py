"""Special functions built from the primitives: ``erfinv``."""

from __future__ import annotations

import math

from genesis import dtypes as D
from genesis.autograd.function import Function
from genesis.op_declarations import TWO_OVER_SQRT_PI
from genesis.ops.elementwise import where
from genesis.tensor import Tensor

# Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011): single-precision
# polynomial coefficients for the central (w < 5) and tail regions.
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                   0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
                0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _horner(coeffs, w: Tensor) -> Tensor:
    p = w * coeffs[0] + coeffs[1]  # (not w * 0 + c0: that is NaN where w is inf)
    for c in coeffs[2:]:
        p = p * w + c
    return p


class Erfinv(Function):
    """Inverse error function: a polynomial first guess refined by Newton steps on ``erf``
    (so float64 gets full precision); d/dy erfinv(y) = sqrt(pi)/2 * exp(erfinv(y)^2)."""

    @staticmethod
    def forward(ctx, y):
        y = y if y.dtype.is_floating_point else y.to(D.get_default_dtype())
        work = y if y.dtype.itemsize >= 4 else y.to(D.float32)
        w = -((1 - work) * (1 + work)).log()
        central = _horner(_ERFINV_CENTRAL, w - 2.5)
        tail = _horner(_ERFINV_TAIL, where(w < 5, 5.0, w).sqrt() - 3)
        x = where(w < 5, central, tail) * work
        x = where(work.abs() == 1, work * math.inf, x)  # the polynomial does not reach +-inf
        for _ in range(2 if work.dtype is D.float64 else 1):
            step = (x.erf() - work) / (TWO_OVER_SQRT_PI * (-(x * x)).exp())
            x = where(x.isfinite(), x - step, x)  # +-1 map to +-inf and stay there
        x = x.to(y.dtype)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x * x).exp() * (math.sqrt(math.pi) / 2)


def erfinv(input: Tensor) -> Tensor:
    """Inverse of ``erf`` on (-1, 1); ``erfinv(+-1) = +-inf``, NaN outside.

    Args:
        input: the input tensor.

    Returns:
        A new floating tensor of ``input``'s shape.
    """
    return Erfinv.apply(input)
