"""Triton indexing kernels vs torch CUDA: gather, scatter, index_select, index_add,
advanced indexing, index_put_, nonzero.

Gathers and plain writes are exact (``torch.equal``). Accumulations (scatter add,
index_add, index_put_ with accumulate) use atomics in an unspecified order, as torch's do:
compared with torch's default tolerances for the dtype; integer dtypes are exact.
"""

import pytest
import torch
from kernel_arrays import to_dev, to_torch

pytestmark = pytest.mark.cuda


def _rand(shape, dtype):
    if dtype is torch.bool:
        return torch.rand(shape, device="cuda") > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, device="cuda").to(dtype)
    return torch.randint(-50, 50, shape, device="cuda").to(dtype)


def _idx(high, shape):
    return torch.randint(0, high, shape, device="cuda")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool,
                                   torch.float64, torch.int8])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_gather(dtype, dim):
    from genesis_cuda.kernels import indexing

    a = _rand((4, 5, 6), dtype)
    shape = [3, 4, 5]
    index = _idx(a.shape[dim], shape)
    out = to_torch(indexing.gather(to_dev(a), dim, to_dev(index)))
    assert torch.equal(out, torch.gather(a, dim, index).cpu())


def test_gather_strided_and_empty():
    from genesis_cuda.kernels import indexing

    a = torch.randn(6, 5, 4, device="cuda").transpose(0, 2)  # (4, 5, 6), non-contiguous
    index = _idx(5, (8, 3, 6)).transpose(0, 1)[:, ::2]        # strided index (3, 4, 6)
    index = index[:, :, :4]
    out = to_torch(indexing.gather(to_dev(a), 1, to_dev(index)))
    assert torch.equal(out, torch.gather(a, 1, index).cpu())
    e = torch.empty(4, 0, 6, dtype=torch.int64, device="cuda")
    assert to_torch(indexing.gather(to_dev(a), 1, to_dev(e))).shape == (4, 0, 6)


def _unique_index(n_rows, n_cols, high):
    # Distinct targets per column: plain scatter with duplicates has no defined winner.
    cols = [torch.randperm(high, device="cuda")[:n_rows] for _ in range(n_cols)]
    return torch.stack(cols, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
def test_scatter_write(dtype):
    from genesis_cuda.kernels import indexing

    a = _rand((7, 5), dtype)
    index = _unique_index(4, 5, 7)
    src = _rand((6, 5), dtype)
    out = to_torch(indexing.scatter(to_dev(a), 0, to_dev(index), to_dev(src), None))
    assert torch.equal(out, torch.scatter(a, 0, index, src).cpu())
    assert torch.equal(to_torch(to_dev(a)), a.cpu())  # the input is untouched
    scalar = True if dtype is torch.bool else 3
    out = to_torch(indexing.scatter(to_dev(a), 0, to_dev(index), scalar, None))
    assert torch.equal(out, torch.scatter(a, 0, index, scalar).cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64,
                                   torch.int64, torch.int32, torch.int16, torch.uint8])
def test_scatter_add_repeated(dtype):
    from genesis_cuda.kernels import indexing

    a = _rand((5, 6), dtype).abs() if dtype is torch.uint8 else _rand((5, 6), dtype)
    index = _idx(5, (20, 6))  # many repeats
    src = _rand((20, 6), dtype)
    if dtype is torch.uint8:
        src = src % 4
    out = to_torch(indexing.scatter(to_dev(a), 0, to_dev(index), to_dev(src), "add"))
    expect = torch.scatter_add(a, 0, index, src).cpu()
    if dtype.is_floating_point:
        torch.testing.assert_close(out.double(), expect.double(),
                                   **_acc_tol(dtype))
    else:
        assert torch.equal(out, expect)


def _acc_tol(dtype):
    # Up to 20 terms summed in a different order (and, for our widened 16-bit path, in fp32
    # rather than with a rounding per add): a few ulps of the result's dtype.
    eps = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-6,
           torch.float64: 1e-12}[dtype]
    return {"rtol": 4 * eps, "atol": 8 * eps}


def test_scatter_add_scalar_and_strided():
    from genesis_cuda.kernels import indexing

    a = torch.randn(6, 4, device="cuda").t()        # (4, 6) transposed
    index = _idx(6, (4, 10))[:, ::2]                # (4, 5) strided, repeats
    out = to_torch(indexing.scatter(to_dev(a), 1, to_dev(index), 1.5, "add"))
    expect = torch.scatter_add(a, 1, index, torch.full(index.shape, 1.5, device="cuda"))
    torch.testing.assert_close(out, expect.cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_index_select(dtype, dim):
    from genesis_cuda.kernels import indexing

    a = _rand((4, 5, 6), dtype).permute(2, 0, 1)  # (6, 4, 5) non-contiguous
    index = torch.tensor([0, 3, 3, 1, 0], device="cuda") % a.shape[dim]
    out = to_torch(indexing.index_select(to_dev(a), dim, to_dev(index)))
    assert torch.equal(out, torch.index_select(a, dim, index).cpu())
    empty = torch.empty(0, dtype=torch.int64, device="cuda")
    assert to_torch(indexing.index_select(to_dev(a), dim, to_dev(empty))).numel() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64,
                                   torch.int8])
def test_index_add_repeated(dtype):
    # Also embedding backward: rows of grad added into a (vocab, dim) table.
    from genesis_cuda.kernels import indexing

    vocab, dim = 11, 16
    a = _rand((vocab, dim), dtype)
    index = _idx(vocab, (40,))
    src = _rand((40, dim), dtype)
    if dtype is torch.int8:
        a, src = a % 5, src % 3
    out = to_torch(indexing.index_add(to_dev(a), 0, to_dev(index), to_dev(src)))
    expect = torch.index_add(a, 0, index, src).cpu()
    if dtype.is_floating_point:
        torch.testing.assert_close(out.double(), expect.double(), **_acc_tol(dtype))
    else:
        assert torch.equal(out, expect)


def test_index_add_other_dim_strided():
    from genesis_cuda.kernels import indexing

    a = torch.randn(5, 7, 3, device="cuda").transpose(0, 2)   # (3, 7, 5)
    index = torch.tensor([6, 0, 6, 2], device="cuda")
    src = torch.randn(3, 4, 5, device="cuda")
    out = to_torch(indexing.index_add(to_dev(a), 1, to_dev(index), to_dev(src)))
    torch.testing.assert_close(out, torch.index_add(a, 1, index, src).cpu())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int8])  # (int8: a widened copy)
@pytest.mark.parametrize("strided", [False, True])
def test_index_add_in_place(dtype, strided):
    # the embedding's backward adds into its fresh zeros: the array itself is the result
    from genesis_cuda.kernels import indexing

    a = _rand((5, 7), dtype).t() if strided else _rand((7, 5), dtype)  # (7, 5)
    src = _rand((4, 5), dtype)
    if dtype is torch.int8:
        a, src = a % 5, src % 3
    index = torch.tensor([6, 0, 6, 2], device="cuda")
    dev = to_dev(a)
    assert indexing.index_add_(dev, 0, to_dev(index), to_dev(src)) is dev
    expect = torch.index_add(a, 0, index, src).cpu()
    if dtype.is_floating_point:
        torch.testing.assert_close(to_torch(dev).double(), expect.double(), **_acc_tol(dtype))
    else:
        assert torch.equal(to_torch(dev), expect)


_ADVANCED = [
    "i0",                  # a[i0]
    "none,i1",             # a[:, i1]
    "i0,none,i2",          # separated: advanced dims move to the front
    "none,i1,i2",          # adjacent in the middle
    "i0,i1",               # adjacent at the front, broadcast (3,1) with (4,)
    "i0,i1,i2,i3",         # every dim
]


def _advanced_indices(spec, shape):
    gen = {
        "i0": lambda: _idx(shape[0], (3, 1)),
        "i1": lambda: _idx(shape[1], (4,)),
        "i2": lambda: torch.randint(-shape[2], shape[2], (4,), device="cuda"),  # negatives
        "i3": lambda: _idx(shape[3], (1, 4)),
    }
    return [None if s == "none" else gen[s]() for s in spec.split(",")]


@pytest.mark.parametrize("spec", _ADVANCED)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_index_advanced(spec, dtype):
    from genesis_cuda.kernels import indexing

    a = _rand((8, 7, 6, 5), dtype).permute(3, 2, 1, 0)              # non-contiguous (5,6,7,8)
    ind = _advanced_indices(spec, a.shape)
    key = tuple(slice(None) if i is None else i for i in ind)
    out = to_torch(indexing.index(to_dev(a), [None if i is None else to_dev(i) for i in ind]))
    expect = a[key].cpu()
    assert out.shape == expect.shape, (out.shape, expect.shape)
    assert torch.equal(out, expect)


def test_index_empty_index():
    from genesis_cuda.kernels import indexing

    a = torch.randn(4, 5, device="cuda")
    e = torch.empty(0, dtype=torch.int64, device="cuda")
    assert to_torch(indexing.index(to_dev(a), [None, to_dev(e)])).shape == (4, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int16])
def test_index_put_accumulate_repeated(dtype):
    from genesis_cuda.kernels import indexing

    base = _rand((6, 7), dtype)
    a = to_dev(base)
    i0 = torch.tensor([0, 1, 1, 5, 1], device="cuda")
    i1 = torch.tensor([2, 3, 3, 0, 3], device="cuda")
    values = _rand((5,), dtype)
    indexing.index_put_(a, [to_dev(i0), to_dev(i1)], to_dev(values), True)
    expect = base.clone().index_put_((i0, i1), values, accumulate=True).cpu()
    if dtype.is_floating_point:
        torch.testing.assert_close(to_torch(a).double(), expect.double(), **_acc_tol(dtype))
    else:
        assert torch.equal(to_torch(a), expect)


def test_index_put_write_broadcast_values_strided_target():
    from genesis_cuda.kernels import indexing

    base = torch.randn(7, 6, 5, device="cuda")
    view = base.transpose(0, 2)                       # (5, 6, 7), strided target
    i0 = torch.tensor([4, 0, 2], device="cuda")
    i2 = torch.tensor([1, 6, 3], device="cuda")
    values = torch.randn(6, device="cuda")            # broadcasts to the indexed (3, 6)
    a = to_dev(view)
    indexing.index_put_(a, [to_dev(i0), None, to_dev(i2)], to_dev(values), False)
    expect = view.clone()
    expect[i0, :, i2] = values
    assert torch.equal(to_torch(a), expect.cpu())


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32, torch.int32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(7,), (3, 4, 5), (2, 3, 2, 3, 2), (), (0, 3), (5000,)])
def test_nonzero(dtype, shape):
    from genesis_cuda.kernels import indexing

    x = (torch.rand(shape, device="cuda") > 0.6).to(dtype)
    if dtype is torch.float32 and x.numel():
        x = x * torch.randn(shape, device="cuda")
    out = to_torch(indexing.nonzero(to_dev(x)))
    assert torch.equal(out, torch.nonzero(x).cpu())


def test_nonzero_strided_and_large():
    from genesis_cuda.kernels import indexing

    x = torch.randn(300, 700, device="cuda").t()[::2] > 1.0  # multi-block, strided
    assert torch.equal(to_torch(indexing.nonzero(to_dev(x))), torch.nonzero(x).cpu())
    y = torch.rand(3_000_000, device="cuda") > 0.999  # more blocks than one scan chunk
    assert torch.equal(to_torch(indexing.nonzero(to_dev(y))), torch.nonzero(y).cpu())
