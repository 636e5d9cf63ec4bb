"""What the compiler can fuse, op by op: the one table of Triton expressions.

Each fusible op of ``genesis.dispatch.REGISTRY`` is a row here saying how its value is
written in generated Triton from its operands' values. The maths itself is not repeated:
unary and binary ops call the eager kernels' own device functions, ``_unary`` and
``_binary`` of ``genesis_cuda/kernels/_elementwise_math.py``, with the op name as their
constexpr ``OP``, so a fused ``exp`` computes exactly what the eager ``exp`` kernel does.

Values live in registers in their *register type* (``reg``): float32 for float16, bfloat16
and float32 (as the eager kernels compute), the dtype itself otherwise (bool as ``int1``).
A value is rounded to its storage dtype only where the program says so (a ``cast``) and when
it is stored: intermediates keep float32 precision, as torch.compile's generated kernels do.

Kinds of rows:

* ``unary`` / ``binary``: the declared elementwise ops (``genesis.op_declarations``).
* ``special``: ``cast``, ``where``, ``clamp``, ``clone``/``contiguous`` (identity).
* ``view``: ``view``, ``expand``, ``permute``, ``slice``, ``cat``, ``slice_backward`` (a
  slice's gradient: zeros around it): no arithmetic, they map an index of their output to
  indices of their inputs (``codegen.Emitter``).
* ``reduction``: ``sum``, ``amax``, ``amin`` over the last dim (row kernels only).

Example: ``binary_expr("mul", ("x", D.bfloat16), ("y", D.int32), D.float32)`` is
``'_binary(x, y.to(tl.float32), "mul", 0)'`` (a bfloat16 value is held as float32).
"""

from __future__ import annotations

from genesis import dtypes as D
from genesis import op_declarations as decl
from genesis_cuda.kernels.elementwise import _NBITS, UNARY_BOOL_OUT, _ct

UNARY = {op.name: op for op in decl.UNARY}
BINARY = {op.name: op for op in decl.BINARY}
SPECIAL = frozenset(("cast", "where", "clamp", "clone", "contiguous"))
VIEWS = frozenset(("view", "expand", "permute", "slice", "cat", "slice_backward"))
REDUCTIONS = frozenset(("sum", "amax", "amin"))
POINTWISE = frozenset(UNARY) | frozenset(BINARY) | SPECIAL

_TL_NAMES = {"bool": "tl.int1", "bfloat16": "tl.bfloat16"}


def tl_name(dtype: D.DType) -> str:
    """The ``triton.language`` spelling of a genesis dtype (``tl.float32``)."""
    return _TL_NAMES.get(dtype.name) or f"tl.{dtype.name}"


def reg(dtype: D.DType) -> D.DType:
    """The register type a value of storage ``dtype`` is held in (see the module doc)."""
    if dtype is D.float16 or dtype is D.bfloat16:
        return D.float32
    return dtype


def kind_of(op: str) -> str | None:
    """``"pointwise"``, ``"view"``, ``"reduction"`` or None (not fusible) for an op name."""
    if op in POINTWISE:
        return "pointwise"
    if op in VIEWS:
        return "view"
    if op in REDUCTIONS:
        return "reduction"
    return None


class _Meta:
    """What ``genesis.dtypes.result_type`` reads of a tensor operand: dtype and ndim."""

    __slots__ = ("dtype", "ndim")

    def __init__(self, value):
        self.dtype = value.dtype
        self.ndim = len(value.shape)


def promoted(*operands) -> D.DType:
    """``result_type`` of graph operands (``Value``s and Python scalars), as eager's."""
    return D.result_type(*(o if isinstance(o, (bool, int, float)) else _Meta(o)
                           for o in operands))


def constant(value, dtype: D.DType) -> str:
    """A Python scalar as a typed Triton 0-d value of register type ``reg(dtype)``."""
    r = reg(dtype)
    if r.is_floating_point:
        v = float(value)
        text = repr(v) if v == v and v not in (float("inf"), float("-inf")) else \
            f'float("{v}")'
    elif r is D.bool_:
        text = str(bool(value))
    else:
        text = str(int(value))
    return f"tl.full([], {text}, {tl_name(r)})"


def to_reg(expr: str, src: D.DType, dst: D.DType) -> str:
    """``expr`` (held as ``reg(src)``) converted to ``reg(dst)``; the text unchanged when
    that is already its type."""
    return expr if reg(src) is reg(dst) else f"{expr}.to({tl_name(reg(dst))})"


def _as(x: str, dtype: D.DType, ct: D.DType) -> str:
    """``x`` (held as ``reg(dtype)``) as compute type ``ct``."""
    return x if reg(dtype) is ct else f"{x}.to({tl_name(ct)})"


def unary_expr(op: str, x: str, x_dtype: D.DType, out_dtype: D.DType) -> str:
    """A declared unary op; computes as eager (``_compute``: CT, FAST for half outputs)."""
    if op == "bitwise_not" and x_dtype is D.bool_:
        return f"({x} == 0)"
    ct = _ct(x_dtype if out_dtype is D.bool_ else out_dtype)
    fast = out_dtype is D.float16 or out_dtype is D.bfloat16
    result = D.bool_ if op in UNARY_BOOL_OUT else ct
    return to_reg(f'_unary({_as(x, x_dtype, ct)}, "{op}", {fast})', result, out_dtype)


def binary_expr(op: str, a: tuple, b: tuple, ct_dtype: D.DType) -> str:
    """A declared binary op on operands ``(expression, dtype)`` held in their ``reg``
    types, computed in ``_ct`` of ``ct_dtype`` (the op's promoted operand dtype). The
    result's register type is ``binary_result_reg``."""
    ct = _ct(ct_dtype)
    return (f'_binary({_as(a[0], a[1], ct)}, {_as(b[0], b[1], ct)}, "{op}", '
            f'{_NBITS.get(ct.name, 0)})')


def binary_result_reg(op: str, ct_dtype: D.DType, out_dtype: D.DType) -> D.DType:
    """The register type ``binary_expr`` leaves its result in (before ``to_reg``)."""
    if out_dtype is D.bool_:
        return D.bool_ if BINARY[op].ints == "bool" else _ct(ct_dtype)
    return _ct(ct_dtype)


def cast_expr(x: str, src: D.DType, dst: D.DType) -> str:
    """``cast(x, dst)``: through ``dst`` as the eager copy kernel (``x.to(CT).to(OT)``),
    then held as ``reg(dst)``."""
    if reg(src) is reg(dst) and (dst is reg(dst) or src is dst):
        return x  # the same register type, and no narrower storage type to round through
    if not src.is_floating_point and dst is not reg(dst):
        # integers to a half type through float32 (exact below 2**24; Triton's interpreter
        # cannot convert integers to half types directly); 0 and 1 need no rounding
        x = f"{x}.to(tl.float32)"
        return x if src is D.bool_ else f"{x}.to({tl_name(dst)}).to(tl.float32)"
    ct = _ct(src)
    through = x if reg(src) is ct else f"{x}.to({tl_name(ct)})"
    through = f"{through}.to({tl_name(dst)})"
    return through if dst is reg(dst) else f"{through}.to({tl_name(reg(dst))})"


def where_expr(c: str, a: str, b: str, out_dtype: D.DType) -> str:
    """``where(cond, a, b)`` with ``a``/``b`` already in ``reg(out_dtype)``."""
    return f"tl.where({c} != 0, {a}, {b})"


def clamp_expr(x: str, lo: str | None, hi: str | None) -> str:
    """``clamp``: NaN stays NaN (comparisons with NaN are false), as the eager kernel."""
    r = x
    if lo is not None:
        r = f"tl.where({r} < {lo}, {lo}, {r})"
    if hi is not None:
        r = f"tl.where({r} > {hi}, {hi}, {r})"
    return r


def reduce_expr(op: str, x: str, x_dtype: D.DType, out_dtype: D.DType) -> str:
    """A row's ``sum``/``amax``/``amin`` of the vector ``x`` (lanes outside the row's
    ``cmask`` ignored); amax/amin propagate NaN as torch does."""
    mask = "cmask"
    if op == "sum":
        return f"tl.sum(tl.where({mask}, {_as(x, x_dtype, reg(out_dtype))}, 0), axis=0)"
    pick, fill = ("tl.max", '-float("inf")') if op == "amax" else ("tl.min", 'float("inf")')
    return (f"tl.where(tl.max(tl.where({mask}, ({x} != {x}).to(tl.int32), 0), axis=0) > 0, "
            f'float("nan"), {pick}(tl.where({mask}, {x}, {fill}), axis=0))')
