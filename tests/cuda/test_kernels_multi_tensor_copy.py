"""genesis_cuda's ``multi_tensor_copy_`` kernel: every pair in one launch (one per dtype pair),
the same values as the composite's loop of ``copy_``.

FSDP's own geometries come from ``CopyPlan``: its copy-out and packing run on CPU genesis
tensors with the fused op recorded, and the recorded pairs (views of the plan's buffers) are
rebuilt on the device over copies of those buffers; the CPU run is the reference. Runs on a
GPU and on the CPU under the Triton interpreter (``TRITON_INTERPRET=1``, through
``test_multi_tensor_copy_interpreted.py``), with chunks shrunk so pairs span several programs.
(``dev`` waits for torch's stream before handing a tensor to a kernel on genesis's.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("triton")  # the kernels are Triton code; CI machines may lack it

from kernel_arrays import DEV, INTERPRET, TORCH, dev, sync, wrap  # noqa: E402

import genesis  # noqa: E402
from genesis import dtypes as D  # noqa: E402
from genesis.distributed.fsdp import copy_plan  # noqa: E402
from genesis.distributed.fsdp.sharded_tensor import ShardLayout  # noqa: E402
from genesis_cuda import fused_kernels  # noqa: E402
from genesis_cuda.backend import CUDABackend  # noqa: E402
from genesis_cuda.kernels import multi_tensor_copy as mtc  # noqa: E402
from genesis_cuda.kernels import optim  # noqa: E402

pytestmark = [] if INTERPRET else [pytest.mark.cuda]

SHAPES = [(13, 8), (), (3,), (0, 4), (5, 0), (1,), (2, 3, 2), (4, 3), (1, 6), (2, 6), (6, 2)]
FLOATS = [D.float32, D.bfloat16, D.float16, D.float64]


class _Counted:
    """Stands in for the module's launcher: counts the launches, then launches."""

    def __init__(self, launcher):
        self.launcher, self.keys = launcher, []

    def launch(self, key, device, grid, args, *rest):
        self.keys.append(key)
        self.launcher.launch(key, device, grid, args, *rest)


@pytest.fixture(autouse=True)
def launches(monkeypatch):
    """Small chunks (pairs span several programs), fresh table caches, counted launches and
    uploads; the list of launch keys."""
    monkeypatch.setattr(optim, "BLOCK", 32)
    monkeypatch.setattr(optim, "CHUNK", 64)
    monkeypatch.setattr(mtc, "_tables", {})
    uploads = []
    real = optim.upload
    if INTERPRET:  # the table goes to a torch-backed view instead of the GPU
        real = lambda host, device: wrap(torch.from_numpy(host))  # noqa: E731

    def upload(host, device):
        uploads.append(host.copy())
        return real(host, device)

    monkeypatch.setattr(optim, "upload", upload)
    counted = _Counted(mtc._copy)
    monkeypatch.setattr(mtc, "_copy", counted)
    counted.uploads = uploads
    return counted


def _rand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * 3).to(TORCH[dtype])


def _assert_same(got, want, cast=None):
    """``got`` (on the device) is ``want``: bit for bit where no value was cast (``cast``
    defaults to whether the dtypes differ), else within torch's tolerance of ``got``'s dtype
    (the interpreter truncates float32 -> bfloat16 where the GPU rounds to nearest: one
    ulp)."""
    sync()
    got, want = got.cpu(), want.cpu()  # (compared on the host: want may be on the device)
    if not (got.dtype != want.dtype if cast is None else cast):
        assert torch.equal(got, want)  # (NaN-free data)
    else:
        torch.testing.assert_close(got, want.to(got.dtype))


# ------------------------------------------------------------------ FSDP's geometries
def _plan(world):
    layouts = [ShardLayout(s, world) for s in SHAPES]
    offsets, at = [], 0
    for lay in layouts:  # gaps between chunks, as the group's alignment leaves them
        offsets.append(at)
        at += lay.local_numel + 3
    return copy_plan.CopyPlan(layouts, offsets, world, at), at


def _recorded(monkeypatch, call, bases):
    """Run ``call`` (a CopyPlan method on the CPU genesis tensors ``bases``) with the fused op
    recorded; returns the reference results (the bases after the composite ran) and the pairs
    as ``(dst, src)`` of ``(base index, shape, strides, offset)``."""
    pairs = []

    class Recorder:
        def forward(self, b, dsts, srcs):
            pairs.extend(zip(dsts, srcs))
            copy_plan.multi_tensor_copy_(b, dsts, srcs)

    monkeypatch.setattr(copy_plan, "MULTI_TENSOR_COPY", Recorder())
    torch_bases = [t._data for t in bases]
    before = [t.clone() for t in torch_bases]
    call()

    def where(view):
        ptr = view.untyped_storage().data_ptr()
        i = next(i for i, t in enumerate(torch_bases) if t.untyped_storage().data_ptr() == ptr)
        return i, tuple(view.shape), tuple(view.stride()), view.storage_offset()

    return before, torch_bases, [(where(d), where(s)) for d, s in pairs]


def _replay(before, geometry):
    """The recorded pairs over device copies of the bases as they were: (bases, dsts, srcs)."""
    bases = [t.to(DEV) for t in before]
    views = [[dev(bases[i].as_strided(shape, strides, off)) for i, shape, strides, off in side]
             for side in zip(*geometry)]
    return bases, views[0], views[1]


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("dtype", [D.bfloat16, D.float32], ids=str)
def test_fsdp_copy_out_in_one_launch(monkeypatch, launches, world, dtype):
    plan, numel = _plan(world)
    gathered = genesis.tensor(_rand((world, numel), dtype, world).float().numpy()).to(dtype)
    unsharded = genesis.full((world * numel,), 7.0, dtype=dtype)
    before, want, geometry = _recorded(
        monkeypatch, lambda: plan.copy_out(gathered, unsharded), [gathered, unsharded])
    assert any(len(d[1]) == 3 for d, _ in geometry)  # the strided (k, world, n) runs
    bases, dsts, srcs = _replay(before, geometry)
    assert mtc.multi_tensor_copy_(dsts, srcs) is None
    assert len(launches.keys) == 1
    _assert_same(bases[1], want[1])


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("grad_dtype,packed_dtype", [(D.float32, D.float32),
                                                     (D.bfloat16, D.float32),
                                                     (D.float32, D.bfloat16)], ids=str)
def test_fsdp_packing_in_one_launch_per_dtype_pair(monkeypatch, launches, world, grad_dtype,
                                                   packed_dtype):
    plan, numel = _plan(world)
    grads = [genesis.tensor(_rand(s, D.float32, 10 + i).numpy()).to(grad_dtype)
             for i, s in enumerate(SHAPES)]
    grads[1] = None  # a parameter without gradient: zeros
    packed = genesis.full((world, numel), 7.0, dtype=packed_dtype)
    zero = genesis.zeros(1, dtype=packed_dtype)
    bases = [packed, zero] + [g for g in grads if g is not None]
    before, want, geometry = _recorded(monkeypatch, lambda: plan.pack(grads, packed, zero),
                                       bases)
    assert any(s[2] == (0,) or s[2] == (0, 0) for _, s in geometry)  # zeros broadcast
    got, dsts, srcs = _replay(before, geometry)
    assert mtc.multi_tensor_copy_(dsts, srcs) is None
    # the gradients in one launch, the broadcast zeros (packed's dtype) in another if casting
    assert len(launches.keys) == (1 if grad_dtype is packed_dtype else 2)
    _assert_same(got[0], want[0], cast=grad_dtype is not packed_dtype)


# ------------------------------------------------------------------ general pairs
def _pair(dst, src):
    return dev(dst), dev(src)


def test_strides_broadcasts_casts_and_empty_pairs(launches):
    base = torch.full((40, 30), 5.0, dtype=torch.float32, device=DEV)
    four = _rand((2, 3, 4, 5), D.float32, 1).to(DEV)
    cases = [  # (dst, src) torch views
        (base[:7, :9].t(), _rand((9, 7), D.float32, 2).to(DEV)),  # transposed destination
        (base[10:13, ::3], _rand((10,), D.float32, 3).to(DEV).expand(3, 10)),  # broadcast row
        (base[20, 2:17], _rand((), D.float32, 4).to(DEV).expand(15)),  # broadcast scalar
        (base[30, 0], _rand((), D.float32, 5).to(DEV)),  # 0-d
        (base[:0, 3:5], _rand((0, 2), D.float32, 6).to(DEV)),  # empty
        (torch.empty(5, 4, 3, 2, device=DEV).permute(3, 2, 1, 0), four.transpose(0, 3)
         .contiguous().transpose(0, 3)),  # 4-d, no dims merge
        (base[25:27, :20], _rand((2, 20), D.float64, 7).to(DEV)),  # float64 -> float32
    ]
    want = [src.to(dst.dtype).clone() for dst, src in cases]
    pairs = [_pair(d, s) for d, s in cases]
    assert mtc.multi_tensor_copy_([p[0] for p in pairs], [p[1] for p in pairs]) is None
    assert len(launches.keys) == 2  # float32 <- float32 and float32 <- float64
    for (dst, src), w in zip(cases, want):
        _assert_same(dst, w, cast=src.dtype != dst.dtype)
    untouched = torch.full((40, 30), True, device=DEV)
    for rows, cols in ((slice(None, 7), slice(None, 9)), (slice(10, 13), slice(None, None, 3)),
                       (20, slice(2, 17)), (30, 0), (slice(25, 27), slice(None, 20))):
        untouched[rows, cols] = False
    assert (base[untouched] == 5.0).all()  # nothing written outside the destinations


@pytest.mark.parametrize("dst_dtype", FLOATS, ids=str)
@pytest.mark.parametrize("src_dtype", FLOATS, ids=str)
def test_every_floating_cast_as_copy_casts(launches, dst_dtype, src_dtype):
    src = _rand((3, 50), src_dtype, 8).to(DEV)
    dst = torch.zeros((50, 3), dtype=TORCH[dst_dtype], device=DEV).t()
    flat = torch.zeros(150, dtype=TORCH[dst_dtype], device=DEV)
    assert mtc.multi_tensor_copy_([dev(dst), dev(flat)], [dev(src), dev(src.reshape(-1))]) \
        is None
    assert len(launches.keys) == 1
    _assert_same(dst, src.to(dst.dtype), cast=dst_dtype is not src_dtype)
    _assert_same(flat, src.reshape(-1).to(flat.dtype), cast=dst_dtype is not src_dtype)


def test_many_pairs_over_many_chunks(launches):
    sizes = [(i * 37) % 200 for i in range(300)]  # 0 to 199 elements: up to 4 chunks of 64
    srcs = [_rand((n,), D.bfloat16, i).to(DEV) for i, n in enumerate(sizes)]
    out = torch.zeros(sum(sizes) * 2, dtype=torch.bfloat16, device=DEV)
    dsts, at = [], 0
    for n in sizes:  # every other element of one buffer
        dsts.append(out[at:at + 2 * n:2])
        at += 2 * n
    assert mtc.multi_tensor_copy_([dev(d) for d in dsts], [dev(s) for s in srcs]) is None
    assert len(launches.keys) == 1
    for d, s in zip(dsts, srcs):
        _assert_same(d, s)
    assert (out[1::2] == 0).all()


def test_the_table_is_uploaded_once_for_the_same_pairs(launches):
    src, dst = _rand((3, 70), D.float32, 9).to(DEV), torch.zeros(70, 3, device=DEV).t()
    for _ in range(3):
        mtc.multi_tensor_copy_([dev(dst)], [dev(src)])
    assert len(launches.keys) == 3 and len(launches.uploads) == 1
    _assert_same(dst, src)


def test_each_way_a_row_is_read(launches):
    """Rows contiguous in both with every row stride a multiple of 16 bytes (mode 2: vector
    loads where the first elements are aligned too, which the kernel checks), contiguous
    otherwise (1), strided (0); the modes as the uploaded table holds them."""
    src = _rand((4, 96), D.float32, 13).to(DEV)
    aligned = torch.zeros(4, 100, device=DEV)[:, :96]  # 400-byte rows
    shifted = torch.zeros(4 * 100 + 1, device=DEV)[1:].view(4, 100)[:, :96]  # 4 bytes off
    odd = torch.zeros(4, 97, device=DEV)[:, :96]  # 388-byte rows
    strided = torch.zeros(96, 4, device=DEV).t()
    dsts = [aligned, shifted, odd, strided]
    mtc.multi_tensor_copy_([dev(d) for d in dsts], [dev(src)] * 4)
    assert len(launches.keys) == 1
    (table,) = launches.uploads
    assert list(table[-4 * mtc.G:].reshape(4, mtc.G)[:, -1]) == [2, 2, 1, 0]
    for d in dsts:
        _assert_same(d, src)


def test_only_empty_pairs_launch_nothing(launches):
    e = torch.zeros(0, 4, device=DEV)
    assert mtc.multi_tensor_copy_([dev(e)], [dev(e.clone())]) is None
    assert mtc.multi_tensor_copy_([], []) is None
    assert launches.keys == []


# ------------------------------------------------------------------ declining, registration
def test_uncovered_operands_decline_before_launching(launches):
    f = _rand((4,), D.float32, 10).to(DEV)
    i = torch.arange(4, dtype=torch.int32, device=DEV)
    five = torch.zeros(2, 2, 2, 2, 2, device=DEV)
    five_src = _rand((2, 2, 2, 2, 2), D.float32, 11).to(DEV).permute(4, 2, 0, 3, 1)
    other = dev(f.clone())
    other.device = 1
    for dsts, srcs in (([f.clone(), i.clone()], [f, i]),  # an integer pair
                       ([f.clone(), five[:, :, :, :, :]], [f, five_src]),  # 5 dims kept
                       ([f.clone()], [i])):  # int32 -> float32
        assert mtc.multi_tensor_copy_([dev(d) for d in dsts],
                                      [dev(s) for s in srcs]) is NotImplemented
    assert mtc.multi_tensor_copy_([dev(f.clone())], [other]) is NotImplemented  # 2 devices
    assert launches.keys == []
    with pytest.raises(ValueError, match=r"shape \(4,\).*shape \(3,\)"):
        mtc.multi_tensor_copy_([dev(f.clone())], [dev(f[:3])])


def test_the_cuda_backend_runs_the_kernel_and_declines_to_the_composite(launches):
    backend = CUDABackend()
    assert backend.kernel("multi_tensor_copy_") is fused_kernels.multi_tensor_copy_
    src = _rand((6, 5), D.bfloat16, 12).to(DEV)
    dst = torch.zeros(5, 6, dtype=torch.float32, device=DEV).t()
    ints = torch.arange(6, dtype=torch.int64, device=DEV)
    int_dst = torch.zeros(6, dtype=torch.int64, device=DEV)
    copy_plan.MULTI_TENSOR_COPY.forward(backend, [dev(dst)], [dev(src)])
    assert len(launches.keys) == 1  # the kernel ran
    _assert_same(dst, src.float())
    copy_plan.MULTI_TENSOR_COPY.forward(backend, [dev(int_dst), dev(dst)],
                                        [dev(ints), dev(src * 2)])
    assert len(launches.keys) == 1  # declined: the composite's copies ran
    _assert_same(int_dst, ints)
    _assert_same(dst, (src * 2).float())


@pytest.mark.skipif(INTERPRET, reason="genesis tensors on a CUDA device need a GPU")
def test_copy_plan_on_cuda_tensors_launches_once(launches):
    plan, numel = _plan(2)
    values = np.random.default_rng(0).standard_normal((2, numel)).astype(np.float32)
    gathered = genesis.tensor(values, device="cuda")
    wholes = plan.copy_out(gathered, genesis.empty(2 * numel, device="cuda"))
    reference = plan.copy_out(genesis.tensor(values), genesis.empty(2 * numel))
    assert len(launches.keys) == 1
    for got, want in zip(wholes, reference):
        np.testing.assert_array_equal(got.cpu().numpy(), want.numpy())
