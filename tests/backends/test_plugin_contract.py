"""The backend plugin contract, exercised by installing plugin packages (docs/backends.md).

A scratch venv gets genesis-core's wheel plus two plugins that live in this folder:
``genesis-toy`` (device type ``'toy'``, kernels delegated to the CPU backend, arrays boxed so
genesis can only read ``shape`` off them) and ``genesis-toy-broken`` (its module raises
ImportError). Each check runs in a fresh interpreter, so "not imported at ``import genesis``"
means what it says.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scratch_venv import PACKAGES, build_wheel, make_venv, pip_install, run_in

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def plugin_venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugins")
    wheels = root / "wheels"
    core = build_wheel(PACKAGES / "genesis-core", wheels)
    toy = build_wheel(HERE / "toy_plugin", wheels)
    broken = build_wheel(HERE / "broken_plugin", wheels)
    python = make_venv(root)
    pip_install(python, core, toy, broken)
    return root, python


def probe(plugin_venv, code: str):
    """Run ``code`` in the plugin venv; it prints one JSON line, which is returned."""
    root, python = plugin_venv
    proc = run_in(python, "import json, sys\n" + code, cwd=root)
    assert proc.returncode == 0, f"probe failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_plugins_are_discovered_but_not_imported_at_import_genesis(plugin_venv):
    result = probe(plugin_venv, """
import genesis
import genesis.backends as backends
before = sorted(m for m in sys.modules if m.startswith("genesis_toy"))
installed = backends.installed()
after_listing = sorted(m for m in sys.modules if m.startswith("genesis_toy"))
print(json.dumps({"before": before, "installed": installed, "after_listing": after_listing,
                  "loaded": backends.is_loaded("toy")}))
""")
    assert result["before"] == [], "a plugin was imported by `import genesis`"
    assert result["after_listing"] == [], "listing installed backends imported a plugin"
    assert not result["loaded"]
    assert {"cpu", "toy", "broken"} <= set(result["installed"])


def test_available_loads_working_plugins_and_skips_broken_ones(plugin_venv):
    result = probe(plugin_venv, """
import genesis
print(json.dumps({"available": genesis.backends.available(),
                  "toy_imported": "genesis_toy.backend" in sys.modules}))
""")
    assert "toy" in result["available"] and "cpu" in result["available"]
    assert "broken" not in result["available"]
    assert result["toy_imported"]


def test_toy_device_runs_ops_and_backward_and_refuses_mixing(plugin_venv):
    result = probe(plugin_venv, """
import genesis

dev = genesis.device("toy")
x = genesis.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device=dev, requires_grad=True)
w = genesis.tensor([[0.5], [-1.0], [2.0]], device="toy", requires_grad=True)
y = (x @ w).relu() * 2.0 + 1.0          # (2, 1)
loss = (y.sum() + x.exp().mean() + genesis.softmax(x, dim=1)[:, 0].sum())
loss.backward()
try:
    genesis.ones(2, device="toy") + genesis.ones(2)
except Exception as exc:
    mixed_error = f"{type(exc).__name__}: {exc}"
else:
    mixed_error = None
print(json.dumps({
    "x_device": str(x.device), "y_device": str(y.device), "grad_device": str(x.grad.device),
    "y": y.tolist(), "loss": loss.item(), "x_grad": x.grad.tolist(), "w_grad": w.grad.tolist(),
    "cpu_copy": x.detach().to("cpu").tolist(), "cpu_copy_device": str(x.to("cpu").device),
    "toy_calls": dict(genesis.backends.get_backend("toy").calls),
    "mixed_error": mixed_error,
}))
""")
    import torch

    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    w = torch.tensor([[0.5], [-1.0], [2.0]], requires_grad=True)
    y = (x @ w).relu() * 2.0 + 1.0
    loss = y.sum() + x.exp().mean() + torch.softmax(x, dim=1)[:, 0].sum()
    loss.backward()

    assert result["x_device"] == result["y_device"] == result["grad_device"] == "toy:0"
    assert result["cpu_copy_device"] == "cpu"
    assert result["cpu_copy"] == x.tolist()
    assert result["toy_calls"].get("matmul", 0) >= 1, result["toy_calls"]  # ran on the plugin
    # an op mixing devices is refused with both devices named
    assert result["mixed_error"] is not None, "adding toy and cpu tensors should raise"
    assert "toy" in result["mixed_error"] and "cpu" in result["mixed_error"], result["mixed_error"]
    torch.testing.assert_close(torch.tensor(result["y"]), y.detach())
    torch.testing.assert_close(torch.tensor(result["loss"]), loss.detach())
    torch.testing.assert_close(torch.tensor(result["x_grad"]), x.grad)
    torch.testing.assert_close(torch.tensor(result["w_grad"]), w.grad)


def test_broken_plugin_error_names_distribution_and_reason(plugin_venv):
    result = probe(plugin_venv, """
import genesis
try:
    genesis.zeros(2, device="broken")
except Exception as exc:
    print(json.dumps({"type": type(exc).__name__, "error": str(exc)}))
else:
    print(json.dumps({"type": None}))
""")
    assert result["type"] == "BackendUnavailableError", result
    assert "genesis-toy-broken" in result["error"], result["error"]
    assert "libtoydriver.so.1" in result["error"], result["error"]


def test_cuda_without_plugin_says_which_package_to_install(plugin_venv):
    result = probe(plugin_venv, """
import genesis
answers = [genesis.cuda.is_available(), genesis.cuda.device_count()]
try:
    genesis.zeros(2, device="cuda")
except Exception as exc:
    print(json.dumps({"answers": answers, "type": type(exc).__name__, "error": str(exc)}))
else:
    print(json.dumps({"answers": answers, "type": None}))
""")
    assert result["answers"] == [False, 0]
    assert result["type"] == "BackendUnavailableError", result
    assert "pip install genesis-cuda" in result["error"], result["error"]


def test_unknown_device_type_says_how_to_provide_one(plugin_venv):
    result = probe(plugin_venv, """
import genesis
try:
    genesis.zeros(2, device="npu")
except Exception as exc:
    print(json.dumps({"error": str(exc)}))
""")
    assert "'npu'" in result["error"] and "genesis.backends" in result["error"], result["error"]
