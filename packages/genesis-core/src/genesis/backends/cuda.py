"""``genesis.backends.cuda``: torch's ``torch.backends.cuda`` switches, and the float32
matmul precision (``genesis.set_float32_matmul_precision``).

What genesis does with them: they are recorded and read back exactly as torch's are (setting
``matmul.allow_tf32`` moves the precision between ``"highest"`` and ``"high"``, and the
reverse), so programs that set them run unchanged. genesis's float32 matrix products stay
full float32 (``"highest"``, IEEE products, float32 accumulation) whatever is set: TF32 is
not used, so a program asking for the faster, less precise mode gets the precise one.

Example:
    >>> genesis.backends.cuda.matmul.allow_tf32 = True
    >>> genesis.get_float32_matmul_precision()
    'high'
"""

from __future__ import annotations

from genesis.backends import registry

_PRECISIONS = ("highest", "high", "medium")
_precision = "highest"


def set_float32_matmul_precision(precision: str) -> None:
    """Set the internal precision of float32 matrix products, as torch's.

    genesis records it (``get_float32_matmul_precision`` returns it, and
    ``genesis.backends.cuda.matmul.allow_tf32`` is True unless it is ``"highest"``); its
    float32 matmuls stay full float32 whatever is set (see ``genesis.backends.cuda``).

    Args:
        precision: ``"highest"``, ``"high"`` or ``"medium"``.

    Example:
        >>> genesis.set_float32_matmul_precision("high")
    """
    global _precision
    if precision not in _PRECISIONS:
        raise ValueError(f"set_float32_matmul_precision: {precision!r} is not one of "
                         f"{', '.join(map(repr, _PRECISIONS))}")
    _precision = precision


def get_float32_matmul_precision() -> str:
    """The float32 matrix-product precision last set (``"highest"`` by default).

    Returns:
        ``"highest"``, ``"high"`` or ``"medium"``.
    """
    return _precision


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return value


class MatmulFlags:
    """``genesis.backends.cuda.matmul``: torch's cuBLAS switches, recorded (see the module).

    Attributes:
        allow_tf32: whether float32 products may use TF32 (tied to the float32 matmul
            precision: True unless it is ``"highest"``). genesis never uses TF32.
        allow_fp16_reduced_precision_reduction: torch's switch for float16 products with
            reduced-precision reductions (default True). genesis accumulates in float32.
        allow_bf16_reduced_precision_reduction: the same for bfloat16 (default True).
    """

    __slots__ = ("_fp16_reduced", "_bf16_reduced")

    def __init__(self) -> None:
        self._fp16_reduced = True
        self._bf16_reduced = True

    @property
    def allow_tf32(self) -> bool:
        return _precision != "highest"

    @allow_tf32.setter
    def allow_tf32(self, value: bool) -> None:
        set_float32_matmul_precision(
            "high" if _check_bool("matmul.allow_tf32", value) else "highest")

    @property
    def allow_fp16_reduced_precision_reduction(self) -> bool:
        return self._fp16_reduced

    @allow_fp16_reduced_precision_reduction.setter
    def allow_fp16_reduced_precision_reduction(self, value: bool) -> None:
        self._fp16_reduced = _check_bool("matmul.allow_fp16_reduced_precision_reduction",
                                         value)

    @property
    def allow_bf16_reduced_precision_reduction(self) -> bool:
        return self._bf16_reduced

    @allow_bf16_reduced_precision_reduction.setter
    def allow_bf16_reduced_precision_reduction(self, value: bool) -> None:
        self._bf16_reduced = _check_bool("matmul.allow_bf16_reduced_precision_reduction",
                                         value)


matmul = MatmulFlags()


def is_built() -> bool:
    """Whether a CUDA backend plugin (genesis-cuda) is installed, as torch's reports a CUDA
    build.

    Returns:
        A Python bool (the plugin is not loaded to answer).
    """
    return "cuda" in registry.installed()
