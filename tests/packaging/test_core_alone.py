"""`pip install packages/genesis-core` alone gives a working CPU framework, and nothing more.

The core wheel is built offline and installed with --no-deps into a scratch venv that sees this
interpreter's torch and numpy but none of the other genesis distributions (see scratch_venv).
"""

from __future__ import annotations

import json

import pytest
from scratch_venv import PACKAGES, build_wheel, make_venv, pip_install, run_in

PROBE = r"""
import json, sys
import genesis

result = {"file": genesis.__file__, "sum": genesis.tensor([1.0, 2.0]).sum().item()}
x = genesis.tensor([1.0, 2.0, 3.0], requires_grad=True)
(x * x).sum().backward()
result["grad"] = x.grad.tolist()
result["backends_loaded_at_import"] = [
    name for name in ("genesis_cuda", "genesis.backends.cpu") if name in sys.modules
]
try:
    import genesis.nn
except ModuleNotFoundError as exc:
    result["nn_error"] = exc.name
else:
    result["nn_error"] = None
    result["nn_file"] = getattr(genesis.nn, "__file__", None)
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("core-alone")
    wheel = build_wheel(PACKAGES / "genesis-core", root / "wheels")
    python = make_venv(root)
    pip_install(python, wheel)
    return root, python


def test_core_wheel_alone_works_on_cpu_and_has_no_nn(core_venv):
    root, python = core_venv
    proc = run_in(python, PROBE, cwd=root)
    assert proc.returncode == 0, f"probe failed:\n{proc.stdout}\n{proc.stderr}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])

    venv_dir = (root / "venv").resolve()
    assert str(venv_dir) in result["file"], (
        f"genesis was imported from {result['file']}, not from the scratch venv {venv_dir}")
    assert result["sum"] == 3.0
    assert result["grad"] == [2.0, 4.0, 6.0]
    assert "genesis_cuda" not in result["backends_loaded_at_import"]
    assert result["nn_error"] in ("genesis.nn", "genesis"), (
        f"`import genesis.nn` should fail with ModuleNotFoundError in a core-only install, "
        f"got {result}")


def test_core_alone_registers_only_the_cpu_backend(core_venv):
    root, python = core_venv
    code = ("import json, genesis.backends as b; "
            "print(json.dumps([b.installed(), b.available()]))")
    proc = run_in(python, code, cwd=root)
    assert proc.returncode == 0, proc.stderr
    installed, available = json.loads(proc.stdout.strip().splitlines()[-1])
    assert installed == ["cpu"]
    assert available == ["cpu"]


def test_cuda_without_plugin_names_the_package_to_install(core_venv):
    root, python = core_venv
    code = ("import genesis\n"
            "assert genesis.cuda.is_available() is False and genesis.cuda.device_count() == 0\n"
            "try:\n"
            "    genesis.zeros(2, device='cuda')\n"
            "except Exception as exc:\n"
            "    print(type(exc).__name__, exc)\n"
            "else:\n"
            "    print('no error')\n")
    proc = run_in(python, code, cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert "pip install genesis-cuda" in proc.stdout, proc.stdout
