"""Run test files under the Triton interpreter (``TRITON_INTERPRET=1``) in a fresh process:
the interpreter is chosen when Triton is first imported, so it cannot be switched on inside
the running suite. Used by the ``tests/cuda/test_*_interpreted.py`` files, which CI runs
without a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_under_interpreter(*test_files: str, timeout: int = 600) -> str:
    """Run pytest on ``test_files`` (paths from the repository root) with the interpreter on
    and check that it passed.

    Args:
        test_files: the test files to run.
        timeout: seconds before the run is killed.

    Returns:
        The run's standard output (its summary line included), for further checks.

    Example:
        >>> out = run_under_interpreter("tests/cuda/test_kernels_index_bounds.py")
        >>> assert "skipped" not in out
    """
    env = dict(os.environ, TRITON_INTERPRET="1")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *test_files],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout, run.stdout[-2000:]
    return run.stdout
