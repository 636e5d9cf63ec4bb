"""The decode and split-K matmul kernels compile for Hopper (sm_90) without a GPU, into the
code their speed depends on.

Triton compiles to PTX and runs ptxas (bundled with Triton) on the CPU. The arguments get the
specialisation Triton gives them at run time (16-byte aligned pointers, sizes and strides
divisible by 16, unit strides as constants). Checked: the tensor-core path of the small-M
kernel pipelines its loads (``cp.async`` over several stages of shared memory) into
``wgmma``; its M = 1 path loads the weight in 16-byte vectors; the split-K kernel takes its
tiles through TMA into ``wgmma``.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("compiles GPU code; the interpreter swaps in CPU stand-ins",
                allow_module_level=True)
triton = pytest.importorskip("triton")
mm = pytest.importorskip("genesis_cuda.kernels.matmul")

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from genesis_cuda.kernels import _launch  # noqa: E402
from genesis_cuda.kernels import matmul_small as ms  # noqa: E402
from genesis_cuda.kernels.matmul_tuning import SPLITK_TILES  # noqa: E402

HOPPER = GPUTarget("cuda", 90, 32)


def _compile(fn, sig, consts, aligned, **options):
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    for n in consts:
        sig[n] = "constexpr"
    try:
        src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    except TypeError as exc:  # another Triton's spelling of a compile request
        pytest.skip(f"this Triton's ASTSource takes other arguments: {exc}")
    return triton.compile(src, target=HOPPER, options={**_launch.COMPILE_OPTIONS, **options})


def _small_m(block_m, partial=False, gated=False, pdl=False):
    bn, bk, warps, stages = ms.SMALL_M_TILES[block_m][:4]
    sig = {n: "*bf16" for n in ("x_ptr", "w_ptr", "out_ptr", "bias_ptr")}
    sig.update({"ws_ptr": "*fp32", "count_ptr": "*i32"})
    sig.update({n: "i32" for n in ("M", "N", "K", "k_per", "split", "sxm", "sxk", "swk", "swn",
                                   "sbias")})
    consts = {"sxk": 1, "swk": 1, "sbias": 1, "HAS_BIAS": True, "PARTIAL": partial,
              "PREC": None, "GATED": gated, "PDL": pdl, "BLOCK_M": block_m, "BLOCK_N": bn,
              "BLOCK_K": bk}
    return _compile(ms._small_m_kernel, sig, consts,
                    ("x_ptr", "w_ptr", "out_ptr", "bias_ptr", "ws_ptr", "count_ptr", "N", "K",
                     "k_per", "sxm", "swn"),
                    num_warps=warps, num_stages=stages, launch_pdl=pdl)


@pytest.mark.parametrize("block_m", [1, 16])
@pytest.mark.parametrize("partial", [False, True])
def test_small_m_dependent_launch_waits_before_it_reads_or_writes(block_m, partial):
    """Launched with programmatic dependent launch, the kernel may run beside the one before
    it: only L2 prefetches of the weight come before ``griddepcontrol.wait``; every load,
    store and atomic comes after it."""
    ptx = _small_m(block_m, partial, pdl=True).asm["ptx"]
    body = ptx[ptx.index(".entry"):]
    wait = body.index("griddepcontrol.wait")
    assert "prefetch.global.L2" in body[:wait]
    assert "griddepcontrol.launch_dependents" in body[wait:]
    for op in ("ld.global", "st.global", "atom.", "red.", "cp.async"):
        assert op not in body[:wait], op
    assert "st.global" in body[wait:]
    plain = _small_m(block_m, partial).asm["ptx"]
    assert "griddepcontrol" not in plain and "prefetch" not in plain


def test_small_m_tensor_core_path_is_pipelined():
    k = _small_m(16)
    assert "warp_group_dot" in k.asm["ttgir"]  # wgmma, the weight tile as its M side
    assert k.asm["ptx"].count("cp.async") > 0  # loads run stages ahead into shared memory
    assert k.metadata.shared >= 2 * (64 * 128 + 128 * 16) * 2  # at least two stages


@pytest.mark.parametrize("gated", [False, True])
def test_small_m_gemv_loads_vectors(gated):
    # gated (SwiGLU folded in): the gate and up tiles load as vectors too
    ptx = _small_m(1, gated=gated).asm["ptx"]
    assert ptx.count("ld.global.v4") >= ptx.count("ld.global.b16")


@pytest.mark.parametrize("block_m", [1, 16])
def test_small_m_split_counts_chunks_once_per_program(block_m):
    # split-K in one launch: a barrier, then one acq_rel atomic add on the n-block's count
    # (a scalar: one thread issues it) and the count's reset; the partials read back from
    # L2 in a loop unrolled 8 times
    ptx = _small_m(block_m, partial=True).asm["ptx"]
    assert ptx.count("atom.global.gpu.acq_rel.add") + ptx.count("atom.acq_rel.gpu.global.add") \
        + ptx.count("atom.global.acq_rel.gpu.add") == 1, [ln for ln in ptx.splitlines()
                                                         if "atom" in ln]
    assert "bar.sync" in ptx and ptx.count("ld.global.cg") >= 8


@pytest.mark.parametrize("tile", SPLITK_TILES, ids=str)
def test_split_k_kernel_uses_tma_and_wgmma(tile):
    bm, bn, bk, gm, st, nw = tile
    sig = {"a_desc": f"tensordesc<bf16[{bk}, {bm}]>", "b_desc": f"tensordesc<bf16[{bk}, {bn}]>",
           "c_desc": f"tensordesc<bf16[{bm}, {bn}]>", "ws_ptr": "*fp32", "M": "i32",
           "N": "i32", "K": "i32", "whole": "i32", "split": "i32", "tiles_per": "i32",
           "bias": "*bf16", "sbias": "i32"}
    consts = {"HAS_BIAS": False, "A_T": True, "B_T": False, "BLOCK_M": bm, "BLOCK_N": bn,
              "BLOCK_K": bk, "GROUP_M": gm}  # the weight gradient's layout: grad.T @ x
    k = _compile(mm._mm_tma_splitk_kernel, sig, consts, ("ws_ptr", "M", "N", "K"),
                 num_warps=nw, num_stages=st)
    ttgir = k.asm["ttgir"]
    assert "async_tma_copy" in ttgir and "warp_group_dot" in ttgir
    # the K loop is pipelined: TMA loads run stages ahead of the wgmma that reads them
    assert k.metadata.shared >= 2 * (bm * bk + bk * bn) * 2


def test_tile_reduce_kernel_compiles():
    sig = {"ws_ptr": "*fp32", "c_ptr": "*bf16", "bias_ptr": "*bf16", "M": "i32", "N": "i32",
           "whole": "i32", "split": "i32", "scm": "i32", "scn": "i32", "sbias": "i32"}
    consts = {"scn": 1, "sbias": 1, "HAS_BIAS": True, "BLOCK_M": 128, "BLOCK_N": 256,
              "GROUP_M": 8, "ROWS": 4}
    k = _compile(mm._tile_reduce_kernel, sig, consts, ("ws_ptr", "c_ptr", "bias_ptr", "N",
                                                       "scm"), num_warps=4)
    ptx = k.asm["ptx"]
    assert ptx.count("ld.global.v4") >= 8  # the partials in 16-byte vectors, unrolled


def test_tuner_spin_kernel_reads_the_global_timer():
    # the autotuner holds the stream with it while the host queues the timed calls
    from genesis_cuda.kernels import matmul_tuning as mt

    ptx = _compile(mt._spin_kernel, {"ns": "i64"}, {}, (), num_warps=1).asm["ptx"]
    assert ptx.count("%globaltimer") >= 2 and "bra" in ptx
