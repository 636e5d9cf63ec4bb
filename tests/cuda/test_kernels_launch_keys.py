"""``_launch.Launcher``: every kernel of genesis-cuda launches through it, and a launch keyed
from its arguments (``launcher(grid, *args, **constexprs)``) reuses a compiled kernel only
where Triton would. Runs on the CPU: the kernel's compiled form is a recording stand-in.
That the kernels give torch's results through it is what the GPU tests of each family check.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
_launch = pytest.importorskip("genesis_cuda.kernels._launch")

from launch_pointer import Pointer  # noqa: E402

from genesis import dtypes as D  # noqa: E402

KERNELS_DIR = Path(_launch.__file__).parent
LAUNCH_HELPERS = {"_launch.py"}  # Launcher


def test_every_kernel_launches_through_a_launcher():
    """A plain ``kernel[grid](...)`` binds its arguments in Triton's JIT on every call; only
    the launch helpers call it, on a cache miss."""
    plain = []
    for path in sorted(KERNELS_DIR.glob("*.py")):
        if path.name in LAUNCH_HELPERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
                plain.append(f"{path.name}:{node.lineno}")
    assert plain == []


@triton.jit
def _probe(x, n, scale, flag, BLOCK: tl.constexpr):
    pass


class _Compiler:
    """Stands in for ``_probe[grid]``: records each compile, returns a compiled kernel whose
    launcher records each launch."""

    def __init__(self):
        self.compiles, self.launches = [], []

    def __getitem__(self, grid):
        def compile_and_launch(*args, **opts):
            self.compiles.append((args, opts))
            self.launches.append(args)
            return SimpleNamespace(run=self._run, function=None, packed_metadata=None)
        return compile_and_launch

    def _run(self, g0, g1, g2, stream, *head_and_args):
        self.launches.append(head_and_args[5:])  # after (function, metadata, 3 x None)


@pytest.fixture
def probe(monkeypatch):
    if _launch.INTERPRET:
        pytest.skip("under the Triton interpreter launches are not keyed")
    monkeypatch.setattr(_launch, "INTERPRET", False)
    monkeypatch.setattr(_launch, "DIRECT", True)
    monkeypatch.setattr(_launch, "_stream_handle", lambda device: 0)
    launcher = _launch.Launcher(_probe)
    launcher.fn = _Compiler()
    return launcher


def test_a_launch_with_the_same_classes_reuses_the_compiled_kernel(probe):
    probe((1,), Pointer(0x1000), 40, 2.5, True, BLOCK=64)
    probe((1,), Pointer(0x2000), 56, 0.5, False, BLOCK=64)  # 40, 56: multiples of 16
    assert len(probe.fn.compiles) == 1
    x, *rest = probe.fn.launches[-1]  # the second call, launched directly
    assert x.address == 0x2000 and rest == [56, 0.5, False, 64]


@pytest.mark.parametrize("change", [
    "n is 1", "n not a multiple of 16", "n needs int64", "n needs uint64",
    "pointer not 16-byte aligned", "pointer dtype", "constexpr", "float becomes int",
])
def test_a_launch_triton_would_compile_again_compiles_again(probe, change):
    base = dict(x=Pointer(0x1000), n=32, scale=1.5, flag=True, BLOCK=64)
    probe((1,), *base.values())
    other = dict(base)
    if change.startswith("n "):
        other["n"] = {"n is 1": 1, "n not a multiple of 16": 33, "n needs int64": 2**31 + 32,
                      "n needs uint64": 2**63 + 32}[change]
    elif change == "pointer not 16-byte aligned":
        other["x"] = Pointer(0x1004)
    elif change == "pointer dtype":
        other["x"] = Pointer(0x1000, D.bfloat16)
    elif change == "constexpr":
        other["BLOCK"] = 128
    else:
        other["scale"] = 2
    probe((1,), *other.values())
    assert len(probe.fn.compiles) == 2


def test_constexprs_by_name_are_the_same_launch_as_by_position(probe):
    probe((1,), Pointer(0x1000), 32, 1.0, True, BLOCK=64)
    probe((1,), Pointer(0x1000), 32, 1.0, True, 64)
    assert len(probe.fn.compiles) == 1 and len(probe.fn.launches) == 2


def test_an_argument_triton_could_not_key_is_refused(probe):
    with pytest.raises(TypeError, match="kernel argument must be .* got str"):
        probe((1,), Pointer(0x1000), "32", 1.0, True, BLOCK=64)


VALUES = [0, 1, 2, 15, 16, 17, -1, -16, -17, 2**31 - 1, 2**31 - 16, 2**31, 2**31 + 16,
          -2**31, -2**31 - 16, 2**63 - 1, 2**63, 2**63 + 16, 2**64 - 1]


def test_int_class_groups_integers_as_tritons_own_specialisation():
    """Two integers share a class exactly when Triton's specialisation of them is the same
    (checked against the installed Triton's own function)."""
    try:
        from triton._C.libtriton import native_specialize_impl
        from triton.backends.compiler import BaseBackend
    except ImportError:
        pytest.skip("this Triton has no native_specialize_impl to compare with")

    def tritons(v):
        return native_specialize_impl(BaseBackend, v, False, True, True)

    for a in VALUES:
        for b in VALUES:
            assert (_launch.int_class(a) == _launch.int_class(b)) == (tritons(a) == tritons(b)), \
                (a, b, tritons(a), tritons(b))


def test_every_kernel_compiles_with_fp_fusion(probe):
    """a * b + c as one fused multiply-add, whatever this Triton's default (3.10 turns it
    off): every launcher asks for it, the shared per-options ones (attention, matmul) too."""
    probe((1,), Pointer(0x1000), 32, 1.0, True, BLOCK=64)
    (_, opts), = probe.fn.compiles
    assert opts["enable_fp_fusion"] is True
    assert _launch.launcher(_probe, num_warps=4).opts["enable_fp_fusion"] is True
