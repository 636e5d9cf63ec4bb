"""`pip install packages/genesis-core` alone gives a working CPU framework, and nothing more.

The core wheel is built offline and installed with --no-deps into a scratch venv that sees this
interpreter's torch and numpy but none of the other genesis distributions (see scratch_venv).
One fresh interpreter runs every check (importing torch is the slow part) and reports JSON.
"""

from __future__ import annotations

import json

import pytest
from scratch_venv import PACKAGES, build_wheel, make_venv, pip_install, run_in

PROBE = r"""
import json, sys
import genesis

result = {"file": genesis.__file__,
          "loaded_at_import": sorted(m for m in sys.modules
                                     if m == "genesis_cuda" or m == "genesis.backends.cpu")}
result["sum"] = genesis.tensor([1.0, 2.0]).sum().item()
x = genesis.tensor([1.0, 2.0, 3.0], requires_grad=True)
(x * x).sum().backward()
result["grad"] = x.grad.tolist()
result["installed"] = genesis.backends.installed()
result["available"] = genesis.backends.available()
result["cuda"] = [genesis.cuda.is_available(), genesis.cuda.device_count()]
try:
    genesis.zeros(2, device="cuda")
except Exception as exc:
    result["cuda_error"] = f"{type(exc).__name__}: {exc}"
try:
    import genesis.nn
except ModuleNotFoundError as exc:
    result["nn_error"] = exc.name
else:
    result["nn_error"] = None
    result["nn_file"] = getattr(genesis.nn, "__file__", None)
try:
    genesis.optim
except AttributeError as exc:
    result["optim_attr_error"] = str(exc)
try:
    genesis.cuda.amp
except AttributeError as exc:
    result["cuda_amp_error"] = str(exc)
result["accelerator"] = repr(genesis.accelerator.current_accelerator())
import os
result["convert_script"] = os.path.exists(
    os.path.join(os.path.dirname(sys.executable), "genesis-convert-torch"))
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def core_alone(tmp_path_factory):
    """The probe's report from a venv holding only the genesis-core wheel."""
    root = tmp_path_factory.mktemp("core-alone")
    wheel = build_wheel(PACKAGES / "genesis-core", root / "wheels")
    python = make_venv(root)
    pip_install(python, wheel)
    proc = run_in(python, PROBE, cwd=root)
    assert proc.returncode == 0, f"probe failed:\n{proc.stdout}\n{proc.stderr}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["venv"] = str((root / "venv").resolve())
    return result


def test_genesis_comes_from_the_core_wheel(core_alone):
    assert core_alone["file"].startswith(core_alone["venv"]), (
        f"genesis was imported from {core_alone['file']}, not from the scratch venv")


def test_core_alone_works_on_the_cpu(core_alone):
    assert core_alone["sum"] == 3.0
    assert core_alone["grad"] == [2.0, 4.0, 6.0]


def test_genesis_nn_is_not_there(core_alone):
    assert core_alone["nn_error"] in ("genesis.nn", "genesis"), (
        "`import genesis.nn` should raise ModuleNotFoundError in a core-only install; "
        f"it imported {core_alone.get('nn_file')}")


def test_only_the_cpu_backend_is_registered_and_nothing_loads_at_import(core_alone):
    assert core_alone["installed"] == ["cpu"]
    assert core_alone["available"] == ["cpu"]
    assert core_alone["loaded_at_import"] == []


def test_cuda_without_plugin_names_the_package_to_install(core_alone):
    assert core_alone["cuda"] == [False, 0]
    assert "pip install genesis-cuda" in core_alone.get("cuda_error", ""), core_alone


def test_missing_subpackage_attribute_names_the_distribution(core_alone):
    assert "pip install genesis-nn" in core_alone.get("optim_attr_error", ""), core_alone


def test_torch_spellings_of_other_distributions_name_them(core_alone):
    assert "pip install genesis-nn" in core_alone.get("cuda_amp_error", ""), core_alone
    assert core_alone["accelerator"] == "None"  # no accelerator plugin installed


def test_the_checkpoint_converter_is_a_console_script_of_core(core_alone):
    assert core_alone["convert_script"] is True
