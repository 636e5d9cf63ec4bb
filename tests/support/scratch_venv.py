"""Helpers for tests that install wheels into scratch virtual environments, offline.

A scratch venv must see the running interpreter's torch and numpy (downloading torch in a test
is out of the question) but none of the genesis distributions installed here, editable or not.
``--system-site-packages`` would not do: it processes the site directories' ``.pth`` files,
which is exactly how editable installs put ``packages/*/src`` on ``sys.path``. Instead the venv
gets a ``.pth`` listing one "shim" directory per site directory holding torch or numpy; a shim
holds symlinks to everything in that site directory except genesis packages, genesis
dist-infos and ``.pth`` files. Lines of a ``.pth`` are plain path entries, so nothing inside a
shim is processed further.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = REPO / "packages"


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run ``cmd``; on failure raise with its output in the message."""
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        raise AssertionError(
            f"command failed ({proc.returncode}): {' '.join(map(str, cmd))}\n"
            f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
        )
    return proc


_built: dict[Path, Path] = {}


def build_wheel(project: Path, out_dir: Path) -> Path:
    """Build ``project``'s wheel offline with this interpreter's hatchling (the packages' build
    backend), once per test session: later calls for the same project return the same wheel."""
    project = project.resolve()
    if project not in _built:
        out_dir.mkdir(parents=True, exist_ok=True)
        before = set(out_dir.glob("*.whl"))
        run([sys.executable, "-m", "hatchling", "build", "--target", "wheel",
             "--directory", str(out_dir)], cwd=project)
        (_built[project],) = set(out_dir.glob("*.whl")) - before
    return _built[project]


def _is_genesis_entry(name: str) -> bool:
    lower = name.lower()
    return (lower.startswith(("genesis", "_genesis", "__editable__.genesis"))
            or lower.endswith(".pth"))


def _site_dir_of(module_name: str) -> Path:
    module = __import__(module_name)
    return Path(module.__file__).resolve().parent.parent


def make_venv(root: Path, share: tuple[str, ...] = ("torch", "numpy")) -> Path:
    """Create a venv under ``root`` that sees only ``share`` (and what they need) from here.

    Returns the venv's python executable.
    """
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(env_dir)
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(run([str(python), "-I", "-c", purelib]).stdout.strip())
    shims = []
    for i, site_dir in enumerate(dict.fromkeys(_site_dir_of(m) for m in share)):
        shim = root / f"shim{i}"
        shim.mkdir()
        for entry in site_dir.iterdir():
            if not _is_genesis_entry(entry.name):
                (shim / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
        shims.append(shim)
    (site / "_genesis_test_shared.pth").write_text("".join(f"{s}\n" for s in shims))
    return python


def pip_install(python: Path, *requirements: str | Path) -> None:
    """Install into the venv of ``python`` with this interpreter's pip, offline, no deps."""
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--quiet", *map(str, requirements)])


def run_in(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``code`` in isolated mode (-I: no PYTHONPATH, no user site, no cwd on sys.path)."""
    return subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True,
                          cwd=cwd, timeout=120)
