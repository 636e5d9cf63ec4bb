"""The ``multi_tensor_copy_`` kernel compiles for Hopper (sm_90) without a GPU: aligned
contiguous rows are copied with 16-byte vector loads and stores, and a program divides only
to find its row (three scalar divisions), never per element. Triton compiles to PTX and runs
ptxas (bundled with Triton) on the CPU; the interpreter
(``test_multi_tensor_copy_interpreted.py``) runs the kernel's logic, not this compiler."""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("compiles GPU code; the interpreter swaps in CPU stand-ins",
                allow_module_level=True)
triton = pytest.importorskip("triton")

import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from genesis_cuda.kernels import _launch, optim  # noqa: E402
from genesis_cuda.kernels import multi_tensor_copy as mtc  # noqa: E402

HOPPER = GPUTarget("cuda", 90, 32)


def _ptx(dst, src) -> str:
    consts = {"DST": dst, "SRC": src, "G": mtc.G, "CHUNK": optim.CHUNK, "BLOCK": optim.BLOCK}
    sig = {"tab_ptr": "*i64", "T": "i32"} | {n: "constexpr" for n in consts}
    try:
        source = ASTSource(fn=mtc._copy_kernel, signature=sig, constexprs=consts)
    except TypeError as exc:  # another Triton's spelling of a compile request
        pytest.skip(f"this Triton's ASTSource takes other arguments: {exc}")
    return triton.compile(source, target=HOPPER, options=_launch.COMPILE_OPTIONS).asm["ptx"]


def _instructions(ptx: str, part: str) -> list:
    return [word for line in ptx.splitlines() for word in line.split() if part in word]


@pytest.mark.parametrize("dst,src", [(tl.bfloat16, tl.bfloat16), (tl.float32, tl.bfloat16),
                                     (tl.bfloat16, tl.float32), (tl.float16, tl.float64)],
                         ids=str)
def test_copy_kernel_compiles_with_vector_loads_and_no_division_per_element(dst, src):
    ptx = _ptx(dst, src)
    assert {"ld.global.v4.b32", "ld.global.v2.b64"} & set(_instructions(ptx, "ld.global."))
    assert "st.global.v4.b32" in _instructions(ptx, "st.global.")
    divisions = _instructions(ptx, "div.")
    assert divisions.count("div.s64") == 3, divisions  # the row, then its two outer dims
