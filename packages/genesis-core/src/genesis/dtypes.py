"""Data types and PyTorch's type-promotion rules.

A ``DType`` is a small immutable descriptor; the ten module-level instances
(``genesis.float32`` ...) are the only ones that exist, so dtypes compare by identity.
"""

from __future__ import annotations

_BOOL, _INT, _FLOAT = 0, 1, 2  # promotion categories, lowest to highest


class DType:
    """A tensor element type such as ``genesis.float32``."""

    # (is_floating_point is a plain attribute, not a property: every op's host path reads it)
    __slots__ = ("name", "itemsize", "category", "is_signed", "_rank", "is_floating_point")

    def __init__(self, name: str, itemsize: int, category: int, is_signed: bool, rank: int):
        self.name = name
        self.itemsize = itemsize
        self.category = category
        self.is_signed = is_signed
        self._rank = rank  # order used by promote_types inside one category
        self.is_floating_point = category == _FLOAT

    @property
    def is_complex(self) -> bool:
        return False

    def to_real(self) -> DType:
        return self

    def __repr__(self) -> str:
        # str() must end in the bare type name: Triton reads element types that way.
        return f"genesis.{self.name}"

    def __reduce__(self):
        return (dtype_from_name, (self.name,))


bool_ = DType("bool", 1, _BOOL, False, 0)
uint8 = DType("uint8", 1, _INT, False, 1)
int8 = DType("int8", 1, _INT, True, 1)
int16 = DType("int16", 2, _INT, True, 2)
int32 = DType("int32", 4, _INT, True, 3)
int64 = DType("int64", 8, _INT, True, 4)
float16 = DType("float16", 2, _FLOAT, True, 1)
bfloat16 = DType("bfloat16", 2, _FLOAT, True, 1)
float32 = DType("float32", 4, _FLOAT, True, 2)
float64 = DType("float64", 8, _FLOAT, True, 3)

ALL_DTYPES = (bool_, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64)
_BY_NAME = {d.name: d for d in ALL_DTYPES}
_BY_NAME.update(
    {"bool_": bool_, "half": float16, "float": float32, "double": float64, "long": int64,
     "int": int32, "short": int16}
)

# Short aliases exported at top level, as torch has them.
half, float_, double, long, int_, short = float16, float32, float64, int64, int32, int16


def dtype_from_name(name: str) -> DType:
    """Return the dtype called ``name`` (``"float32"``, ``"half"``, ...)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise TypeError(f"unknown dtype name {name!r}; known: {sorted(_BY_NAME)}") from None


def promote_types(a: DType, b: DType) -> DType:
    """The smallest dtype both ``a`` and ``b`` convert to without losing range or kind.

    Same table as ``torch.promote_types``.

    Args:
        a: a dtype.
        b: another dtype.

    Returns:
        The promoted dtype.
    """
    if a is b:
        return a
    if a.category != b.category:
        return a if a.category > b.category else b  # float beats int beats bool
    if a.category == _FLOAT:
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if a._rank > b._rank else b
    # Both integral: uint8 with a signed type of the same size needs the next size up.
    if a is uint8 or b is uint8:
        other = b if a is uint8 else a
        return int16 if other is int8 else other
    return a if a._rank > b._rank else b


def _combine_categories(higher: DType | None, lower: DType | None) -> DType | None:
    """torch's rule for merging a higher-priority result with a lower-priority one."""
    if higher is None:
        return lower
    if lower is None or higher.category == _FLOAT:
        return higher
    if higher is bool_ or lower.category == _FLOAT:
        return promote_types(higher, lower)
    return higher


class _DefaultDType:
    """Process-wide, as torch's (not per thread: worker threads see the main thread's)."""

    value: DType = float32


_default = _DefaultDType()


def get_default_dtype() -> DType:
    """The floating dtype that Python floats and new float tensors get (float32 unless set).

    Returns:
        A floating dtype.
    """
    return _default.value


def set_default_dtype(d: DType) -> None:
    """Set the default floating dtype (only floating dtypes are allowed, as in torch).

    Args:
        d: float16, bfloat16, float32 or float64.
    """
    if not isinstance(d, DType) or not d.is_floating_point:
        raise TypeError(f"set_default_dtype needs a floating dtype, got {d!r}")
    _default.value = d


def scalar_dtype(value) -> DType:
    """The dtype a bare Python number takes on its own (bool, int64 or the default float)."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return int64
    if isinstance(value, float):
        return _default.value
    raise TypeError(f"expected a Python bool, int or float, got {type(value).__name__}")


def result_type(*operands) -> DType:
    """The dtype an elementwise op on ``operands`` computes in, exactly as ``torch.result_type``.

    Tensors with dimensions outrank 0-d tensors, which outrank Python scalars; within a
    class dtypes are promoted, and a lower class only wins by a higher category
    (e.g. an int tensor plus ``1.5`` gives the default float dtype).

    Args:
        *operands: tensors and Python numbers.

    Returns:
        A dtype.
    """
    dim_result = zero_result = scalar_result = None
    for op in operands:
        dt = getattr(op, "dtype", None)
        if isinstance(dt, DType):
            if op.ndim:
                dim_result = dt if dim_result is None else promote_types(dim_result, dt)
            else:
                zero_result = dt if zero_result is None else promote_types(zero_result, dt)
        else:
            dt = scalar_dtype(op)
            scalar_result = dt if scalar_result is None else promote_types(scalar_result, dt)
    out = _combine_categories(dim_result, _combine_categories(zero_result, scalar_result))
    if out is None:
        raise TypeError("result_type needs at least one operand")
    return out


def can_cast(from_: DType, to: DType) -> bool:
    """Whether ``from_`` may be cast to ``to`` by in-place ops (no category is lowered).

    Args:
        from_: the source dtype.
        to: the target dtype.

    Returns:
        A Python bool.
    """
    return from_.category <= to.category


def saturate(value: int, dtype: DType) -> int:
    """``value`` limited to the range of the integer ``dtype`` (bool: 0 and 1).

    For ops that compare with an integer bound in exact arithmetic: a bound beyond the
    range acts as the range's end (``clamp`` of a uint8 tensor with ``min=-1`` changes
    nothing), instead of wrapping (-1 would become 255) or overflowing.

    Args:
        value: a Python int.
        dtype: an integer or bool dtype.

    Returns:
        A Python int within ``dtype``'s range.
    """
    if dtype.category == _BOOL:
        lo, hi = 0, 1
    elif dtype.is_signed:
        lo, hi = -(1 << (8 * dtype.itemsize - 1)), (1 << (8 * dtype.itemsize - 1)) - 1
    else:
        lo, hi = 0, (1 << (8 * dtype.itemsize)) - 1
    return lo if value < lo else hi if value > hi else value
