"""The CUDA runtime on a real GPU: lazy init, devices, streams and events, Triton hooks,
host/device transfers, DLPack, generators, and the backend's host-side methods."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import types
import weakref

import numpy as np
import pytest

pytestmark = pytest.mark.cuda

ALL_NUMPY = (np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16,
             np.float32, np.float64)


@pytest.fixture(scope="module")
def backend():
    from genesis.backends import get_backend

    try:
        return get_backend("cuda")
    except Exception:  # entry point not installed: the class itself is the contract
        from genesis_cuda.backend import CUDABackend

        return CUDABackend()


def _memset(arr, value, s):
    from genesis_cuda import driver

    cu = driver.driver()
    driver.check(cu.cuMemsetD8Async(arr.data_ptr(), value, arr.storage.size, s.handle), "memset")


# ------------------------------------------------------------------- lazy init
def test_lazy_init_creates_no_context_until_first_array():
    code = textwrap.dedent("""
        import sys
        import genesis
        assert "genesis_cuda" not in sys.modules, "import genesis imported genesis_cuda"
        import genesis.cuda
        assert genesis.cuda.is_available() and genesis.cuda.device_count() >= 1
        import genesis_cuda, genesis_cuda.backend, genesis_cuda.api
        from genesis_cuda.backend import CUDABackend
        CUDABackend().is_available()
        genesis_cuda.api.get_device_name(0)
        genesis_cuda.api.memory_allocated()
        from cuda.bindings import driver as cu
        cu.cuInit(0)
        err, dev = cu.cuDeviceGet(0)
        err, flags, active = cu.cuDevicePrimaryCtxGetState(dev)
        assert not active, "a CUDA context exists before the first CUDA array"
        from genesis import dtypes as D
        genesis_cuda.array.empty((4,), D.float32, 0)
        err, flags, active = cu.cuDevicePrimaryCtxGetState(dev)
        assert active, "no context after the first CUDA array"
        print("LAZY-OK")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ))
    assert "LAZY-OK" in out.stdout, out.stdout + out.stderr


# --------------------------------------------------------------------- devices
def test_device_queries():
    from genesis_cuda import api

    assert api.is_available() and api.device_count() >= 1
    props = api.get_device_properties(0)
    assert props.total_memory > (1 << 30) and props.major >= 7
    assert props.multi_processor_count > 0
    assert api.get_device_name() == props.name and "NVIDIA" in props.name
    assert api.current_device() == 0
    free, total = api.mem_get_info()
    assert 0 < free <= total == props.total_memory
    api.synchronize()
    with pytest.raises(RuntimeError, match="invalid CUDA device index"):
        api.set_device(api.device_count())


def test_genesis_cuda_forwards_to_api():
    import genesis.cuda

    assert genesis.cuda.is_available()
    assert genesis.cuda.memory_allocated() >= 0
    assert genesis.cuda.Stream is __import__("genesis_cuda.api").api.Stream


# ----------------------------------------------------------- streams and events
def test_event_timing_and_query(backend):
    from genesis import dtypes as D
    from genesis_cuda import api, array

    buf = array.empty((256 << 20,), D.uint8, 0)
    start, end = api.Event(enable_timing=True), api.Event(enable_timing=True)
    s = api.current_stream()
    start.record()
    for _ in range(20):
        _memset(buf, 3, s)
    end.record()
    end.synchronize()
    assert end.query() and start.query()
    ms = start.elapsed_time(end)
    assert 0.0 < ms < 10_000
    with pytest.raises(RuntimeError, match="enable_timing"):
        api.Event().elapsed_time(end)


def test_stream_context_and_ordering(backend):
    from genesis import dtypes as D
    from genesis_cuda import api, array, transfer

    s = api.Stream()
    assert s != api.default_stream() and s.cuda_stream == s.handle != 0
    busy = array.empty((1 << 30,), D.uint8, 0)
    x = array.empty((1 << 20,), D.uint8, 0)
    s.wait_stream(api.current_stream())
    with api.stream(s):
        assert api.current_stream() == s
        for _ in range(20):
            _memset(busy, 1, s)
        _memset(x, 9, s)
    assert api.current_stream() == api.default_stream()
    api.current_stream().wait_stream(s)  # the read below is ordered after s's writes
    assert (transfer.to_numpy(x) == 9).all()
    s.synchronize()
    assert s.query()
    ev = s.record_event()
    ev.synchronize()
    assert ev.query()


def test_triton_uses_genesis_stream_device_and_allocator(backend):
    import triton
    from triton.runtime import driver as tdriver

    from genesis import dtypes as D
    from genesis_cuda import api, array

    array.empty((1,), D.float32, 0)
    s = api.Stream()
    assert tdriver.active.get_current_stream(0) == 0
    with api.stream(s):
        assert tdriver.active.get_current_stream(0) == s.handle
        assert tdriver.active.get_current_stream() == s.handle
    assert tdriver.active.get_current_device() == 0
    assert tuple(tdriver.active.get_device_capability(0)) == api.get_device_capability(0)
    from triton.runtime import _allocation

    buf = _allocation._allocator.get()(4096, 128, 0)
    assert buf.data_ptr() % 128 == 0 and buf.data_ptr() != 0
    del triton


def test_triton_kernel_runs_on_current_stream(backend):
    import triton
    import triton.language as tl

    from genesis import dtypes as D
    from genesis_cuda import api, array, transfer

    @triton.jit
    def add_one(ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(ptr + offs, tl.load(ptr + offs, mask=m) + 1, mask=m)

    n = 1 << 20
    x = array.empty((n,), D.uint8, 0)
    busy = array.empty((1 << 30,), D.uint8, 0)
    s = api.Stream()
    s.wait_stream(api.current_stream())
    with api.stream(s):
        for _ in range(20):
            _memset(busy, 1, s)
        _memset(x, 41, s)
        add_one[(n // 1024,)](x, n, BLOCK=1024)  # must run after the memset: same stream
    api.current_stream().wait_stream(s)
    assert (transfer.to_numpy(x) == 42).all()


# ------------------------------------------------------------------ transfers
@pytest.mark.parametrize("np_dtype", ALL_NUMPY)
@pytest.mark.parametrize("n", [0, 1, 1000, (1 << 20) + 3])
def test_host_roundtrip(backend, np_dtype, n):
    rng = np.random.default_rng(n)
    data = (rng.random(n) * 100 - 50).astype(np_dtype)
    a = backend.from_numpy(data, 0)
    assert a.shape == (n,) and backend.device_index_of(a) == 0
    np.testing.assert_array_equal(backend.to_numpy(a), data)


def test_from_numpy_non_contiguous_and_0d(backend):
    data = np.arange(24, dtype=np.float32).reshape(4, 6).T
    a = backend.from_numpy(data, 0)
    assert a.shape == (6, 4) and backend.strides_of(a) == (4, 1)
    np.testing.assert_array_equal(backend.to_numpy(a), data)
    s = backend.from_numpy(np.array(3.5, dtype=np.float64), 0)
    assert s.shape == () and backend.item(s) == 3.5


def test_many_small_uploads_keep_their_values(backend):
    # The pinned staging ring is reused: each upload must land intact.
    arrays = [backend.from_numpy(np.full(1000, i, np.int32), 0) for i in range(40)]
    for i, a in enumerate(arrays):
        assert (backend.to_numpy(a) == i).all()


def test_item_all_dtypes(backend):
    from genesis import dtypes as D
    from genesis_cuda import array

    for np_dtype in ALL_NUMPY:
        v = np.array([1], dtype=np_dtype)
        got = backend.item(backend.from_numpy(v, 0))
        assert got == v[0].item() and type(got) is type(v[0].item())
    bits = np.array([0x3FC0], dtype=np.int16)  # bfloat16 1.5
    raw = backend.from_numpy(bits, 0)
    bf = array.new_array((), (), 0, D.bfloat16, raw.storage, 0)
    assert backend.item(bf) == 1.5


def test_as_strided_view_and_geometry(backend):
    from genesis import dtypes as D

    a = backend.from_numpy(np.arange(12, dtype=np.float32), 0)
    v = backend.as_strided(a, (3, 2), (4, 2), 1)
    assert backend.storage_offset_of(v) == 1 and backend.strides_of(v) == (4, 2)
    assert backend.data_ptr(v) == backend.data_ptr(a) + 4
    assert backend.dtype_of(v) is D.float32
    assert str(backend.dtype_of(v)).endswith("float32")
    e = backend.empty((0, 5), D.float32, 0)
    assert e.shape == (0, 5) and backend.to_numpy(e).shape == (0, 5)


def test_copy_and_full_through_kernels(backend):
    from genesis import dtypes as D

    try:
        f = backend.full((3, 4), 2.5, D.float32, 0)
        np.testing.assert_array_equal(backend.to_numpy(f), np.full((3, 4), 2.5, np.float32))
        t = backend.as_strided(f, (4, 3), (1, 4), 0)
        np.testing.assert_array_equal(backend.to_numpy(t), np.full((4, 3), 2.5, np.float32))
        c = backend.cast(f, D.int32)
        assert backend.dtype_of(c) is D.int32 and backend.item(
            backend.as_strided(c, (), (), 0)) == 2
    except (NotImplementedError, ImportError, AttributeError) as exc:
        pytest.skip(f"elementwise kernels not ready: {exc}")


# --------------------------------------------------------------------- DLPack
def test_dlpack_roundtrip_with_torch(backend):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    a = backend.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4), 0)
    t = torch.from_dlpack(backend.to_dlpack(a))
    assert t.device.type == "cuda" and t.data_ptr() == backend.data_ptr(a)
    np.testing.assert_array_equal(t.cpu().numpy(), backend.to_numpy(a))
    t2 = torch.arange(10, device="cuda", dtype=torch.int64)[::2]
    g = backend.from_dlpack(t2, 0)
    assert g.shape == (5,) and g.strides == (2,)
    assert backend.data_ptr(g) == t2.data_ptr()
    del t2
    h = backend.from_dlpack(torch.ones(3, device="cuda", dtype=torch.bfloat16), 0)
    assert str(backend.dtype_of(h)).endswith("bfloat16")
    assert backend.dlpack_device(a) == (2, 0)


# ----------------------------------------------------------------- generators
def test_generators(backend):
    from genesis_cuda import api
    from genesis_cuda.generator import PhiloxGenerator

    gen = backend.default_generator(0)
    assert isinstance(gen, PhiloxGenerator) and gen is backend.default_generator(0)
    backend.manual_seed_generator(gen, 1234)
    assert (gen.seed, gen.offset) == (1234, 0)
    assert gen.next_offset(100) == 0 and gen.next_offset(5) == 100 and gen.offset == 105
    state = backend.get_generator_state(gen)
    assert state.dtype == np.uint8 and state.ndim == 1
    gen.next_offset(7)
    backend.set_generator_state(gen, state)
    assert (gen.seed, gen.offset) == (1234, 105)
    other = backend.new_generator(0)
    assert other is not gen
    api.manual_seed(99)
    assert gen.seed == 99 and gen.offset == 0
    st = api.get_rng_state(0)
    api.set_rng_state(st, 0)
    assert gen.seed == 99


def test_public_api_and_backend_basics(backend):
    from genesis_cuda import api

    assert backend.public_api() is api
    assert backend.is_available() and backend.device_count() >= 1
    backend.synchronize(0)
    assert "num_allocs" in backend.memory_stats(0)


@pytest.mark.multigpu
def test_cross_device_copy(backend):
    from genesis import dtypes as D

    data = np.arange(1 << 16, dtype=np.float32)
    a = backend.from_numpy(data, 0)
    b = backend.empty((1 << 16,), D.float32, 1)
    backend.copy_(b, a)
    np.testing.assert_array_equal(backend.to_numpy(b), data)


def test_reinterpret(backend):
    from genesis import dtypes as D

    a = backend.from_numpy(np.array([1.0, -2.0], np.float32), 0)
    bits = backend.reinterpret(a, D.int32)
    np.testing.assert_array_equal(backend.to_numpy(bits),
                                  np.array([1.0, -2.0], np.float32).view(np.int32))
    with pytest.raises(TypeError, match="element sizes differ"):
        backend.reinterpret(a, D.int64)


# --------------------------------------------------------- genesis tensors on CUDA
def _genesis_or_skip():
    import genesis

    if not hasattr(genesis, "tensor"):
        pytest.skip("genesis.tensor not available yet")
    return genesis


def test_tensor_on_cuda_roundtrip():
    genesis = _genesis_or_skip()
    from genesis_cuda import api

    before = api.memory_allocated()
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = genesis.tensor(data, device="cuda")
    assert x.device == genesis.device("cuda:0") and x.is_cuda
    assert api.memory_allocated() >= before + data.nbytes
    np.testing.assert_array_equal(x.cpu().numpy(), data)
    y = genesis.from_numpy(data).cuda()
    np.testing.assert_array_equal(y.to("cpu").numpy(), data)
    assert x[1, 2].item() == 6.0
    del x, y
    assert api.memory_allocated() == before


def test_tensor_ops_on_cuda():
    genesis = _genesis_or_skip()
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = genesis.tensor(data, device="cuda")
    try:
        y = (x * 2 + 1).sum()
        t = x.t().contiguous()
    except NotImplementedError as exc:
        pytest.skip(f"kernels not ready: {exc}")
    assert y.item() == float((data * 2 + 1).sum())
    np.testing.assert_array_equal(t.cpu().numpy(), data.T)


def test_cuda_random_is_reproducible_from_manual_seed():
    genesis = _genesis_or_skip()
    try:
        genesis.manual_seed(123)
        a = genesis.rand(1000, device="cuda").cpu().numpy()
        b = genesis.rand(1000, device="cuda").cpu().numpy()
        genesis.manual_seed(123)
        c = genesis.rand(1000, device="cuda").cpu().numpy()
    except NotImplementedError as exc:
        pytest.skip(f"random kernels not ready: {exc}")
    np.testing.assert_array_equal(a, c)
    assert not np.array_equal(a, b)
    assert 0.0 <= a.min() and a.max() < 1.0
    state = genesis.cuda.get_rng_state()
    d = genesis.rand(10, device="cuda").cpu().numpy()
    genesis.cuda.set_rng_state(state)
    np.testing.assert_array_equal(genesis.rand(10, device="cuda").cpu().numpy(), d)


@pytest.mark.multigpu
def test_cross_device_copy_with_cast_and_strides(backend):
    from genesis import dtypes as D

    data = np.arange(64, dtype=np.float32).reshape(8, 8)
    a = backend.from_numpy(data, 0)
    at = backend.as_strided(a, (8, 8), (1, 8), 0)  # a transposed view on device 0
    b = backend.empty((8, 8), D.float64, 1)
    backend.copy_(b, at)
    np.testing.assert_array_equal(backend.to_numpy(b), data.T.astype(np.float64))
    back = backend.empty((8, 8), D.float32, 0)
    backend.copy_(backend.as_strided(back, (8, 8), (1, 8), 0), b)
    np.testing.assert_array_equal(backend.to_numpy(back), data)


@pytest.mark.multigpu
def test_second_device_allocator_streams_and_kernels(backend):
    """Device 1's allocator, streams and kernels. memory_allocated counts a block as freed
    when its storage is released, before the events of its cross-stream uses complete (as
    torch's CUDACachingAllocator::free decreases allocated_bytes before insert_events;
    tests/cuda/test_allocator_logic.py). What is left to chance is *when* a storage is
    released: an array caught in a reference cycle waits for the garbage collector. So the
    baseline is taken after a collection, the frees are followed by one, and a storage still
    alive after it is named with what holds it (a cache or a lost reference, not a cycle)."""
    from genesis import dtypes as D
    from genesis_cuda import api

    gc.collect()
    base0, base1 = api.memory_allocated(0), api.memory_allocated(1)
    frees1 = api.memory_stats(1).get("num_frees", 0)
    x = backend.from_numpy(np.arange(1000, dtype=np.float32), 1)
    assert backend.device_index_of(x) == 1
    assert api.memory_allocated(1) > base1 and api.memory_allocated(0) == base0
    s1 = api.Stream(1)
    with api.stream(s1):
        assert api.current_device() == 1 and api.current_stream(1) == s1
        y = backend.binary("add", x, 1.0)
    assert api.current_device() == 0
    s1.synchronize()
    np.testing.assert_array_equal(backend.to_numpy(y), np.arange(1000, dtype=np.float32) + 1)
    api.set_device(1)
    try:
        z = backend.full((10,), 3.0, D.float32, 1)
        total = backend.sum(z, (0,), False, D.float32)
        assert backend.item(total) == 30.0
    finally:
        api.set_device(0)
    storages = {name: weakref.ref(a.storage) for name, a in
                (("x", x), ("y", y), ("z", z), ("the sum's output", total))}
    del x, y, z, total
    gc.collect()
    alive = {name: _holders(ref()) for name, ref in storages.items() if ref() is not None}
    stats = api.memory_stats(1)
    if alive or api.memory_allocated(1) != base1:  # say what is live, and what holds it
        pytest.fail(f"memory_allocated(1) {api.memory_allocated(1)} (baseline {base1}): "
                    f"{stats['num_frees'] - frees1} of 4 frees since the baseline, "
                    f"{stats['num_pending_frees']} waiting for events; storages still alive "
                    f"after gc.collect(), with what holds them: {alive}")


def _describe(obj) -> str:
    """A short name for a referrer: a module's globals, an instance's attributes, a dict's
    first keys, a frame's function and line, a container's type and length."""
    if isinstance(obj, dict):
        module = next((m.__name__ for m in list(sys.modules.values())
                       if getattr(m, "__dict__", None) is obj), None)
        if module is not None:
            return f"globals of {module}"
        keys = ", ".join(repr(k)[:30] for k in list(obj)[:4])
        return f"dict[{len(obj)}]{{{keys}}}"
    if isinstance(obj, types.FrameType):
        return f"frame {obj.f_code.co_name} ({obj.f_code.co_filename}:{obj.f_lineno})"
    if isinstance(obj, (tuple, list, set)):
        return f"{type(obj).__name__}[{len(obj)}]"
    if isinstance(obj, (types.FunctionType, types.MethodType)):
        return f"{type(obj).__name__} {getattr(obj, '__qualname__', '?')}"
    return type(obj).__name__


def _holders(storage, depth: int = 4) -> list[str]:
    """What keeps ``storage`` alive: chains of referrers up to ``depth`` levels, such as
    ``CudaArray <- tuple[2] <- dict[3]{'x', ...} <- globals of some.module``. The walk
    holds its objects only in its own frames and in the lists ``gc.get_referrers``
    returns, and skips both."""
    skip = {id(sys._getframe())}
    target = id(storage)  # (an id, not the object: the closure must not hold it)
    chains: list[str] = []

    def walk(obj, path: str, left: int) -> None:
        skip.add(id(sys._getframe()))
        refs = gc.get_referrers(obj)
        skip.add(id(refs))
        shown = 0
        for i in range(len(refs)):
            if id(refs[i]) in skip or id(refs[i]) == target or shown == 4:
                continue
            shown += 1
            step = f"{path} <- {_describe(refs[i])}" if path else _describe(refs[i])
            if left > 1:
                walk(refs[i], step, left - 1)
            else:
                chains.append(step)
        if not shown:
            chains.append(path or "(nothing)")

    walk(storage, "", depth)
    return sorted(set(chains))
