"""Every elementwise op and every reduction kernel declared once: a row per op, read like
PyTorch's ``derivatives.yaml``.

A row states the op's name (which is also its backend kernel's name), its gradient per
input, its autocast category and its variants. Everything else is made from the rows:

* ``genesis.ops.elementwise`` builds the autograd ``Function`` (``Exp``, ``Mul`` ...) and
  the public function (``genesis.exp``);
* ``genesis.ops.inplace`` builds the in-place variant (``Tensor.exp_``), ``tensor_methods``
  the method (``Tensor.exp``) and the Python operators (``__add__``, ``__radd__``, ``__iadd__``);
* the backend contract's kernel lists (``Backend.UNARY_OPS``/``BINARY_OPS``) are the rows'
  names, and the CPU backend maps each to the torch function of that name.

A gradient is a formula of the output gradient ``g`` and the names it reads: ``x`` (input)
and ``y`` (output) for unary ops; ``a``, ``b`` (inputs, possibly Python scalars) and ``z``
(output) for binary ones. *What the formula reads is what the op saves* for backward (as
torch), so editing anything else in place after the op does not break backward. Formulas
use only Tensor methods and operators, so this table imports nothing above ``dtypes`` and
every layer, the backend contract included, can read it.

Options: ``ints="float"`` computes integer inputs in the default float dtype (``"keep"``
keeps them; ``"bool"`` gives a bool result); ``autocast`` is the category of
``genesis.autocast``; ``inplace`` adds ``Tensor.<name>_``; ``operator`` names the Python
operator (``"add"``: ``__add__``, ``__radd__`` and, with ``inplace``, ``__iadd__``);
``aliases`` are torch's other names of the op; ``alpha`` adds torch's ``alpha=``
multiplier of the second operand; ``check`` refuses operands torch refuses;
``public=False`` leaves the public function to a hand-written one with more arguments
(``round(decimals=)``, ``div(rounding_mode=)``).

Reductions (``REDUCTIONS``, at the end) follow the same pattern: ``genesis.ops.reduction``
makes each row's Function (``Sum``, ``Amax`` ...) and public function, ``tensor_methods`` its
method, and ``Backend.REDUCTION_OPS`` is the rows' names, each a backend kernel of that name
with the parameters ``kernel_params`` says. The composites built on them (mean, var/std,
logsumexp, norm, max/min along a dim) get their gradients from these and have no row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from genesis import dtypes as D

_LN2 = math.log(2.0)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


@dataclass(frozen=True)
class Op:
    """One declared elementwise op (see the module docstring for the fields)."""

    name: str
    arity: int
    grads: tuple = ()  # one formula (or None: no gradient) per input; (): not differentiable
    ints: str = "float"
    autocast: str | None = None
    inplace: bool = False
    operator: str | None = None
    alpha: bool = False
    check: Callable | None = None
    method: bool = True
    public: bool = True
    aliases: tuple = ()  # torch's other names for the function and method

    @property
    def differentiable(self) -> bool:
        return bool(self.grads)

    def reads(self, i: int) -> tuple:
        """The names input ``i``'s gradient formula reads besides ``g`` (what is saved)."""
        f = self.grads[i]
        if f is None:
            return ()
        code = f.__code__
        return code.co_varnames[1:code.co_argcount]


def unary(name, grad=None, **options) -> Op:
    """Declare ``y = name(x)``; ``grad(g, [x], [y])`` is dL/dx."""
    return Op(name, 1, (grad,) if grad is not None else (), **options)


def binary(name, grad_a=None, grad_b=None, **options) -> Op:
    """Declare ``z = name(a, b)``; ``grad_a``/``grad_b(g, [a], [b], [z])`` are dL/da, dL/db."""
    grads = (grad_a, grad_b) if grad_a is not None or grad_b is not None else ()
    return Op(name, 2, grads, **options)


# ------------------------------------------------------------ gradients that branch
def _zero(g):
    return g * 0.0  # piecewise-constant ops: zero gradient, as torch


def _pow_grad_base(g, a, b):
    if isinstance(b, (int, float)):
        return g * 0.0 if b == 0 else g * b * a ** (b - 1)
    return g * b * a ** (b - 1)


def _pow_grad_exponent(g, a, b, z):
    if isinstance(a, (int, float)):
        return g * z * (math.log(a) if a > 0 else math.nan if a < 0 else 0.0)
    return (g * z * a.log()).masked_fill((a == 0) & (b >= 0), 0.0)


def _silu_grad(g, x):
    # d/dx x*sigmoid(x) = s * (1 + x * (1 - s)): from x alone, so silu saves only its input
    # (as torch), not sigmoid(x) beside it as the composite x * x.sigmoid() did
    s = x.sigmoid()
    return g * (s * (1 + x * (1 - s)))


def _max_grad(g, a, b):
    # torch: ties split the gradient evenly, the smaller input gets none, a NaN in either
    # (no order) passes the full gradient to both. minimum is the mirror image.
    return (g * 0.5).where(a == b, g).masked_fill(a < b, 0.0)


def check_sub_operands(a, b) -> None:
    """torch refuses any bool operand of sub (not only two bool tensors, as the kernel does)."""
    if a is True or a is False or b is True or b is False \
            or getattr(a, "dtype", None) is D.bool_ or getattr(b, "dtype", None) is D.bool_:
        raise RuntimeError(
            "Subtraction, the `-` operator, with a bool tensor is not supported. If you are "
            "trying to invert a mask, use the `~` or `logical_not()` operator instead.")


def check_integral_operands(a, b) -> None:
    """Bitwise ops take integer and bool operands only."""
    for v in (a, b):
        dt = getattr(v, "dtype", None)
        if isinstance(v, float) or (dt is not None and dt.is_floating_point):
            raise TypeError(f"bitwise ops are only defined for integer and bool tensors, got "
                            f"{dt if dt is not None else type(v).__name__}")


# ----------------------------------------------------------------------- unary ops
UNARY = (
    # name        gradient dL/dx (its arguments: what is saved)        options
    unary("neg", lambda g: -g, ints="keep", inplace=True),
    unary("abs", lambda g, x: g * x.sign(), ints="keep", inplace=True),
    unary("sign", _zero, ints="keep", inplace=True),
    unary("exp", lambda g, y: g * y, autocast="fp32", inplace=True),
    unary("exp2", lambda g, y: g * y * _LN2, inplace=True),
    unary("log", lambda g, x: g / x, autocast="fp32", inplace=True),
    unary("log2", lambda g, x: g / (x * _LN2), autocast="fp32", inplace=True),
    unary("log1p", lambda g, x: g / (x + 1), autocast="fp32", inplace=True),
    unary("expm1", lambda g, y: g * (y + 1), autocast="fp32", inplace=True),
    unary("sqrt", lambda g, y: g / (y * 2), inplace=True),
    unary("rsqrt", lambda g, y: g * y * y * y * -0.5, autocast="fp32", inplace=True),
    unary("sin", lambda g, x: g * x.cos(), inplace=True),
    unary("cos", lambda g, x: -g * x.sin(), inplace=True),
    unary("tanh", lambda g, y: g * (1 - y * y), inplace=True),
    unary("sigmoid", lambda g, y: g * y * (1 - y), inplace=True),
    unary("silu", _silu_grad, method=False),  # (torch: F.silu only, no Tensor.silu)
    # (y <= 0 gets 0, anything else the gradient: a NaN input passes it on, as in torch)
    unary("relu", lambda g, y: g.masked_fill(y <= 0, 0.0), ints="keep", inplace=True),
    unary("erf", lambda g, x: g * TWO_OVER_SQRT_PI * (-(x * x)).exp(), inplace=True),
    unary("floor", _zero, ints="keep", inplace=True),
    unary("ceil", _zero, ints="keep", inplace=True),
    unary("round", _zero, ints="keep", inplace=True, public=False),  # + decimals=
    unary("logical_not", ints="bool"),
    unary("isnan", ints="bool"),
    unary("isinf", ints="bool"),
    unary("isfinite", ints="bool"),
    unary("bitwise_not", ints="keep", check=lambda a: check_integral_operands(a, 0)),
)

# ---------------------------------------------------------------------- binary ops
BINARY = (
    # name       dL/da                         dL/db                            options
    binary("add", lambda g: g, lambda g: g, ints="keep", inplace=True, operator="add",
           alpha=True),
    binary("sub", lambda g: g, lambda g: -g, ints="keep", inplace=True, operator="sub",
           alpha=True, check=check_sub_operands, aliases=("subtract",)),
    binary("mul", lambda g, b: g * b, lambda g, a: g * a, ints="keep", inplace=True,
           operator="mul", aliases=("multiply",)),
    binary("div", lambda g, b: g / b, lambda g, b, z: -g * z / b, inplace=True,
           operator="truediv", public=False, aliases=("divide", "true_divide")),  # rounding_mode=
    binary("pow", _pow_grad_base, _pow_grad_exponent, ints="keep", autocast="fp32",
           inplace=True, operator="pow"),
    binary("maximum", _max_grad, lambda g, a, b: _max_grad(g, b, a), ints="keep"),
    binary("minimum", lambda g, a, b: _max_grad(g, b, a), _max_grad, ints="keep"),
    binary("atan2", lambda g, a, b: g * b / (a * a + b * b),
           lambda g, a, b: -g * a / (a * a + b * b)),
    binary("remainder", lambda g: g, lambda g, a, b: -g * (a // b), ints="keep",
           inplace=True, operator="mod"),
    binary("floor_divide", ints="keep", operator="floordiv"),
    binary("eq", ints="bool"),
    binary("ne", ints="bool", aliases=("not_equal",)),
    binary("lt", ints="bool", aliases=("less",)),
    binary("le", ints="bool", aliases=("less_equal",)),
    binary("gt", ints="bool", aliases=("greater",)),
    binary("ge", ints="bool", aliases=("greater_equal",)),
    binary("logical_and", ints="bool"),
    binary("logical_or", ints="bool"),
    binary("logical_xor", ints="bool"),
    binary("bitwise_and", ints="keep", operator="and", check=check_integral_operands),
    binary("bitwise_or", ints="keep", operator="or", check=check_integral_operands),
    binary("bitwise_xor", ints="keep", operator="xor", check=check_integral_operands),
)

UNARY_NAMES = tuple(op.name for op in UNARY)
BINARY_NAMES = tuple(op.name for op in BINARY)


# ----------------------------------------------------------------------- reductions
@dataclass(frozen=True)
class Reduction:
    """One declared reduction: ``y = name(x, dims, keepdim)``, also the backend kernel's name.

    ``grad(g, [x], [y], [dims])`` is dL/dx, where ``g`` is the output's gradient broadcast
    back to ``x``'s shape and ``y`` the output broadcast the same way; the tensors it reads
    (``x``, ``y``) are what the op saves. ``result``: ``"sum"`` (integer and bool inputs give
    int64; a ``dtype=`` argument picks the result's dtype), ``"keep"`` (the input's dtype),
    ``"logical"`` (bool; uint8 for uint8 inputs, torch's legacy rule) or ``"index"`` (int64
    positions along one dim, or in the flattened tensor). ``refuse_empty``: reducing over
    an empty dim (or an empty tensor over every dim) is an error, as torch's amax.
    """

    name: str
    grad: Callable | None = None
    result: str = "keep"
    autocast: str | None = None
    refuse_empty: bool = False
    method: bool = True

    @property
    def differentiable(self) -> bool:
        return self.grad is not None

    def reads(self) -> tuple:
        """The tensors the gradient formula reads besides ``g``: what is saved."""
        code = self.grad.__code__
        return tuple(n for n in code.co_varnames[1:code.co_argcount] if n in ("x", "y"))

    @property
    def kernel_params(self) -> tuple:
        """The parameters of the backend kernel ``Backend.<name>`` (after ``self``)."""
        if self.result == "index":
            return ("a", "dim", "keepdim")
        return ("a", "dims", "keepdim", "dtype") if self.result == "sum" else \
            ("a", "dims", "keepdim")


def reduction(name, grad=None, **options) -> Reduction:
    """Declare the reduction ``name``; ``grad(g, [x], [y], [dims])`` is dL/dx."""
    return Reduction(name, grad, **options)


def _prod_grad(g, x, dims):
    # d prod / d x_i = the product of the others, written so that it stays exact with zeros
    # and keeps its own derivative (double backward) with up to two zeros:
    #   non-zero x_i: p / x_i * (product of the zeros: 1, the zero itself, or 0)
    #   zero x_i:     p * (product of the other zeros: 1, the other zero, or 0)
    # where p is the product of the non-zero elements. Zero-valued terms are kept as
    # expressions of x (zsum) rather than constants so their gradients survive.
    is_zero = x == 0
    n_zero = is_zero.sum(dims, keepdim=True)
    x_no_zero = x.masked_fill(is_zero, 1.0)
    p = x_no_zero.prod(dims, keepdim=True)
    zsum = x.masked_fill(~is_zero, 0.0).sum(dims, keepdim=True)  # 0-valued where zeros are
    zeros_product = zsum.masked_fill(n_zero != 1, 0.0).masked_fill(n_zero == 0, 1.0)
    other_zeros = (zsum - x).masked_fill(n_zero != 2, 0.0).masked_fill(n_zero == 1, 1.0)
    grad = (p * other_zeros).where(is_zero, p / x_no_zero * zeros_product)
    # with an inf/NaN product those zero-valued terms would turn 0 into NaN: there, use the
    # plain values (torch's: the lone zero gets p, every other element 0)
    plain = (p / x_no_zero).where(n_zero == 0, p.where(is_zero & (n_zero == 1), 0.0))
    return g * grad.where(p.isfinite(), plain)


def _extreme_grad(g, x, y, dims):
    hit = x == y  # ties share the gradient evenly, as torch's amax/amin
    return g * hit / hit.sum(dims, keepdim=True)


REDUCTIONS = (
    # name        gradient dL/dx (g broadcast back to x)   options
    reduction("sum", lambda g: g, result="sum", autocast="fp32"),
    reduction("prod", _prod_grad, result="sum", autocast="fp32"),
    reduction("amax", _extreme_grad, refuse_empty=True),
    reduction("amin", _extreme_grad, refuse_empty=True),
    reduction("all", result="logical"),
    reduction("any", result="logical"),
    reduction("argmax", result="index"),
    reduction("argmin", result="index"),
)

REDUCTION_NAMES = tuple(op.name for op in REDUCTIONS)
