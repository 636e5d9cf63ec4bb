"""The NCCL backend on one GPU (world size 1, in this process) and CUDA tensors on Gloo.

Needs a GPU and CuPy with NCCL (the GPU machine has cupy-cuda13x). World size 1 still runs
every NCCL call for real — communicator, streams, pointers — with results that are the
inputs (or their average over one rank).
"""

from __future__ import annotations

import datetime

import numpy as np
import pytest

pytestmark = pytest.mark.cuda

@pytest.fixture(scope="module")
def nccl_world():
    pytest.importorskip("cupy.cuda.nccl", reason="the nccl backend needs CuPy")
    from torch import distributed as tdist

    import genesis.distributed as dist

    dist.init_process_group("cpu:gloo,cuda:nccl", store=tdist.HashStore(), rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=60))
    yield dist
    dist.destroy_process_group()
    assert not dist.is_initialized()


def _cuda(values, dtype="float32"):
    import genesis

    return genesis.tensor(np.asarray(values, dtype=np.float64)).to(getattr(genesis, dtype)) \
        .to("cuda")


def _np(t):
    import genesis

    return (t.float() if t.dtype is genesis.bfloat16 else t).cpu().numpy()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32", "int16",
                                   "int64", "uint8", "int8"])
@pytest.mark.parametrize("op", ["SUM", "AVG", "PRODUCT", "MIN", "MAX"])
def test_all_reduce_every_dtype_and_op(nccl_world, dtype, op):
    dist = nccl_world
    values = np.arange(12).reshape(3, 4) % 5 + 1
    t = _cuda(values, dtype)
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
    np.testing.assert_array_equal(_np(t), values)  # one rank: every op is the identity


def test_bool_all_reduce(nccl_world):
    import genesis

    t = genesis.tensor([True, False, True]).to("cuda")
    nccl_world.all_reduce(t)
    assert t.cpu().tolist() == [True, False, True]


def test_every_collective(nccl_world):
    import genesis

    dist = nccl_world
    base = _cuda(np.arange(8).reshape(4, 2) + 1.0)
    t = base.clone()
    dist.broadcast(t, src=0)
    np.testing.assert_array_equal(_np(t), _np(base))
    t = base.clone()
    dist.reduce(t, dst=0, op=dist.ReduceOp.MAX)
    np.testing.assert_array_equal(_np(t), _np(base))
    parts = [genesis.zeros(4, 2, device="cuda")]
    dist.all_gather(parts, base)
    np.testing.assert_array_equal(_np(parts[0]), _np(base))
    out = genesis.zeros(1, 4, 2, device="cuda")
    dist.all_gather_into_tensor(out, base)
    np.testing.assert_array_equal(_np(out)[0], _np(base))
    out = genesis.zeros(4, 2, device="cuda")
    dist.reduce_scatter_tensor(out, base)
    np.testing.assert_array_equal(_np(out), _np(base))
    out = genesis.zeros(4, 2, device="cuda")
    dist.reduce_scatter(out, [base], op=dist.ReduceOp.AVG)
    np.testing.assert_array_equal(_np(out), _np(base))
    out = genesis.zeros(4, 2, device="cuda")
    dist.all_to_all_single(out, base)
    np.testing.assert_array_equal(_np(out), _np(base))
    dist.barrier()
    with pytest.raises(ValueError, match="src="):
        dist.recv(genesis.zeros(2, device="cuda"))


def test_async_work_orders_the_current_stream(nccl_world):
    import genesis

    dist = nccl_world
    t = genesis.ones(1 << 20, device="cuda")
    work = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)
    work.wait()
    y = t * 3  # queued after the all-reduce on the current stream
    genesis.cuda.synchronize()
    assert work.is_completed()
    assert float(y.sum().item()) == 3 * (1 << 20)


def test_ddp_wrap_and_one_step_on_the_gpu(nccl_world):
    import genesis
    import genesis.optim
    from genesis import nn

    dist = nccl_world
    genesis.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to("cuda")
    genesis.manual_seed(0)
    plain = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to("cuda")
    ddp = dist.DistributedDataParallel(model, bucket_cap_mb=0.0001)
    x = genesis.randn(4, 8, device="cuda")
    ddp(x).square().mean().backward()
    plain(x).square().mean().backward()
    for a, b in zip(model.parameters(), plain.parameters()):
        np.testing.assert_allclose(_np(a.grad), _np(b.grad), rtol=1e-6, atol=1e-7)
    opt = genesis.optim.SGD(ddp.parameters(), lr=0.1)
    opt.step()
    with ddp.no_sync():
        ddp(x).sum().backward()


def test_cuda_tensors_on_gloo_are_refused_clearly(nccl_world):
    import genesis

    dist = nccl_world
    group = dist.new_group([0], backend="gloo")
    with pytest.raises(ValueError, match=r"no backend for cuda tensors \(it has cpu:gloo\)"):
        dist.all_reduce(genesis.ones(2, device="cuda"), group=group)
    # ... and the mixed world sends CPU tensors through gloo, CUDA tensors through nccl
    cpu = genesis.ones(3)
    dist.all_reduce(cpu, op=dist.ReduceOp.SUM)
    assert cpu.tolist() == [1.0, 1.0, 1.0]
    dist.destroy_process_group(group)


def test_nccl_only_group_refuses_cpu_tensors(nccl_world):
    import genesis

    dist = nccl_world
    group = dist.new_group([0], backend="nccl")
    with pytest.raises(ValueError, match="no backend for cpu tensors"):
        dist.all_reduce(genesis.ones(2), group=group)
    dist.destroy_process_group(group)


def test_watchdog_thread_sees_operations_finish(nccl_world):
    import time

    import genesis
    from genesis.distributed.group import world

    backend = world().impl("cuda")
    t = genesis.ones(1 << 16, device="cuda")
    nccl_world.all_reduce(t)
    genesis.cuda.synchronize()
    deadline = time.monotonic() + 10
    while backend._watchdog._pending and time.monotonic() < deadline:
        time.sleep(0.01)  # the watchdog thread drops finished operations as it polls
    assert not backend._watchdog._pending and backend._watchdog.failure is None
