"""Fused kernels are registered by op name, not methods of the contract (``genesis.fused_op``).

The contract's lists hold no fused op; a backend's registered kernel is what runs, and where
it has none or it declines (``NotImplemented``) the row's composite runs; docs/backends.md lists
every declared kernel with its arguments; docs/architecture.md names the hops from
``F.scaled_dot_product_attention`` to its kernels, and each hop exists.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

import genesis
import genesis.nn.functional as F
from genesis.backends.base import OPTIONAL, REQUIRED, Backend
from genesis.backends.cpu import CPUBackend
from genesis.fused_declarations import FUSED_OPS as CORE_FUSED_OPS
from genesis.fused_declarations import RMS_NORM, SOFTMAX
from genesis.fused_op import call_fused
from genesis.nn.fused_declarations import FUSED_OPS as NN_FUSED_OPS

ROOT = Path(__file__).resolve().parents[2]
ROWS = CORE_FUSED_OPS + NN_FUSED_OPS
KERNEL_NAMES = {name for row in ROWS for name in row.kernels if name is not None}


def test_the_contract_lists_no_fused_kernel():
    contract = set(REQUIRED) | set(OPTIONAL)
    assert not KERNEL_NAMES & contract, sorted(KERNEL_NAMES & contract)
    assert not [name for name in KERNEL_NAMES if hasattr(Backend, name)]
    assert {"register_kernel", "kernel"} <= set(OPTIONAL)
    assert len(REQUIRED) == 29 and len(OPTIONAL) == 42  # (was 29 + 58 with the fused ones;
    # the 40th is compile_graph, the compiler hook; the 41st index_add_, the embedding's
    # gradient in place; the 42nd tracing, the context genesis.compile traces in)


def test_rows_are_declared_once_with_distinct_kernels():
    names = [row.name for row in ROWS]
    assert len(names) == len(set(names)), names
    for row in ROWS:
        assert row.autocast in (None, "fp32", "lower"), row
        assert row.kernels == (row.name, row.backward_kernel)


class _Counting(CPUBackend):
    """The CPU backend with an rms_norm kernel of its own that counts its calls."""

    calls: list = []


def _counting_rms_norm(x, weight, eps):
    _Counting.calls.append(tuple(x.shape))
    if x.shape[-1] > 4:
        return NotImplemented  # declined: the composite runs
    return RMS_NORM.composite(CPUBackend(), x, weight, eps)


_Counting.register_kernel("rms_norm", _counting_rms_norm)


def test_a_registered_kernel_is_called_and_may_decline():
    backend, x = _Counting(), torch.randn(3, 4)
    _Counting.calls.clear()
    y, rstd = RMS_NORM.forward(backend, x, None, 1e-6)
    assert _Counting.calls == [(3, 4)]
    assert_close(y, torch.nn.functional.rms_norm(x, (4,), None, 1e-6))
    wide = torch.randn(2, 6)
    y, _ = RMS_NORM.forward(backend, wide, None, 1e-6)  # the kernel declines
    assert _Counting.calls == [(3, 4), (2, 6)]
    assert_close(y, torch.nn.functional.rms_norm(wide, (6,), None, 1e-6))
    # the parent keeps its own table; the subclass inherits the parent's kernels
    assert CPUBackend().kernel("rms_norm") is None
    assert backend.kernel("softmax") is CPUBackend().kernel("softmax") is not None


def test_tensor_ops_reach_the_registered_kernel(monkeypatch):
    calls = []

    def counting_softmax(x, dim, log):
        calls.append((dim, log))
        return SOFTMAX.composite(CPUBackend(), x, dim, log)

    monkeypatch.setitem(CPUBackend._kernels, "softmax", counting_softmax)
    x = genesis.randn(2, 3)
    assert_close(genesis.log_softmax(x, 1).numpy(), torch.log_softmax(torch.tensor(x.numpy()),
                                                                      1).numpy())
    assert calls == [(1, True)]


def test_call_fused_without_kernel_or_composite_returns_not_implemented():
    assert call_fused(CPUBackend(), "no_such_kernel", None, ()) is NotImplemented
    assert call_fused(CPUBackend(), "no_such_kernel", lambda b, v: v + 1, (1,)) == 2


def test_register_kernel_refuses_what_is_not_a_named_callable():
    with pytest.raises(TypeError, match="takes a str and a callable, got str and int"):
        _Counting.register_kernel("rms_norm", 3)
    with pytest.raises(TypeError, match="got NoneType and function"):
        _Counting.register_kernel(None, _counting_rms_norm)


# ------------------------------------------------------------------- the docs
def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def _arguments(row, kernel: str) -> tuple[str, ...]:
    """A kernel's arguments: its composite's without the backend (attention has no array
    composite: the CPU backend's kernel of that name)."""
    composite = row.composite if kernel == row.name else row.backward_composite
    if composite is None:
        return tuple(inspect.signature(CPUBackend().kernel(kernel)).parameters)
    return tuple(inspect.signature(composite).parameters)[1:]


def test_backends_page_lists_every_fused_kernel_with_its_arguments():
    text = _section((ROOT / "docs" / "backends.md").read_text(),
                    "Fused kernels, registered by op name")
    rows = re.findall(r"^\| `([a-z_]+)\(([^)]*)\)`", text, re.MULTILINE)
    documented = {name: tuple(p.strip() for p in params.split(",")) for name, params in rows}
    assert set(documented) == KERNEL_NAMES
    for row in ROWS:
        for kernel in filter(None, row.kernels):
            assert documented[kernel] == _arguments(row, kernel), kernel


def test_architecture_page_names_real_hops_to_flash_attention():
    """Each hop ``path`` + ``name`` in the table of docs/architecture.md defines that name."""
    text = _section((ROOT / "docs" / "architecture.md").read_text(),
                    "A fused op, top to bottom")
    hops = re.findall(r"^\| \d \| .*?\[`([\w.]+)`\]\(\.\./(packages/[\w/.-]+)\)", text,
                      re.MULTILINE)
    assert len(hops) >= 4, hops
    for name, path in hops:
        source = (ROOT / path).read_text()
        last = name.rpartition(".")[2]
        assert re.search(rf"^(def |class )?{last}\b", source, re.MULTILINE) or \
            re.search(rf"^\s+def {last}\b", source, re.MULTILINE), (name, path)
    assert F.scaled_dot_product_attention.__module__ == "genesis.nn.functional.attention"
