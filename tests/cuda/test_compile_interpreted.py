"""genesis-cuda's compiler checked without a GPU: ``test_compile_codegen.py`` and
``test_compile_model.py`` run under the Triton interpreter (``TRITON_INTERPRET=1``) in a
fresh process, since the interpreter is chosen when Triton is first imported. Not marked
``cuda``: CI runs it."""

from __future__ import annotations

import pytest
from interpreted import run_under_interpreter

pytest.importorskip("triton")  # the kernels are Triton code; CI machines may lack it


def test_compiler_codegen_under_the_interpreter():
    run_under_interpreter("tests/cuda/test_compile_codegen.py", "tests/cuda/test_compile_model.py")
