"""The test run's summary folds the GPU skips into one line (tests/conftest.py).

A GPU-less run of the suite skips hundreds of ``cuda`` tests across many files; pytest's
``-ra`` summary used to print one "SKIPPED ... no CUDA GPU" line per file. The suite's
conftest is copied into a scratch project with GPU tests in three files and one ordinary skip,
and pytest runs there with the repository's options.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import genesis

ROOT = Path(__file__).resolve().parents[2]

GPU_TEST = """
import pytest

@pytest.mark.cuda
def test_on_gpu():
    pass

@pytest.mark.multigpu
def test_on_two_gpus():
    pass
"""

ORDINARY_SKIP = """
import pytest

def test_skips_itself():
    pytest.skip("a reason of its own")
"""


@pytest.mark.skipif(genesis.cuda.is_available(), reason="with a GPU the cuda tests run")
def test_gpu_skips_make_one_summary_line_and_other_skips_stay(tmp_path):
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    shutil.copy(ROOT / "pytest.ini", tmp_path / "pytest.ini")
    (tmp_path / "tests").mkdir()
    for name in ("a", "b", "c"):
        (tmp_path / "tests" / f"test_gpu_{name}.py").write_text(GPU_TEST)
    (tmp_path / "tests" / "test_plain.py").write_text(ORDINARY_SKIP)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "pythonpath="],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    lines = result.stdout.splitlines()
    skipped = [line for line in lines if line.startswith("SKIPPED")]
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(skipped) == 2, result.stdout
    assert any(line.startswith("SKIPPED [6] conftest.py: no CUDA GPU") for line in skipped), \
        skipped
    assert any("test_plain.py" in line and "a reason of its own" in line
               for line in skipped), skipped
    assert "7 skipped" in lines[-1], lines[-1]
