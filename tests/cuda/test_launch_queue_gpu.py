"""Deferred kernel launches on a GPU (``kernels.launch_queue``, what genesis.compile's trace
runs under): values equal eager ones around host copies and host reads, a kernel that does
not compile raises where the queue is flushed and leaves nothing deferred behind. Every
compile test on CUDA (``tests/compiler/test_compile_cuda.py``) traces under it too."""

from __future__ import annotations

import numpy as np
import pytest

import genesis

pytestmark = pytest.mark.cuda
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")


@triton.jit
def _plus_seven(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + 7, mask=mask)


@triton.jit
def _does_not_compile(x, n, BLOCK: tl.constexpr):
    tl.store(x + tl.arange(0, BLOCK), undefined_name)  # noqa: F821 - the compile error


def _tracing():
    from genesis.backends.registry import get_backend

    return get_backend("cuda").tracing()


def test_deferred_launches_give_eager_values_around_copies_and_host_reads():
    from genesis_cuda.kernels import _launch, launch_queue

    n = 1000
    x = genesis.arange(0, n, dtype=genesis.float32, device="cuda")
    out = genesis.empty_like(x)
    la = _launch.Launcher(_plus_seven, num_warps=4)  # its own cache: the first launch compiles
    with _tracing() as queue:
        la((_launch.cdiv(n, 256),), x._data, out._data, n, BLOCK=256)
        y = out * 2  # waits behind the launch that compiles
        assert queue.launches >= 2 and launch_queue.waiting(0) is queue
        ones = genesis.tensor(np.ones(n, np.float32), device="cuda")  # a copy: flushed first
        assert launch_queue.waiting(0) is None
        w = y + ones
        total = w.sum().item()  # a host read
        v = w * 3
    want = (np.arange(n, dtype=np.float32) + 7) * 2 + 1
    assert total == pytest.approx(float(want.sum()), rel=1e-6)
    np.testing.assert_allclose(v.cpu().numpy(), want * 3)
    assert launch_queue.ACTIVE == 0


def test_a_kernel_that_does_not_compile_raises_at_the_flush_and_nothing_stays_deferred():
    from genesis_cuda import driver
    from genesis_cuda.kernels import _launch, launch_queue

    x = genesis.zeros(64, device="cuda")
    la = _launch.Launcher(_does_not_compile, num_warps=4)
    with pytest.raises(Exception, match="undefined_name"):
        with _tracing():
            la((1,), x._data, 64, BLOCK=64)  # recorded: the compile error is not raised here
            y = x + 1  # noqa: F841 - queued behind it
    assert launch_queue.ACTIVE == 0 and driver.before_device_call is None
    assert (x + 2).sum().item() == 128.0  # launches are made at once again


def test_queued_tma_matmuls_keep_their_own_operands():
    # matmul's TMA plans re-point one set of host descriptors at each call's arrays: two
    # queued products of one plan must still read their own operands
    from genesis_cuda.kernels import _launch

    genesis.manual_seed(0)
    a1, a2 = (genesis.randn(320, 384, device="cuda").to(genesis.bfloat16) for _ in range(2))
    w = genesis.randn(384, 288, device="cuda").to(genesis.bfloat16)
    want = [(a @ w).float().cpu().numpy() for a in (a1, a2)]
    x = genesis.zeros(64, device="cuda")
    la = _launch.Launcher(_plus_seven, num_warps=4)
    with _tracing() as queue:
        la((1,), x._data, x._data, 64, BLOCK=64)  # a compiling launch: the queue starts
        got = [a1 @ w, a2 @ w]
        assert queue.launches >= 3
    for g, wt in zip(got, want):
        np.testing.assert_array_equal(g.float().cpu().numpy(), wt)


def test_a_new_matmul_bucket_is_tuned_at_the_flush(monkeypatch):
    from genesis_cuda.kernels import _launch, matmul, matmul_tuning

    monkeypatch.setattr(matmul_tuning, "tuned", {})  # every bucket new, every plan new
    monkeypatch.setattr(matmul, "_plans", {})
    genesis.manual_seed(0)
    a1, a2 = (genesis.randn(3000, 600, device="cuda").to(genesis.bfloat16) for _ in range(2))
    w = genesis.randn(600, 1100, device="cuda").to(genesis.bfloat16)
    wn = w.float().cpu().numpy()
    want = [a.float().cpu().numpy() @ wn for a in (a1, a2)]  # (on the host: nothing tuned)
    x = genesis.zeros(64, device="cuda")
    la = _launch.Launcher(_plus_seven, num_warps=4)
    with _tracing():
        la((1,), x._data, x._data, 64, BLOCK=64)  # a compiling launch: the queue starts
        got = [a1 @ w, a2 @ w]  # a new bucket: tuned at the flush, both products behind it
        assert matmul_tuning.tuned == {}  # (nothing timed yet)
    assert len(matmul_tuning.tuned) == 1
    for g, wt in zip(got, want):  # bf16 products of a tuned config against float32's
        np.testing.assert_allclose(g.float().cpu().numpy(), wt, rtol=2e-2, atol=0.5)
