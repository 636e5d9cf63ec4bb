"""Programmatic dependent launch (``_launch.dependent_launch``): which launches are compiled
with Triton's ``launch_pdl`` and when it is on. Runs on the CPU (no kernel is launched);
that the kernels give the same results with it is what the GPU tests of each kernel check,
on Hopper, where it is on."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from genesis_cuda.kernels import (  # noqa: E402
    _launch,
    add_rms_norm,
    attention_decode,
    matmul_small,
    rotary,
)
from genesis_cuda.kernels.matmul_tuning import plan_site  # noqa: E402

DECODE_KERNELS = [add_rms_norm._add_rms_fwd, rotary._rotary, attention_decode._kv_append,
                  attention_decode._attn_decode, attention_decode._attn_decode_combine,
                  matmul_small._small_m_kernel]


@pytest.mark.parametrize("fn", DECODE_KERNELS, ids=lambda f: f.__name__)
def test_launcher_compiles_with_launch_pdl_exactly_when_the_pdl_argument_is_true(fn):
    launcher = _launch.Launcher(fn, num_warps=4)
    args = [0] * len(fn.arg_names)
    args[fn.arg_names.index("PDL")] = True
    assert launcher._options(args) == {**_launch.COMPILE_OPTIONS, "num_warps": 4,
                                       "launch_pdl": True}
    args[fn.arg_names.index("PDL")] = False
    assert launcher._options(args) == {**_launch.COMPILE_OPTIONS, "num_warps": 4}


def test_kernels_without_a_pdl_argument_keep_their_options():
    from genesis_cuda.kernels import softmax

    fn = next(v for v in vars(softmax).values()
              if hasattr(v, "arg_names") and "PDL" not in v.arg_names)
    assert _launch.Launcher(fn, num_warps=8)._options([True] * len(fn.arg_names)) == \
        {**_launch.COMPILE_OPTIONS, "num_warps": 8}


def test_a_matmul_plan_takes_launch_pdl_from_its_pdl_constexpr():
    fn = matmul_small._small_m_kernel
    constexprs = dict(HAS_BIAS=False, PARTIAL=False, PREC=None, GATED=False, PDL=True,
                      BLOCK_M=1, BLOCK_N=8, BLOCK_K=256)
    on, on_tail = plan_site(fn, constexprs, num_warps=4)
    off, off_tail = plan_site(fn, {**constexprs, "PDL": False}, num_warps=4)
    assert on.launcher is off.launcher  # one launcher (and cache) per kernel and options
    args = [0] * (len(fn.arg_names) - len(on_tail))
    assert on.launcher._options(args + list(on_tail)).get("launch_pdl") is True
    assert "launch_pdl" not in off.launcher._options(args + list(off_tail))
    # launch_pdl is a compile option, not one of the kernel's arguments: the constexprs
    # handed to the compiled launcher are the kernel's own, PDL's value among them
    assert on_tail == (False, False, None, False, True, 1, 8, 256)


def test_dependent_launch_switched_off_by_the_environment_flag(monkeypatch):
    monkeypatch.setattr(_launch, "_dependent_launch", {})
    monkeypatch.setattr(_launch, "INTERPRET", False)
    monkeypatch.setattr(_launch, "_TRITON_HAS_GDC", True)
    monkeypatch.setattr(_launch, "get_device_capability", lambda index: (9, 0))
    assert _launch.dependent_launch(0) is True  # Hopper, a Triton with gdc_wait
    monkeypatch.setattr(_launch, "_dependent_launch", {})
    monkeypatch.setattr(_launch, "DEPENDENT", False)
    assert _launch.dependent_launch(0) is False


@pytest.mark.parametrize("capability, triton_has_gdc", [((8, 0), True), ((9, 0), False)])
def test_no_dependent_launch_before_hopper_or_without_tritons_gdc(monkeypatch, capability,
                                                                   triton_has_gdc):
    monkeypatch.setattr(_launch, "_dependent_launch", {})
    monkeypatch.setattr(_launch, "INTERPRET", False)
    monkeypatch.setattr(_launch, "_TRITON_HAS_GDC", triton_has_gdc)
    monkeypatch.setattr(_launch, "get_device_capability", lambda index: capability)
    assert _launch.dependent_launch(0) is False
