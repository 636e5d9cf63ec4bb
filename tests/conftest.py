"""Test-suite wide configuration: markers, GPU skips, Hypothesis profiles.

Markers:
    cuda      needs a CUDA GPU; skipped when ``genesis.cuda.is_available()`` is False.
    multigpu  needs two or more CUDA GPUs; skipped when ``genesis.cuda.device_count() < 2``.
    slow      takes more than a few seconds; runs by default (deselect with ``-m "not slow"``).
    gpu_timing  asserts on measured GPU time: other processes' kernels on the same GPU make
              it slow, so ``tools/device/gpu_suite.sh`` runs these alone after the shards.

Without a GPU the skips of the ``cuda``/``multigpu`` tests are reported on one summary line
(``SKIPPED [N] tests/conftest.py: no CUDA GPU ...``), not one line per test file; other skips
are reported as pytest reports them.
"""

from __future__ import annotations

import functools
import os

import pytest

MARKERS = {
    "cuda": "needs a CUDA GPU (skipped when genesis.cuda.is_available() is False)",
    "multigpu": "needs two or more CUDA GPUs (skipped when genesis.cuda.device_count() < 2)",
    "slow": "takes more than a few seconds (deselect with -m 'not slow')",
    "gpu_timing": "asserts on measured GPU time (run alone, not beside other GPU work)",
}


def pytest_configure(config: pytest.Config) -> None:
    for name, help_text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {help_text}")
    _register_hypothesis_profiles()


def _register_hypothesis_profiles() -> None:
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:
        return
    # The first call of an op compiles or warms caches: wall-clock deadlines only make flakes.
    settings.register_profile(
        "genesis", deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.register_profile(
        "genesis-ci",
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    default = "genesis-ci" if os.environ.get("CI") else "genesis"
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", default))


@functools.cache
def cuda_device_count() -> tuple[int, str]:
    """(number of usable CUDA devices, reason when 0) — asked once per session."""
    try:
        import genesis.cuda
    except Exception as exc:  # a broken core fails its own tests; here it just means "no GPU"
        return 0, f"genesis.cuda is not importable ({type(exc).__name__}: {exc})"
    try:
        if not genesis.cuda.is_available():
            return 0, "no CUDA GPU: genesis.cuda.is_available() is False"
        return int(genesis.cuda.device_count()), ""
    except Exception as exc:
        return 0, f"genesis.cuda raised {type(exc).__name__}: {exc}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [
        item
        for item in items
        if item.get_closest_marker("cuda") or item.get_closest_marker("multigpu")
    ]
    if not gpu_items:
        return  # CPU-only selection: do not even import the CUDA plugin
    count, reason = cuda_device_count()
    for item in gpu_items:
        if count == 0:
            item.add_marker(pytest.mark.skip(reason=reason))
        elif item.get_closest_marker("multigpu") and count < 2:
            item.add_marker(pytest.mark.skip(reason=f"needs 2+ CUDA GPUs, found {count}"))
        else:
            continue
        item.stash[_SKIPPED_FOR_GPU] = True


_SKIPPED_FOR_GPU = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    """Report a GPU test's skip at this file, not at the test's own file: pytest's summary
    (``-ra``) folds skips by file and reason, so hundreds of GPU skips make one line."""
    report = yield
    if report.skipped and item.stash.get(_SKIPPED_FOR_GPU, False) \
            and isinstance(report.longrepr, tuple):
        report.longrepr = (__file__, None, report.longrepr[2])
    return report
