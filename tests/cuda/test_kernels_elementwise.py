"""Differential tests of genesis_cuda's elementwise Triton kernels against torch CUDA.

Inputs are torch tensors of any stride pattern seen through ``kernel_arrays.dev`` (no
copy); runs under the Triton interpreter on the CPU too (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import pytest
import torch

from genesis import dtypes as D

pytestmark = pytest.mark.cuda
pytest.importorskip("triton")  # the kernels are Triton code; CI machines may lack it

from kernel_arrays import DEV, TORCH, check, dev, host, make, sync  # noqa: E402

from genesis_cuda.kernels import elementwise as ew  # noqa: E402

FLOATS = [D.float32, D.float16, D.bfloat16, D.float64]
INTS = [D.uint8, D.int8, D.int16, D.int32, D.int64]
ALL = [D.bool_] + INTS + FLOATS

FLOAT_UNARY = ["exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos",
               "tanh", "sigmoid", "erf", "floor", "ceil", "round", "neg", "abs", "sign", "relu",
               "isnan", "isinf", "isfinite", "logical_not"]
POSITIVE = {"log", "log2", "sqrt", "rsqrt", "log1p"}
INT_UNARY = ["neg", "abs", "sign", "relu", "logical_not", "bitwise_not", "isnan", "isfinite"]

TORCH_UNARY = {"relu": torch.relu, "isnan": torch.isnan, "isinf": torch.isinf,
               "isfinite": torch.isfinite}


def ref_unary(op, t):
    fn = TORCH_UNARY.get(op) or getattr(torch, op)
    return fn(t)


# ------------------------------------------------------------------ unary
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("op", FLOAT_UNARY)
def test_unary_float(op, dtype):
    t = make((37, 129), dtype, low=0.1 if op in POSITIVE else None, seed=1)
    if op in ("isnan", "isinf", "isfinite"):
        t[0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0])
    check(ew.unary(op, dev(t)), ref_unary(op, t))


@pytest.mark.parametrize("dtype", INTS + [D.bool_], ids=str)
@pytest.mark.parametrize("op", INT_UNARY)
def test_unary_int(op, dtype):
    if dtype is D.bool_ and op in ("neg", "abs", "sign", "relu"):
        pytest.skip("torch rejects this op on bool")
    if dtype is D.uint8 and op in ("neg", "abs", "sign"):
        t = make((1000,), dtype)
    else:
        t = make((1000,), dtype)
    check(ew.unary(op, dev(t)), ref_unary(op, t))


def _layouts(dtype):
    """(name, torch view) pairs covering contiguous, transposed, sliced, broadcast, 0-d, empty."""
    base = make((64, 96), dtype, seed=3)
    big = make((3, 40, 50), dtype, seed=4)
    return [
        ("contig", base),
        ("transposed", base.t()),
        ("sliced", base[::2, 1:90:3]),
        ("bcast_row", make((96,), dtype, seed=5).expand(64, 96)),
        ("bcast_col", make((64, 1), dtype, seed=6).expand(64, 96)),
        ("scalar_bcast", make((), dtype, seed=7).expand(5, 7)),
        ("zero_d", make((), dtype, seed=8)),
        ("empty", make((0, 5), dtype)),
        ("batched_perm", big.permute(2, 0, 1)),
        ("batched_slice", big[:, ::3, 1:]),
        ("five_d", make((2, 3, 4, 5, 6), dtype, seed=9).permute(4, 2, 0, 3, 1)),
        ("six_d", make((2, 3, 2, 3, 2, 5), dtype, seed=10).transpose(0, 5)),
    ]


@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16, D.int64], ids=str)
def test_unary_layouts(dtype):
    for _name, t in _layouts(dtype):
        op = "neg"
        check(ew.unary(op, dev(t)), ref_unary(op, t))
        if dtype.is_floating_point:
            check(ew.unary("exp", dev(t)), torch.exp(t))


def test_unary_out_inplace_strided():
    base = make((48, 80), D.float32, seed=11)
    ref = torch.exp(base.t())
    view = base.t()
    a = dev(view)
    got = ew.unary("exp", a, out=a)
    assert got is a
    sync()
    torch.testing.assert_close(view, ref)


def test_unary_kernel_cached():
    assert ew.unary_kernel("exp") is ew.unary_kernel("exp")
    t = make((16,), D.float32)
    check(ew.unary_kernel("sigmoid")(dev(t)), torch.sigmoid(t))


# ------------------------------------------------------------------ binary
ARITH = ["add", "sub", "mul", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
         "logical_and", "logical_or", "logical_xor"]
FLOAT_ONLY = ["div", "atan2", "pow"]
INT_ONLY = ["bitwise_and", "bitwise_or", "bitwise_xor"]
DIVLIKE = ["floor_divide", "remainder"]


def ref_binary(op, a, b):
    if op == "div":
        return torch.div(a, b)
    if not isinstance(b, torch.Tensor) and op in ("maximum", "minimum", "atan2"):
        b = torch.tensor(b, dtype=a.dtype, device=a.device)
    return getattr(torch, op)(a, b)


def _binary_ok(op, dtype):
    if dtype is D.bool_:
        return op not in ("sub", "pow", "floor_divide", "remainder", "div", "atan2")
    if dtype.is_floating_point:
        return op not in INT_ONLY
    return op not in FLOAT_ONLY


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("op", ARITH + FLOAT_ONLY + INT_ONLY + DIVLIKE)
def test_binary(op, dtype):
    if not _binary_ok(op, dtype):
        pytest.skip("op not defined for dtype")
    a = make((33, 65), dtype, seed=12)
    if op == "pow" and dtype.is_floating_point:
        a = make((33, 65), dtype, low=0.5, seed=12)
    b = make((33, 65), dtype, seed=13)
    if op in DIVLIKE:
        b = torch.where(b == 0, torch.ones_like(b), b)
        if dtype.is_floating_point:
            b = make((33, 65), dtype, low=0.25, seed=13) * torch.where(
                make((33, 65), D.bool_, seed=14), 1, -1).to(TORCH[dtype])
    if op == "pow" and not dtype.is_floating_point:
        b = make((33, 65), dtype, low=0, high=5, seed=13)
    check(ew.binary(op, dev(a), dev(b)), ref_binary(op, a, b))


def test_int64_division_and_power_are_exact_beyond_float_precision():
    """Floor division, remainder and power of int64 stay in integer arithmetic: through a
    float, values past 2**53 (2**24 for float32) would come out a few units off."""
    a = torch.tensor([123456789012, -123456789012, 2**53 + 1, -(2**62) - 7, 7, -7], device=DEV)
    b = torch.tensor([7, 7, 3, 1000003, -2, 2], device=DEV)
    for op in ("floor_divide", "remainder"):
        check(ew.binary(op, dev(a), dev(b)), getattr(torch, op)(a, b))
        check(ew.binary(op, dev(a), 1000003), getattr(torch, op)(a, 1000003))
    base = torch.tensor([3, -3, 2, 7, -1, 2], device=DEV)
    exp = torch.tensor([39, 39, 62, 22, 101, -1], device=DEV)
    check(ew.binary("pow", dev(base), dev(exp)), torch.pow(base, exp))


@pytest.mark.parametrize("dtype", [D.int32, D.int64], ids=str)
def test_most_negative_over_minus_one_wraps(dtype):
    """MIN // -1 is MIN and MIN % -1 is 0, as genesis's CPU backend gives (the hardware's
    result is unspecified there and torch's CPU kernel traps: the values are written out)."""
    low = torch.iinfo(TORCH[dtype]).min
    a = torch.tensor([low, 9, -9], dtype=TORCH[dtype], device=DEV)
    b = torch.tensor([-1, -1, 2], dtype=TORCH[dtype], device=DEV)
    assert host(ew.binary("floor_divide", dev(a), dev(b))).tolist() == [low, -9, -5]
    assert host(ew.binary("remainder", dev(a), dev(b))).tolist() == [0, 0, 1]
    assert host(ew.binary("floor_divide", dev(a), -1)).tolist() == [low, -9, 9]
    assert host(ew.binary("remainder", dev(a), -1)).tolist() == [0, 0, 0]


def test_integer_pow_refuses_a_negative_python_exponent():
    a = torch.tensor([1, 2, 3], device=DEV)
    with pytest.raises(RuntimeError, match="Integers to negative integer powers"):
        ew.binary("pow", dev(a), -1)
    check(ew.binary("pow", dev(a.float()), -1), torch.pow(a.float(), -1))


@pytest.mark.parametrize("dtype", [D.float32, D.float64], ids=str)
def test_atan2_quadrants_zeros_infinities_and_nan(dtype):
    """Every quadrant and axis, signed zeros, infinities and NaN (the interpreter has no
    libdevice; its atan2 is written in Triton and must agree too)."""
    inf, nan = float("inf"), float("nan")
    ys = [1.0, 1.0, -1.0, -1.0, 0.0, -0.0, 0.0, -0.0, 3.0, -3.0, inf, -inf, inf, 2.0, nan,
          1e-30, 5.0]
    xs = [1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0, -1.0, 0.0, 0.0, 2.0, -2.0, inf, -inf, 1.0,
          1e30, 1e-3]
    y = torch.tensor(ys, dtype=TORCH[dtype], device=DEV)
    x = torch.tensor(xs, dtype=TORCH[dtype], device=DEV)
    got = ew.binary("atan2", dev(y), dev(x))
    check(got, torch.atan2(y, x))


SCALARS = {D.bool_: True, D.uint8: 3, D.int8: -3, D.int16: 7, D.int32: -5, D.int64: 2**40,
           D.float16: 0.75, D.bfloat16: -1.5, D.float32: 1.3, D.float64: 0.1}


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("op", ["add", "mul", "sub", "div", "lt", "maximum", "floor_divide",
                                "remainder", "pow", "bitwise_and"])
def test_binary_scalar(op, dtype):
    if not _binary_ok(op, dtype):
        pytest.skip("op not defined for dtype")
    a = make((5, 300), dtype, low=0.5 if op == "pow" else None, seed=15)
    s = SCALARS[dtype]
    if op == "pow":
        s = 3 if not dtype.is_floating_point else 1.7
    if op in DIVLIKE and dtype is D.int8:
        s = -3
    if dtype is D.int64 and op in ("mul", "pow"):
        s = 3
    check(ew.binary(op, dev(a), s), ref_binary(op, a, s))


@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16, D.int32, D.bool_], ids=str)
@pytest.mark.parametrize("op", ["add", "lt", "mul"])
def test_binary_layouts(op, dtype):
    for _name, t in _layouts(dtype):
        other = make(tuple(t.shape), dtype, seed=16)
        check(ew.binary(op, dev(t), dev(other)), ref_binary(op, t, other))
        check(ew.binary(op, dev(other), dev(t)), ref_binary(op, other, t))
        if t.numel():
            # both operands non-contiguous, different patterns
            check(ew.binary(op, dev(t), dev(t)), ref_binary(op, t, t))


def test_binary_transposed_both_ways():
    a = make((130, 257), D.float32, seed=17)
    b = make((257, 130), D.float32, seed=18).t()
    check(ew.binary("add", dev(a), dev(b)), a + b)
    out = torch.empty(257, 130, device=DEV).t()
    got = ew.binary("mul", dev(a), dev(b), out=dev(out))
    check(got, a * b)


def test_binary_inplace_alias():
    a = make((70, 90), D.bfloat16, seed=19)
    b = make((90,), D.bfloat16, seed=20)
    ref = a + b
    va = dev(a)
    assert ew.binary("add", va, dev(b.expand(70, 90)), out=va) is va
    sync()
    torch.testing.assert_close(a, ref)


def test_float64_scalar_precision():
    a = make((100,), D.float64, seed=21)
    check(ew.binary("add", dev(a), 0.1), a + 0.1)
    check(ew.binary("mul", dev(a), 1e-300), a * 1e-300)


def test_nan_propagation():
    a = torch.tensor([float("nan"), 1.0, 2.0, float("nan")], device=DEV)
    b = torch.tensor([1.0, float("nan"), 1.0, float("nan")], device=DEV)
    for op in ("maximum", "minimum", "eq", "ne", "lt"):
        check(ew.binary(op, dev(a), dev(b)), ref_binary(op, a, b))


def test_large_flat_and_tail():
    for n in (1025, 4096 * 3 + 17, 70001):
        a = make((n,), D.float32, seed=n)
        b = make((n,), D.float32, seed=n + 1)
        check(ew.binary("add", dev(a), dev(b)), a + b)
        h = a.to(torch.bfloat16)
        check(ew.unary("neg", dev(h)), -h)


# ------------------------------------------------------------------ where / clamp
@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_where(dtype):
    c = make((40, 50), D.bool_, seed=22)
    a = make((40, 50), dtype, seed=23)
    b = make((50,), dtype, seed=24).expand(40, 50)
    check(ew.where(dev(c), dev(a), dev(b)), torch.where(c, a, b))
    s = SCALARS[dtype]
    check(ew.where(dev(c), dev(a), s), torch.where(c, a, torch.tensor(s, dtype=a.dtype,
                                                                        device=DEV)))
    check(ew.where(dev(c.t()), s, dev(a.t())), torch.where(c.t(), torch.tensor(
        s, dtype=a.dtype, device=DEV), a.t()))


@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16, D.float64, D.int32, D.uint8], ids=str)
def test_clamp(dtype):
    a = make((30, 70), dtype, seed=25)
    lo, hi = (-1.0, 0.5) if dtype.is_floating_point else (2, 20)
    check(ew.clamp(dev(a), lo, hi), torch.clamp(a, lo, hi))
    check(ew.clamp(dev(a.t()), lo, None), torch.clamp(a.t(), lo, None))
    check(ew.clamp(dev(a), None, hi), torch.clamp(a, None, hi))
    if dtype.is_floating_point:
        n = torch.tensor([float("nan"), 3.0], device=DEV, dtype=TORCH[dtype])
        check(ew.clamp(dev(n), lo, hi), torch.clamp(n, lo, hi))


# ------------------------------------------------------------------ copies and casts
@pytest.mark.parametrize("src", ALL, ids=str)
@pytest.mark.parametrize("dst", ALL, ids=str)
def test_cast(src, dst):
    t = make((23, 41), src, seed=26)
    if dst is D.uint8 and src.is_floating_point:
        t = t.abs()
    got = ew.cast(dev(t), dst)
    check(got, t.to(TORCH[dst]))


def test_cast_same_dtype_returns_input():
    a = dev(make((4,), D.float32))
    assert ew.cast(a, D.float32) is a


@pytest.mark.parametrize("dtype", [D.float32, D.bfloat16, D.int64, D.bool_], ids=str)
def test_copy_strided(dtype):
    for _name, t in _layouts(dtype):
        dst = torch.empty(tuple(t.shape), dtype=torch.float32, device=DEV)
        ew.copy_(dev(dst), dev(t))
        sync()
        torch.testing.assert_close(dst, t.to(torch.float32))
        # into a transposed destination of the source dtype
        if t.dim() == 2:
            d2 = torch.empty(tuple(reversed(t.shape)), dtype=t.dtype, device=DEV).t()
            ew.copy_(dev(d2), dev(t))
            sync()
            torch.testing.assert_close(d2, t)


def test_contiguous():
    t = make((20, 30), D.float32, seed=27)
    a = dev(t)
    assert ew.contiguous(a) is a
    got = ew.contiguous(dev(t.t()))
    check(got, t.t().contiguous())
    assert got.strides == (20, 1)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_fill(dtype):
    t = torch.zeros(10, 12, dtype=TORCH[dtype], device=DEV)
    v = SCALARS[dtype]
    ew.fill_(dev(t.t()[::2]), v)
    sync()
    ref = torch.zeros(10, 12, dtype=TORCH[dtype], device=DEV)
    ref.t()[::2] = v
    torch.testing.assert_close(t, ref)
    z = torch.zeros((), dtype=TORCH[dtype], device=DEV)
    ew.fill_(dev(z), v)
    sync()
    torch.testing.assert_close(z, torch.tensor(v, dtype=TORCH[dtype], device=DEV))


def test_plan_reused_with_new_data_scalars_and_alignment():
    """A geometry's launch plan is cached: later calls with other arrays, other scalar
    values and a differently aligned first element must still be right."""
    for seed in (30, 31):
        a = make((33, 70), D.float32, seed=seed)
        b = make((70,), D.bfloat16, seed=seed + 1).expand(33, 70)
        check(ew.launch("add", dev(torch.empty(33, 70, device=DEV)), dev(a), dev(b), None, 2),
              a + b.float())
        for s in (0.5, -3.25):
            check(ew.where(dev(a > 0), dev(a.t().contiguous().t()), s),
                  torch.where(a > 0, a, torch.tensor(s, device=DEV)))
    big = make((2, 33 * 70 + 1), D.float32, seed=32)
    for off in (0, 1):  # the same geometry at an address 4 bytes past a 16-byte boundary
        src = big[0, off:off + 33 * 70].view(33, 70)
        dst = torch.empty(70, 33, device=DEV).t()
        ew.copy_(dev(dst), dev(src))
        sync()
        torch.testing.assert_close(dst, src)


def test_over_five_dims_after_collapsing():
    """Geometries that stay over five dims are walked on the host, one launch per leading
    index; a broadcast operand before a strided one keeps each operand's own strides."""
    shape = (2, 3, 2, 3, 2, 3, 2)
    t = make(shape, D.float32, seed=33).permute(6, 4, 2, 0, 1, 3, 5)
    c = make((1,) * 6 + (3,), D.bool_, seed=34).expand(t.shape)
    one = make((1,) * 7, D.float32, seed=35).expand(t.shape)
    out = ew.where(dev(c), dev(one), dev(t))
    check(out, torch.where(c, one, t))
    check(ew.where(dev(c), dev(one), dev(t)), torch.where(c, one, t))  # the cached plan
    check(ew.binary("mul", dev(t), 3.0), t * 3.0)


@pytest.mark.parametrize("direct", ["1", "0"])
def test_direct_launch_switch_gives_the_same_results(direct):
    """``GENESIS_DIRECT_LAUNCH=0`` sends every launch through Triton's JIT (nothing cached
    for direct launch); either way the results are right."""
    import os
    import subprocess
    import sys
    import textwrap

    from kernel_arrays import INTERPRET

    if INTERPRET:
        pytest.skip("the interpreter never launches compiled kernels")
    code = textwrap.dedent("""
        import genesis
        from genesis_cuda.kernels import _launch
        from genesis_cuda.kernels import elementwise as ew
        import math
        x = genesis.arange(10, dtype=genesis.float32, device="cuda")
        for _ in range(3):  # compiled on the first call, launched directly after
            y = (x + 1) * 2
            w = x.reshape(2, 5).t() + 1.0  # the tiled kernel
            s = x.exp().sum().item()
        assert y.tolist() == [(i + 1) * 2 for i in range(10)]
        assert w.tolist() == [[i + 1.0, i + 6.0] for i in range(5)]
        assert math.isclose(s, sum(math.exp(i) for i in range(10)), rel_tol=1e-5)
        launchers = [ew._flat, ew._flat_small, *ew._tiled.values(),
                     *ew._flat_by_warps.values()]
        print("CACHED", sum(len(k.cache) for k in launchers), _launch.DIRECT)
    """)
    env = dict(os.environ, GENESIS_DIRECT_LAUNCH=direct)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300)
    assert "CACHED" in out.stdout, out.stdout + out.stderr
    cached, flag = out.stdout.split("CACHED")[1].split()
    assert flag == ("True" if direct == "1" else "False")
    assert (int(cached) > 0) == (direct == "1"), out.stdout
