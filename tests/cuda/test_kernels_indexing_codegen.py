"""The guarded indexing kernels compile for Hopper (sm_90) without a GPU, with the
specialisation Triton gives their arguments at run time.

The Triton interpreter runs the kernels' logic but not Triton's compiler: it would not see,
for example, that an integer argument equal to 1 (a dim of size 1, a 0-d input) arrives as a
compile-time constant, on which tensor methods such as ``.to`` do not exist. Triton compiles
to PTX and runs ptxas (bundled with Triton) on the CPU. Checked: the bounds guard records an
error with one 64-bit compare-and-swap, and a walk over checked offsets (OP 0) has none.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("compiles GPU code; the interpreter swaps in CPU stand-ins",
                allow_module_level=True)
triton = pytest.importorskip("triton")

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from genesis_cuda.kernels import _launch, indexing  # noqa: E402

HOPPER = GPUTarget("cuda", 90, 32)


def _ptx(fn, pointers: dict, consts: dict, floats=()) -> str:
    sig = {n: "i32" for n in fn.arg_names}
    sig.update(pointers)
    sig.update({n: "fp64" for n in floats})
    sig.update({n: "constexpr" for n in consts})
    try:
        src = ASTSource(fn=fn, signature=sig, constexprs=consts)
    except TypeError as exc:  # another Triton's spelling of a compile request
        pytest.skip(f"this Triton's ASTSource takes other arguments: {exc}")
    return triton.compile(src, target=HOPPER, options=_launch.COMPILE_OPTIONS).asm["ptx"]


def _cas_count(ptx: str) -> int:
    return sum(1 for line in ptx.splitlines() if "atom" in line and ".cas." in line)


# Integer arguments equal to 1 become constants: a dim of size 1 (size), a unit stride (scale).
_UNIT = {"size": 1, "scale": 1}


@pytest.mark.parametrize("unit", [False, True], ids=["sizes", "size=1"])
@pytest.mark.parametrize("big", [False, True], ids=["i32", "i64"])
def test_gather_guard_compiles(unit, big):
    ptrs = {"out": "*bf16", "src": "*bf16", "idx": "*i64", "err": "*i64"}
    consts = {"OP": 1, "BLOCK": 1024, "BIG": big} | (_UNIT if unit else {})
    assert _cas_count(_ptx(indexing._gather_kernel, ptrs, consts)) == 1


def test_checked_offsets_walk_has_no_atomics():
    ptrs = {"out": "*fp32", "src": "*fp32", "idx": "*i64", "err": "*fp32"}
    consts = {"OP": 0, "BLOCK": 1024, "BIG": False, "size": 0}
    assert _cas_count(_ptx(indexing._gather_kernel, ptrs, consts)) == 0


@pytest.mark.parametrize("add", [False, True])
def test_scatter_guard_compiles(add):
    ptrs = {"dst": "*fp32", "src": "*fp32", "idx": "*i32", "err": "*i64"}
    consts = {"OP": 2, "SCALAR": False, "ADD": add, "BLOCK": 1024, "BIG": False} | _UNIT
    assert _cas_count(_ptx(indexing._scatter_kernel, ptrs, consts, ("value_f",))) == 1


def test_offsets_guard_compiles():
    ptrs = {"off": "*i64", "idx": "*i64", "err": "*i64"}
    consts = {"OP": 5, "FIRST": False, "BLOCK": 1024, "BIG": False, "size": 1, "stride": 1}
    assert _cas_count(_ptx(indexing._offsets_kernel, ptrs, consts)) == 1
