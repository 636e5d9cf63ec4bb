"""``parallel_compile``: kernels compiled by worker processes for an explicit GPU target are
the ones the parent's own launch would compile (Triton's cache hits), without a GPU.

Triton compiles for a ``GPUTarget`` on a machine without one (its bundled ``ptxas``): the test
process pretends to be on an sm_90 GPU (``compile_worker.TargetDriver`` as Triton's active
driver), collects what a ``warmup`` would compile, has the workers compile it into a
temporary ``TRITON_CACHE_DIR`` and then compiles again in process through Triton's JIT: every
kernel must be a cache hit (Triton's compilation listener says so), for a generated kernel
(a module loaded from a file) and a package kernel. Skipped where Triton has no NVIDIA
backend or cannot compile for sm_90 here. Not marked ``cuda``: CI runs it.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
import uuid

import pytest

triton = pytest.importorskip("triton")

import triton.language as tl  # noqa: E402
from triton import knobs  # noqa: E402
from triton.runtime import driver as triton_driver  # noqa: E402

try:
    from triton.backends.compiler import GPUTarget

    from genesis_cuda.kernels import compile_worker, parallel_compile
    from genesis_cuda.kernels.compile_pool import WorkerPool
    from genesis_cuda.kernels.matmul_kernels import _mm_kernel
    from genesis_cuda.kernels.matmul_tuning import _spin_kernel
except ImportError as e:  # no NVIDIA backend in this Triton
    pytest.skip(f"Triton's NVIDIA backend is missing: {e}", allow_module_level=True)

SM90 = GPUTarget("cuda", 90, 32)
CACHE_DIR_AT_IMPORT = knobs.cache.dir
_DEVICES = itertools.count(1000)
GENERATED = '''import triton
import triton.language as tl


@triton.jit
def fused_exp_mul(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(x + offs, mask=mask)
    b = tl.load(y + offs, mask=mask)
    tl.store(out + offs, tl.exp(a) * b, mask=mask)
'''


class _Arg:
    """A pointer argument: an aligned address and a dtype name, as Triton keys them."""

    def __init__(self, dtype: str):
        self.dtype = dtype

    def data_ptr(self) -> int:
        return 0


@pytest.fixture(scope="module")
def _can_compile_sm90(tmp_path_factory):
    src = triton.compiler.ASTSource(_spin_kernel, {"ns": "i64"}, {}, {})
    # (the cache directory the process had is put back: Triton 3.6 takes None literally, and
    # every later compilation in the process failed with "Could not create or locate cache
    # dir" on the H200)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(knobs.cache, "dir", str(tmp_path_factory.mktemp("probe")))
        try:
            triton.compile(src, target=SM90)
        except Exception as e:  # noqa: BLE001 - no ptxas or no sm_90 support here
            pytest.skip(f"Triton cannot compile for sm_90 here: {type(e).__name__}: {e}")


@pytest.fixture
def sm90(tmp_path, monkeypatch, _can_compile_sm90):
    """This process compiles for sm_90 (no GPU), into a fresh Triton cache; yields the
    compilation listener's record: ``(function name, cache_hit)`` per compilation."""
    driver = compile_worker.TargetDriver(SM90)
    # a device number of its own: the JIT's in-memory caches (per device) start empty, even
    # where a real GPU 0 compiled these kernels earlier in the process
    device = next(_DEVICES)
    monkeypatch.setattr(driver, "get_current_device", lambda: device)
    monkeypatch.setattr(triton_driver, "_active", driver)
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "triton"))
    seen: list = []
    monkeypatch.setattr(knobs.compilation, "listener",
                        lambda src, metadata, metadata_group, times, cache_hit:
                        seen.append((src.fn.__name__, cache_hit)))
    yield seen


def _generated(tmp_path, source: str = GENERATED):
    """A kernel module loaded from a file, as ``kernel_cache.load`` loads generated ones."""
    name = f"genesis_compiled_test_{uuid.uuid4().hex[:12]}"
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _calls(fused):
    return [
        lambda: fused.warmup(_Arg("float32"), _Arg("float32"), _Arg("float32"), 1000,
                             grid=(8,), BLOCK=128, num_warps=4),
        lambda: fused.warmup(_Arg("float32"), _Arg("float32"), _Arg("float32"), 1024,
                             grid=(8,), BLOCK=128, num_warps=4),
        lambda: _spin_kernel.warmup(2_000_000, grid=(1,), num_warps=1),
    ]


def _matmul_call():
    """A matmul tile config's compilation: a package kernel with dtype and string
    constexprs (Triton serialises those specially)."""
    f32 = _Arg("float32")
    return lambda: _mm_kernel.warmup(f32, f32, f32, 64, 64, 64, 1, *[0] * 12, f32, 0,
                                     HAS_BIAS=False, PREC="ieee", ACC=tl.float32, EVEN_K=True,
                                     BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, GROUP_M=8, grid=(1,),
                                     num_stages=2, num_warps=4, enable_fp_fusion=True)


def test_workers_compile_what_the_parent_then_finds_in_triton_cache(sm90, tmp_path):
    fused = _generated(tmp_path).fused_exp_mul
    calls = _calls(fused) + [_matmul_call()]
    jobs = parallel_compile.collect(calls + calls[:1])  # the repeat is one job
    assert len(jobs) == 4 and not sm90  # collected, nothing compiled
    report = parallel_compile.compile_jobs(jobs, workers=2)
    assert report == parallel_compile.Report(4, 4, 0, [])
    assert not sm90  # the workers compiled; this process did not
    for call in calls:  # what a first launch does: Triton's JIT compiles (from the cache)
        assert call() is not None
    assert sorted(sm90) == [("_mm_kernel", True), ("_spin_kernel", True),
                            ("fused_exp_mul", True), ("fused_exp_mul", True)]


def test_threads_compile_in_process_when_workers_are_off(sm90, tmp_path, monkeypatch):
    fused = _generated(tmp_path).fused_exp_mul
    calls = _calls(fused)[:2]
    monkeypatch.setenv(parallel_compile.WORKERS_ENV, "0")
    report = parallel_compile.precompile_calls(calls)
    assert report == parallel_compile.Report(2, 0, 2, [])
    assert sorted(sm90) == [("fused_exp_mul", False)] * 2  # compiled here
    for call in calls:  # in the JIT's own cache now: no compilation at all
        call()
    assert len(sm90) == 2


def test_a_kernel_that_fails_in_a_worker_fails_at_its_launch_not_before(sm90, tmp_path):
    broken = _generated(tmp_path, GENERATED.replace("tl.exp(a) * b", "tl.exp(a) * c"))
    call = _calls(broken.fused_exp_mul)[0]
    report = parallel_compile.compile_jobs(parallel_compile.collect([call]), workers=1)
    assert (report.kernels, report.in_workers, report.in_threads) == (1, 0, 1)
    assert len(report.errors) == 1 and "c" in report.errors[0]  # the worker's traceback
    with pytest.raises(triton.CompilationError):
        call()  # the first launch compiles again and raises where the kernel is used


def test_threads_take_over_when_no_worker_can_start(sm90, tmp_path, monkeypatch):
    def no_processes(size):
        raise OSError("no more processes")

    monkeypatch.setattr(parallel_compile, "_pool", None)
    monkeypatch.setattr(parallel_compile, "WorkerPool", no_processes)
    calls = _calls(_generated(tmp_path).fused_exp_mul)[:2]
    report = parallel_compile.precompile_calls(calls, workers=3)
    assert report[:3] == (2, 0, 2)
    assert report.errors == ["compile workers could not be started: no more processes"] * 2
    assert sorted(sm90) == [("fused_exp_mul", False)] * 2  # compiled here, on threads


def test_collecting_records_only_this_threads_compilations(sm90, tmp_path):
    import threading

    fused = _generated(tmp_path).fused_exp_mul
    other = _calls(fused)[1]
    with parallel_compile.collecting() as jobs:
        _calls(fused)[0]()
        t = threading.Thread(target=other)  # another thread compiles as usual meanwhile
        t.start()
        t.join()
    assert len(jobs) == 1 and sm90 == [("fused_exp_mul", False)]
    assert knobs.runtime.jit_cache_hook is None  # the hook is gone again


def test_worker_count_knob(monkeypatch):
    monkeypatch.setenv(parallel_compile.WORKERS_ENV, "3")
    assert parallel_compile.worker_count() == 3
    monkeypatch.setenv(parallel_compile.WORKERS_ENV, "0")
    assert parallel_compile.worker_count() == 0
    monkeypatch.delenv(parallel_compile.WORKERS_ENV)
    assert 0 <= parallel_compile.worker_count() <= parallel_compile.MAX_WORKERS
    for bad in ("-1", "four"):
        monkeypatch.setenv(parallel_compile.WORKERS_ENV, bad)
        with pytest.raises(ValueError, match=f"GENESIS_COMPILE_WORKERS.*{bad}"):
            parallel_compile.worker_count()


def test_the_default_shares_the_cores_among_the_hosts_ranks(monkeypatch):
    monkeypatch.delenv(parallel_compile.WORKERS_ENV, raising=False)
    monkeypatch.setattr(parallel_compile.os, "sched_getaffinity", lambda pid: set(range(128)),
                        raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert parallel_compile.worker_count() == parallel_compile.MAX_WORKERS  # alone: 16
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")  # torchrun, eight ranks on this host
    assert parallel_compile.worker_count() == 16
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "32")
    assert parallel_compile.worker_count() == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "128")  # one core a rank: threads only
    assert parallel_compile.worker_count() == 0
    monkeypatch.setattr(parallel_compile.os, "sched_getaffinity", lambda pid: {0, 1, 2},
                        raising=False)  # (an affinity mask: 3 of the machine's cores)
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert parallel_compile.worker_count() == 3


def test_the_pool_refuses_bad_input_and_survives_a_dead_worker():
    with pytest.raises(ValueError, match="at least one worker"):
        WorkerPool(0)
    pool = WorkerPool(2)
    try:
        # a job the worker cannot use: an error reply, not a dead worker
        bad = {"module": "no_such_module_here", "name": "k", "spec": "{}", "path": None,
               "target": {"backend": "cuda", "arch": 90, "warp_size": 32}, "cache_dir": None}
        assert "no_such_module_here" in pool.run([bad])[0]
        assert pool.alive == 2
        pool.procs[0].kill()
        pool.procs[0].wait()
        errors = pool.run([bad, bad, bad])
        assert all("no_such_module_here" in e for e in errors)  # the live worker took all
    finally:
        pool.close()
    assert pool.alive == 0
    assert all(p.stdout.closed for p in pool.procs)  # (no ResourceWarning at exit)
    assert pool.run([bad]) == ["no compile worker was running"]


def test_a_worker_answers_a_bad_line_with_an_error():
    replies: list = []
    compile_worker.serve(["not json\n", "[1, 2]\n"], replies.append)
    assert [json.loads(r)["ok"] for r in replies] == [False, False]
    assert "bad job line" in json.loads(replies[1])["error"]


def _builds_c_launchers() -> str | None:
    """Why this Triton's launchers cannot be checked here (None: they can): only Tritons
    up to 3.6 build a C launcher per signature, linked against libcuda."""
    from triton.backends.nvidia import driver as nvidia_driver

    if not hasattr(nvidia_driver, "compile_module_from_src"):
        return "this Triton has one shared launcher, no C build per signature"
    try:
        nvidia_driver.libcuda_dirs()
    except Exception as e:  # noqa: BLE001 - no libcuda on this machine
        return f"no libcuda to link launchers against: {e}"
    return None


@pytest.mark.skipif(_builds_c_launchers() is not None, reason=str(_builds_c_launchers()))
def test_workers_build_the_c_launcher_the_parent_then_loads(sm90, monkeypatch, tmp_path):
    from triton.runtime import build

    call = _calls(_generated(tmp_path).fused_exp_mul)[0]  # a kernel new to this process
    report = parallel_compile.compile_jobs(parallel_compile.collect([call]), workers=1)
    assert report == parallel_compile.Report(1, 1, 0, [])
    compiled = call()

    def no_build(*args, **kwargs):
        raise AssertionError("the parent built a C launcher the worker had built")

    monkeypatch.setattr(build, "_build", no_build)
    compile_worker.CudaLauncher(compiled.src, compiled.metadata)  # from Triton's cache


@pytest.mark.cuda
def test_workers_hold_no_cuda_context(sm90, tmp_path):
    """On a GPU machine: a worker that compiled (and built its launcher) is not among the
    processes holding a CUDA context."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi is not installed")
    pool = WorkerPool(1)
    try:
        fused = _generated(tmp_path).fused_exp_mul
        (job,) = parallel_compile.collect(_calls(fused)[:1])
        assert pool.run([parallel_compile.worker_job(job, SM90)]) == [None]
        apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                              capture_output=True, text=True, check=True).stdout.split()
        assert str(pool.procs[0].pid) not in apps
    finally:
        pool.close()


def test_the_probe_puts_back_the_processes_triton_cache_directory(_can_compile_sm90):
    """The tests that follow compile into the cache directory the process had (under Triton
    3.6 the probe once left None there, and every later compilation failed)."""
    assert knobs.cache.dir == CACHE_DIR_AT_IMPORT
