"""genesis-cuda's ``multi_tensor_copy_`` kernel checked without a GPU:
``test_kernels_multi_tensor_copy.py`` run under the Triton interpreter (``TRITON_INTERPRET=1``)
in a fresh process, since the interpreter is chosen when Triton is first imported. Not marked
``cuda``: CI runs it."""

from __future__ import annotations

import pytest
from interpreted import run_under_interpreter

pytest.importorskip("triton")  # the kernels are Triton code; CI machines may lack it


def test_multi_tensor_copy_kernel_under_the_interpreter():
    out = run_under_interpreter("tests/cuda/test_kernels_multi_tensor_copy.py")
    assert " passed" in out
