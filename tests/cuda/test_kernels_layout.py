"""Triton layout kernels (cat, flip, tril/triu, arange, strided copy/cast, fill) vs torch CUDA.

Exact ops: results must be bit-identical to torch's (``torch.equal``), except float arange
(torch computes ``start + i*step`` in float32 for float32; we compute in float64 and round
once, so results may differ by one ulp: compared with torch's default tolerances).
"""

import pytest
import torch
from kernel_arrays import GENESIS, to_dev, to_torch

pytestmark = pytest.mark.cuda


DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64,
          torch.int32, torch.int8, torch.uint8, torch.bool]


def _rand(shape, dtype):
    if dtype is torch.bool:
        return torch.rand(shape, device="cuda") > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, device="cuda").to(dtype)
    return torch.randint(0, 100, shape, device="cuda").to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cat_dtypes_and_dims(dtype):
    from genesis_cuda.kernels import layout

    xs = [_rand((3, 4, 5), dtype), _rand((3, 2, 5), dtype), _rand((3, 0, 5), dtype)]
    assert torch.equal(to_torch(layout.cat([to_dev(x) for x in xs], 1)), torch.cat(xs, 1).cpu())
    ys = [_rand((2, 3), dtype), _rand((4, 3), dtype)]
    assert torch.equal(to_torch(layout.cat([to_dev(y) for y in ys], 0)), torch.cat(ys, 0).cpu())


def test_cat_strided_inputs():
    from genesis_cuda.kernels import layout

    a = torch.randn(5, 6, device="cuda").t()            # transposed
    b = torch.randn(6, 10, device="cuda")[:, ::2]       # sliced
    c = torch.randn(6, 1, device="cuda").expand(6, 3)   # broadcast (stride 0)
    out = layout.cat([to_dev(a), to_dev(b), to_dev(c)], 1)
    assert torch.equal(to_torch(out), torch.cat([a, b, c], 1).cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("dims", [(0,), (1,), (2,), (0, 2), (0, 1, 2)])
def test_flip(dtype, dims):
    from genesis_cuda.kernels import layout

    x = _rand((4, 5, 6), dtype).transpose(0, 2)
    assert torch.equal(to_torch(layout.flip(to_dev(x), dims)), torch.flip(x, dims).cpu())


def test_flip_empty_and_0d():
    from genesis_cuda.kernels import layout

    e = torch.randn(0, 3, device="cuda")
    assert to_torch(layout.flip(to_dev(e), (0,))).shape == (0, 3)
    s = torch.tensor(2.5, device="cuda")
    assert torch.equal(to_torch(layout.flip(to_dev(s), ())), s.cpu())


@pytest.mark.parametrize("fn", ["tril", "triu"])
@pytest.mark.parametrize("k", [-2, -1, 0, 1, 3, 10])
@pytest.mark.parametrize("shape", [(5, 5), (4, 7), (7, 3), (2, 3, 4, 5)])
def test_tril_triu(fn, k, shape):
    from genesis_cuda.kernels import layout

    x = torch.randn(shape, device="cuda")
    expect = getattr(torch, fn)(x, k).cpu()
    assert torch.equal(to_torch(getattr(layout, fn)(to_dev(x), k)), expect)
    xt = x.transpose(-1, -2)
    assert torch.equal(to_torch(getattr(layout, fn)(to_dev(xt), k)),
                       getattr(torch, fn)(xt, k).cpu())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int32, torch.bool, torch.float64])
def test_tril_dtypes_and_empty(dtype):
    from genesis_cuda.kernels import layout

    x = _rand((3, 6, 6), dtype)
    assert torch.equal(to_torch(layout.tril(to_dev(x), 0)), torch.tril(x).cpu())
    e = _rand((0, 4, 4), dtype)
    assert to_torch(layout.triu(to_dev(e), 0)).shape == (0, 4, 4)


@pytest.mark.parametrize("args,dtype", [
    ((0, 10, 1), torch.int64), ((3, -7, -2), torch.int64), ((0, 1000, 7), torch.int32),
    ((0.0, 1.0, 0.1), torch.float32), ((-2.5, 2.5, 0.25), torch.float64),
    ((0, 64, 1), torch.bfloat16), ((0.0, 5.0, 0.5), torch.float16), ((5, 5, 1), torch.int64),
    ((0, 2**33, 2**31), torch.int64),
])
def test_arange(args, dtype):
    from genesis_cuda.kernels import layout

    out = to_torch(layout.arange(*args, GENESIS[dtype], 0))
    expect = torch.arange(*args, dtype=dtype, device="cuda").cpu()
    assert out.shape == expect.shape
    torch.testing.assert_close(out, expect)


@pytest.mark.parametrize("src,dst", [
    (torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32), (torch.float32, torch.int32),
    (torch.int64, torch.float16), (torch.float32, torch.bool), (torch.bool, torch.float32)])
def test_clone_cast_strided(src, dst):
    from genesis_cuda.kernels import layout

    x = (torch.randn(6, 8, device="cuda") * 10).to(src).t()[1:, ::3]
    out = to_torch(layout.clone(to_dev(x), GENESIS[dst]))
    assert torch.equal(out, x.to(dst).cpu())


def test_copy_many_dims_split_on_host():
    from genesis_cuda.kernels import layout

    z = torch.randn(2, 3, 2, 3, 2, 3, 2, 3, device="cuda").permute(7, 6, 5, 4, 3, 2, 1, 0)[:, ::2]
    assert torch.equal(to_torch(layout.clone(to_dev(z))), z.contiguous().cpu())


@pytest.mark.parametrize("dtype,value", [(torch.float64, 0.1), (torch.int64, -(2**40)),
                                         (torch.bool, True), (torch.bfloat16, 1.5)])
def test_fill_strided(dtype, value):
    from genesis_cuda.kernels import layout

    base = torch.zeros(4, 6, dtype=dtype, device="cuda")
    a = to_dev(base[:, ::2])
    layout.fill_(a, value)
    expect = base.clone()
    expect[:, ::2] = value
    from genesis_cuda import array

    whole = array.new_array((4, 6), (6, 1), 0, a.dtype, a.storage, a.device)  # a's storage
    assert torch.equal(to_torch(whole), expect.cpu())


def test_cached_copies_are_per_integer_class():
    """The copy's launches are cached per class of each size and stride (1, multiple of 16,
    other): views that take turns between those classes each copy correctly."""
    from genesis_cuda.kernels import layout

    base = torch.randn(33, 48, device="cuda")
    views = [base[:, :1], base[:, :16], base[:, :7], base[:1, :7], base[::2, :16],
             base[::3, 1:8].t(), base[:, :1], base[:, :7]]
    for v in views * 2:
        assert torch.equal(to_torch(layout.clone(to_dev(v))), v.contiguous().cpu())


@pytest.mark.parametrize("value", [1, 7, 16, 2**40])
def test_fill_value_is_not_a_cached_constant(value):
    """``fill_`` with one value after another (1 is a value Triton may compile in)."""
    from genesis_cuda.kernels import layout

    a = to_dev(torch.zeros(5, dtype=torch.int64, device="cuda"))
    for v in (1, value, 1):
        layout.fill_(a, v)
        assert to_torch(a).tolist() == [v] * 5
