"""``_launch.Launcher``'s one cache, without a GPU: when a launch compiles, when it reuses a
compiled kernel, and what a ``Site`` (a plan's pinned cache entry) hands the compiled kernel.

The kernel's JIT is replaced by a recording stand-in (``_Compiler``): a "compile" records the
arguments and options Triton would have been given and returns a compiled kernel whose
launcher records each direct launch. That the kernels give torch's results through these
paths is what the GPU tests of each family check (``tools/device/gpu_suite.sh tests``).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
_launch = pytest.importorskip("genesis_cuda.kernels._launch")

from launch_pointer import Pointer  # noqa: E402

from genesis import dtypes as D  # noqa: E402
from genesis_cuda.array import contiguous_strides, new_array  # noqa: E402
from genesis_cuda.kernels import elementwise as ew  # noqa: E402
from genesis_cuda.kernels import matmul_small  # noqa: E402
from genesis_cuda.kernels import reduction as red  # noqa: E402
from genesis_cuda.kernels.matmul_tuning import plan_site  # noqa: E402


@triton.jit
def _probe(x, y, n, BLOCK: tl.constexpr):
    pass


class _Compiler:
    """Stands in for ``fn[grid]``: records each compile (arguments, options) and each direct
    launch of what it compiled (grid, stream, arguments)."""

    def __init__(self):
        self.compiles, self.direct = [], []

    def __getitem__(self, grid):
        def compile_and_launch(*args, **opts):
            self.compiles.append((grid, args, opts))
            return SimpleNamespace(run=self._run, function=None, packed_metadata=None)
        return compile_and_launch

    def _run(self, g0, g1, g2, stream, *head_and_args):
        self.direct.append(((g0, g1, g2), stream, head_and_args[5:]))  # after the head


@pytest.fixture
def direct(monkeypatch):
    """Direct launches on, the interpreter off, every stream handle 7."""
    if _launch.INTERPRET:
        pytest.skip("under the Triton interpreter launches are not cached")
    monkeypatch.setattr(_launch, "INTERPRET", False)
    monkeypatch.setattr(_launch, "DIRECT", True)
    monkeypatch.setattr(_launch, "_stream_handle", lambda device: 7)


def _probe_launcher():
    la = _launch.Launcher(_probe, num_warps=4)
    la.fn = _Compiler()
    return la


def test_a_key_compiles_once_per_device_then_launches_directly(direct):
    la = _probe_launcher()
    x, y = Pointer(0x1000), Pointer(0x2000)
    for device in (0, 0, 1, 1, 0):
        la.launch(("k",), device, (3, 2), (x, y, 32, 64))
    assert len(la.fn.compiles) == 2  # one per device
    assert [d[0] for d in la.fn.direct] == [(3, 2, 1)] * 3
    assert all(stream == 7 for _, stream, _ in la.fn.direct)


def test_big_launches_and_switched_off_direct_launches_always_go_through_triton(
        direct, monkeypatch):
    la = _probe_launcher()
    args = (Pointer(0x1000), Pointer(0x2000), 2**31, 64)
    for _ in range(2):
        la.launch(("k",), 0, (1,), args, True)
    assert len(la.fn.compiles) == 2 and la.cache == {} and la.fn.direct == []
    monkeypatch.setattr(_launch, "DIRECT", False)  # GENESIS_DIRECT_LAUNCH=0
    for _ in range(2):
        la.launch(("k",), 0, (1,), args[:2] + (32, 64))
    assert len(la.fn.compiles) == 4 and la.cache == {}


def test_raw_addresses_go_to_the_compiled_kernel_and_the_arrays_to_the_compile(direct):
    la = _probe_launcher()
    x, y = Pointer(0x1000), Pointer(0x2000)
    for _ in range(2):
        la.launch(("k",), 0, (1,), (0x1000, 0x2000, 32, 64), False, (x, y))
    (_, compiled_with, _), = la.fn.compiles
    assert compiled_with[:2] == (x, y) and compiled_with[2:] == (32, 64)
    (_, _, launched_with), = la.fn.direct
    assert launched_with == (0x1000, 0x2000, 32, 64)


def test_a_site_keeps_its_entry_and_shares_the_launchers_cache(direct):
    la = _probe_launcher()
    x, y = Pointer(0x1000), Pointer(0x2000)
    first, second = la.site(("plan",)), la.site(("plan",))
    first.launch(0, 0, 4, 1, (0x1000, 0x2000, 32), (x, y), (64,))
    second.launch(0, 0, 4, 1, (0x1000, 0x2000, 32), (x, y), (64,))
    assert len(la.fn.compiles) == 1  # one cache: the second site found the first's kernel
    la.cache.clear()  # a repeat neither builds nor looks a key up: it calls its entry
    first.launch(0, 0, 4, 1, (0x3000, 0x4000, 48), (x, y), (64,))
    assert len(la.fn.compiles) == 1
    assert la.fn.direct[-1] == ((4, 1, 1), 7, (0x3000, 0x4000, 48, 64))


def test_each_variant_of_a_site_has_its_own_compiled_kernel(direct):
    la = _probe_launcher()
    site = la.site(("plan",))
    x, y = Pointer(0x1000), Pointer(0x2004)
    for variant in (1, 1, 3, 1 << 3 | 1):  # e.g. device << 3 | alignment bits
        site.launch(variant, variant >> 3, 1, 1, (0x1000, 0x2004, 32), (x, y), (64,))
    assert len(la.fn.compiles) == 3 and sorted(site.entries) == [1, 3, 9]
    assert set(la.cache) == {((("plan",), 1), 0), ((("plan",), 3), 0), ((("plan",), 9), 1)}


def test_a_site_without_a_key_is_keyed_by_its_first_launch(direct):
    la = _probe_launcher()
    aligned_site, misaligned_site = la.site(), la.site()
    aligned_site.launch(0, 0, 1, 1, (Pointer(0x1000), Pointer(0x2000), 32), None, (64,))
    misaligned_site.launch(0, 0, 1, 1, (Pointer(0x1004), Pointer(0x2000), 32), None, (64,))
    assert len(la.fn.compiles) == 2  # Triton would specialise them differently
    assert aligned_site.key == (("float32", True), ("float32", True), 16, 64)
    assert misaligned_site.key[0] == ("float32", False)


def test_shared_launchers_are_one_per_kernel_and_options():
    assert _launch.launcher(_probe, num_warps=4) is _launch.launcher(_probe, num_warps=4)
    assert _launch.launcher(_probe, num_warps=4) is not _launch.launcher(_probe, num_warps=8)


def test_a_matmul_plan_compiles_with_launch_pdl_from_its_tail(direct):
    fn = matmul_small._small_m_kernel
    site, tail = plan_site(fn, dict(HAS_BIAS=False, PARTIAL=False, PREC=None, GATED=False,
                                    PDL=True, BLOCK_M=1, BLOCK_N=8, BLOCK_K=256),
                           num_warps=4, num_stages=3)
    site.launcher = _launch.Launcher(fn, num_warps=4, num_stages=3)  # a private cache
    site.launcher.fn = _Compiler()
    w = Pointer(0x1000, D.bfloat16)
    args = (w, w, w, w, w, w) + (1,) * (len(fn.arg_names) - len(tail) - 6)
    site.launch(0, 0, 2, 1, args, None, tail)
    site.launch(0, 0, 2, 1, args, None, tail)
    (_, compiled_with, opts), = site.launcher.fn.compiles
    assert opts["launch_pdl"] is True and opts["num_stages"] == 3
    assert compiled_with[-len(tail):] == tail and len(site.launcher.fn.direct) == 1


def test_plan_site_refuses_constexprs_that_are_not_the_last_parameters():
    with pytest.raises(ValueError, match="must be its last parameters"):
        plan_site(_probe, {"y": 3, "BLOCK": 64})  # y is followed by n


def test_interpreted_arguments_convert_arrays_and_repoint_descriptors(monkeypatch):
    from triton.tools.tensor_descriptor import TensorDescriptor

    class Tensor(Pointer):  # what the test-suite's converter gives: a torch tensor
        pass

    monkeypatch.setattr(_launch, "interpret_arg", lambda a: Tensor(a.data_ptr()))
    desc = TensorDescriptor(Pointer(0x1000), [4, 8], [8, 1], [2, 8])
    seen = _launch._interpreted(desc)
    assert type(seen.base) is Tensor and seen.base.data_ptr() == 0x1000
    assert list(seen.block_shape) == [2, 8] and list(seen.strides) == [8, 1]
    assert type(_launch._interpreted(Pointer(0x2000))) is Tensor
    assert _launch._interpreted(5) == 5


# ----------------------------------------------- the plans of the hot families, on fakes
class _Storage:
    def __init__(self, ptr):
        self.ptr, self.size = ptr, 1 << 20


def _array(shape, ptr, dtype=D.float32, device=0):
    shape = tuple(shape)
    return new_array(shape, contiguous_strides(shape), 0, dtype, _Storage(ptr), device)


@pytest.fixture
def fake_kernels(direct, monkeypatch):
    """Every launcher of the elementwise and reduction kernels compiles into a recorder."""
    compilers = []
    launchers = [ew._flat, ew._flat_small, *ew._tiled.values(), *red._reduce.values()]
    for la in launchers:
        c = _Compiler()
        compilers.append(c)
        monkeypatch.setattr(la, "fn", c)
        monkeypatch.setattr(la, "cache", {})
    monkeypatch.setattr(ew, "_flat_by_warps", {ew.FLAT_WARPS: ew._flat})
    monkeypatch.setattr(ew, "_unary_cache", {})
    monkeypatch.setattr(red, "_schedules", {})
    monkeypatch.setattr(_launch, "_sm_counts", {0: 132, 1: 132})
    monkeypatch.setattr(_launch, "empty", lambda shape, dtype, device=0:
                        _array(shape, 0x100000, dtype, device))
    return compilers


def _counts(compilers):
    return sum(len(c.compiles) for c in compilers), sum(len(c.direct) for c in compilers)


def test_a_flat_elementwise_op_has_a_compiled_kernel_per_device_and_alignment(fake_kernels):
    exp = ew.unary_kernel("exp")
    out = _array((100,), 0x9000)
    exp(_array((100,), 0x1000), out)
    exp(_array((100,), 0x2000), out)  # same alignment: the same kernel, launched directly
    assert _counts(fake_kernels) == (1, 1)
    exp(_array((100,), 0x1004), out)  # an operand off its 16-byte boundary
    exp(_array((100,), 0x1000, device=1), _array((100,), 0x9000, device=1))
    assert _counts(fake_kernels) == (3, 1)
    exp(_array((100,), 0x3004), out)
    assert _counts(fake_kernels) == (3, 2)


def test_a_reduction_plan_has_a_compiled_kernel_per_alignment(fake_kernels):
    a = _array((8, 64), 0x1000)
    red.sum(a, (1,), False, D.float32)
    red.sum(_array((8, 64), 0x2000), (1,), False, D.float32)
    assert _counts(fake_kernels) == (1, 1)
    red.sum(_array((8, 64), 0x2008), (1,), False, D.float32)
    assert _counts(fake_kernels) == (2, 1)


@pytest.mark.parametrize("path", ["pointer", "tma"])
def test_a_matmul_plan_compiles_once_then_launches_directly(fake_kernels, monkeypatch, path):
    """A matmul plan's site is keyed by its first launch's arguments (host TMA descriptors
    included) and reuses the compiled kernel on the next call, with the new operands."""
    from genesis_cuda.kernels import matmul as mm

    m = n = k = 256
    dt = D.bfloat16
    if path == "pointer":
        bind, _, _, cfg = mm._ptr_binder(dt, m, n, k, [], [k, 1], [n, 1], [n, 1], False, 0)
        fn = mm._mm_kernel
    else:
        monkeypatch.setattr(mm, "sm_count", lambda device: 132)
        bind, _, cands, _ = mm._tma_binder(dt, m, n, k, 1, (k, 1), (n, 1), False, 0, 0)
        cfg = next(c for c in cands if not isinstance(c[0], str))  # the plain tile kernel
        fn = mm._mm_tma_kernel
    la = _launch.launcher(fn, num_warps=cfg[-1], num_stages=cfg[-2])
    monkeypatch.setattr(la, "fn", _Compiler())
    monkeypatch.setattr(la, "cache", {})
    go = bind(cfg)
    for base in (0x100000, 0x200000):
        a, b, c = (_array((m, k), base + i * 0x40000, dt) for i in range(3))
        go(a, b, c, None)
    assert len(la.fn.compiles) == 1 and len(la.fn.direct) == 1
    (_, _, launched_with), = la.fn.direct
    if path == "pointer":
        assert launched_with[0].data_ptr() == 0x200000
    else:  # the plan's host descriptors (re-pointed per call: test_kernels_matmul_plans.py)
        assert launched_with[0].__class__.__name__ == "TensorDescriptor"
