"""Out-of-range indices in genesis_cuda's indexing kernels: nothing outside the tensor is
read or written, and the first bad index is raised as IndexError at the next check
(``genesis_cuda.kernel_errors``).

Every operand is a view into the middle of a larger buffer filled with a sentinel, so a read
or write out of bounds shows in the result or in the sentinel. Runs under the Triton
interpreter on the CPU (``TRITON_INTERPRET=1``, no GPU needed) and on a GPU.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")  # the kernels are Triton code; CI machines may lack it

from kernel_arrays import DEV, INTERPRET, dev, host, sync  # noqa: E402

from genesis_cuda import kernel_errors  # noqa: E402
from genesis_cuda.kernels import indexing  # noqa: E402

pytestmark = [] if INTERPRET else [pytest.mark.cuda]

SENTINEL = 1000.0
PAD = 64


@pytest.fixture(autouse=True)
def _clean_word():
    if not INTERPRET:
        import genesis_cuda.backend  # noqa: F401 - its init hooks (the error word among them)
        from genesis_cuda import device

        device.lazy_init(0)
    kernel_errors._words[0].clear()
    kernel_errors._pending.discard(0)
    yield
    kernel_errors._words[0].clear()


def _padded(values: torch.Tensor, sentinel=SENTINEL):
    """(view of ``values`` inside a sentinel-filled buffer, the whole buffer)."""
    buf = torch.full((values.numel() + 2 * PAD,), sentinel, dtype=values.dtype, device=DEV)
    inner = buf[PAD:PAD + values.numel()].view(values.shape)
    inner.copy_(values.to(DEV))
    return inner, buf


def _raised() -> str | None:
    """The IndexError message the host check raises now, or None."""
    sync()
    try:
        kernel_errors.raise_pending(0)
    except IndexError as exc:
        return str(exc)
    return None


def _index(values, dtype=torch.int64):
    return torch.tensor(values, dtype=dtype, device=DEV)


def test_valid_indices_raise_nothing():
    a = torch.arange(12.0, device=DEV).view(3, 4)
    idx = _index([[0, 3], [1, 2], [3, 3]])
    out = host(indexing.gather(dev(a), 1, dev(idx)))
    assert torch.equal(out, torch.gather(a, 1, idx))
    assert _raised() is None
    assert kernel_errors._words[0].read() == (0, 0, 0)


@pytest.mark.parametrize("bad", [4, 9, -1])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_gather_out_of_range_reads_nothing(bad, dtype):
    a, _ = _padded(torch.arange(12.0).view(3, 4))
    idx = _index([[0, 3], [1, bad], [2, 2]], dtype)
    out = host(indexing.gather(dev(a), 1, dev(idx)))
    assert SENTINEL not in out  # the bad lane read nothing (it is 0), the others are right
    assert out.tolist() == [[0.0, 3.0], [5.0, 0.0], [10.0, 10.0]]
    assert _raised() == (f"gather: index {bad} is out of bounds for dimension with size 4 "
                         "(found by the device kernel; reported at this synchronisation)")
    assert _raised() is None  # reported once, then cleared


def test_index_select_out_of_range_reads_nothing():
    """The embedding lookup's kernel: a row past the table is not read."""
    w, _ = _padded(torch.arange(8.0).view(4, 2))
    out = host(indexing.index_select(dev(w), 0, dev(_index([1, 4, 3]))))
    assert out.tolist() == [[2.0, 3.0], [0.0, 0.0], [6.0, 7.0]]
    assert "index_select: index 4 is out of bounds for dimension with size 4" in _raised()


@pytest.mark.parametrize("reduce", [None, "add"])
def test_scatter_out_of_range_writes_nothing(reduce):
    a, _ = _padded(torch.zeros(2, 3))
    src = torch.ones(2, 2, device=DEV)
    idx = _index([[0, 3], [-1, 2]])
    out = indexing.scatter(dev(a), 1, dev(idx), dev(src), reduce)
    assert host(out).tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    # the copy scatter writes into comes from the allocator: check its neighbours via a
    # scatter straight into the padded buffer's view
    msg = _raised()
    assert msg.startswith("scatter: index ") and "for dimension with size 3" in msg
    assert msg.split()[2] in ("3", "-1")


def test_scatter_into_a_view_leaves_its_neighbours():
    a, buf = _padded(torch.zeros(2, 3))
    indexing._scatter_into(dev(a), 1, dev(_index([[0, 5], [2, 1]])),
                           dev(torch.ones(2, 2, device=DEV)), True)
    sync()
    assert torch.all(buf[:PAD] == SENTINEL) and torch.all(buf[PAD + 6:] == SENTINEL)
    assert a.tolist() == [[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]]
    assert "index 5 is out of bounds for dimension with size 3" in _raised()


def test_index_add_out_of_range():
    a = torch.zeros(3, 2, device=DEV)
    src = torch.ones(2, 2, device=DEV)
    out = host(indexing.index_add(dev(a), 0, dev(_index([7, 1])), dev(src)))
    assert out.tolist() == [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
    assert "index_add: index 7 is out of bounds for dimension with size 3" in _raised()


def test_advanced_index_wraps_negatives_and_reports_the_rest():
    a, _ = _padded(torch.arange(6.0).view(2, 3))
    ok = host(indexing.index(dev(a), [None, dev(_index([-1, -3, 2]))]))
    assert ok.tolist() == [[2.0, 0.0, 2.0], [5.0, 3.0, 5.0]]
    assert _raised() is None
    out = host(indexing.index(dev(a), [dev(_index([1, -3])), None]))
    assert SENTINEL not in out
    assert out[0].tolist() == [3.0, 4.0, 5.0]
    assert "index: index -3 is out of bounds for dimension with size 2" in _raised()


def test_index_put_out_of_range_writes_nothing():
    a, buf = _padded(torch.zeros(4))
    vals = torch.tensor([1.0, 2.0], device=DEV)
    indexing.index_put_(dev(a), [dev(_index([4, 1]))], dev(vals), False)
    sync()
    assert a.tolist() == [0.0, 2.0, 0.0, 0.0]
    assert torch.all(buf[PAD + 4:] == SENTINEL)
    assert "index_put_: index 4 is out of bounds for dimension with size 4" in _raised()


def test_index_into_an_empty_dim():
    a = torch.empty(0, 3, device=DEV)
    out = indexing.index(dev(a), [dev(_index([0])), None])
    assert tuple(out.shape) == (1, 3)
    assert "index: index 0 is out of bounds for dimension with size 0" in _raised()


def test_the_first_error_wins():
    a = torch.arange(4.0, device=DEV)
    indexing.gather(dev(a), 0, dev(_index([6])))
    indexing.index_select(dev(a), 0, dev(_index([9])))
    msg = _raised()
    assert msg.startswith("gather: index 6 ")
    assert _raised() is None


def test_many_blocks_one_report():
    """Bad lanes in several blocks (BLOCK is 1024): one report, of a bad index."""
    n = 3000
    a = torch.arange(5.0, device=DEV)
    idx = torch.zeros(n, dtype=torch.int64, device=DEV)
    idx[::700] = 5
    out = host(indexing.gather(dev(a), 0, dev(idx)))
    assert torch.all(out == 0.0)
    assert "gather: index 5 is out of bounds for dimension with size 5" in _raised()


def test_advanced_index_with_several_arrays():
    """A bad entry in any of the index arrays voids that position's offset for good."""
    a, _ = _padded(torch.arange(24.0).view(2, 3, 4))
    idx = [dev(_index([5, 1, 9])), dev(_index([0, 2, 9])), dev(_index([1, 3, 9]))]
    out = host(indexing.index(dev(a), idx))
    assert out.tolist() == [0.0, 23.0, 0.0]
    msg = _raised()  # the first array's launch reports, with one of its bad entries
    assert msg.startswith(("index: index 5 ", "index: index 9 ")), msg
    assert "for dimension with size 2" in msg


def test_index_put_accumulate_in_a_widened_copy():
    """int8 has no atomic add: the accumulation runs in an int64 copy, still guarded."""
    a, buf = _padded(torch.zeros(3, dtype=torch.int8), sentinel=100)
    vals = torch.tensor([1, 2, 3], dtype=torch.int8, device=DEV)
    indexing.index_put_(dev(a), [dev(_index([2, -4, 2]))], dev(vals), True)
    sync()
    assert a.tolist() == [0, 0, 4]
    assert torch.all(buf[:PAD] == 100) and torch.all(buf[PAD + 3:] == 100)
    assert "index_put_: index -4 is out of bounds for dimension with size 3" in _raised()


def test_zero_dim_inputs_index_like_one_element():
    """A 0-d tensor has one element at index 0 (as torch): anything else is out of range."""
    a = torch.tensor(5.0, device=DEV)
    i0 = torch.tensor(0, device=DEV)
    assert host(indexing.gather(dev(a), 0, dev(i0))).item() == 5.0
    assert host(indexing.index_select(dev(a), 0, dev(_index([0])))).item() == 5.0
    out = indexing.index_add(dev(a), 0, dev(_index([0])), dev(torch.tensor([2.0], device=DEV)))
    assert host(out).item() == 7.0
    assert _raised() is None
    assert host(indexing.gather(dev(a), 0, dev(torch.tensor(1, device=DEV)))).item() == 0.0
    assert "gather: index 1 is out of bounds for dimension with size 1" in _raised()
    indexing.scatter(dev(a), 0, dev(torch.tensor(-1, device=DEV)), 1.0, None)
    assert "scatter: index -1 is out of bounds for dimension with size 1" in _raised()
