"""``Pointer``: what a Triton launch reads of an array (``data_ptr()`` and ``dtype``), with
no memory behind it, for the launcher tests that run without a GPU
(``tests/cuda/test_kernels_launch_{keys,sites}.py``)."""

from __future__ import annotations

from genesis import dtypes as D


class Pointer:
    """An array as a launch sees it: a raw address and a dtype.

    Args:
        address: the integer ``data_ptr()`` returns.
        dtype: a genesis dtype (float32 by default).

    Example:
        >>> launcher.launch(("k",), 0, (1,), (Pointer(0x1000), 32))
    """

    def __init__(self, address: int, dtype: D.DType = D.float32):
        self.address, self.dtype = address, dtype

    def data_ptr(self) -> int:
        return self.address
