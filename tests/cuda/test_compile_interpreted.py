"""genesis-cuda's compiler checked without a GPU: ``test_compile_codegen.py`` and
``test_compile_model.py`` run under the Triton interpreter (``TRITON_INTERPRET=1``) in a
fresh process, since the interpreter is chosen when Triton is first imported. Not marked
``cuda``: CI runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")  # the kernels are Triton code; CI machines may lack it

ROOT = Path(__file__).resolve().parents[2]


def test_compiler_codegen_under_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/cuda/test_compile_codegen.py", "tests/cuda/test_compile_model.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout, run.stdout[-2000:]
