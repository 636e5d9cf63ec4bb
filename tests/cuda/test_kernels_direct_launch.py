"""``_launch.direct_entry``: how a compiled kernel is launched again, without a GPU.

On the Triton versions whose launcher wrapper was read (``C_LAUNCH_VERSIONS``), a kernel
without scratch memory is launched through Triton's C launcher directly. The launcher here
is Triton's own ``CudaLauncher`` class with a recorder in place of its compiled C function,
so the test checks that the direct call hands the C launcher exactly what the wrapper would.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

triton = pytest.importorskip("triton")
_launch = pytest.importorskip("genesis_cuda.kernels._launch")

try:
    from triton.backends.nvidia.driver import CudaLauncher
except ImportError:  # a Triton without the NVIDIA backend
    CudaLauncher = None

GRID = (3, 2, 1)
STREAM = 77
FUNCTION = 1234
META = (4, 1, 0)  # num_warps, num_ctas, shared memory
ARGS = (0x1000, 0x2000, 96, 1.5, 128)  # pointers, an int, a float, a constexpr


class _Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


def _launcher(scratch: int = 0, cls=CudaLauncher):
    """A ``cls`` instance (not built from a kernel) whose C launch records its arguments."""
    run = object.__new__(cls)
    run.launch = _Recorder()
    run.num_ctas = 1
    run.global_scratch_size = scratch
    run.global_scratch_align = 128
    run.profile_scratch_size = 0
    run.profile_scratch_align = 1
    run.launch_cooperative_grid = False
    run.launch_pdl = True
    return run


def _compiled(run):
    return SimpleNamespace(run=run, function=FUNCTION, packed_metadata=META)


@pytest.mark.skipif(CudaLauncher is None or _launch._TRITON_VERSION not in
                    _launch.C_LAUNCH_VERSIONS,
                    reason="this Triton's launcher wrapper was not read: direct_entry keeps it")
def test_direct_call_hands_the_c_launcher_what_the_wrapper_would():
    run = _launcher()
    CudaLauncher.__call__(run, *GRID, STREAM, FUNCTION, META, None, None, None, *ARGS)
    through_wrapper = run.launch.calls.pop()
    launch, head = _launch.direct_entry(_compiled(run))
    assert launch is run.launch  # the C function itself, not the Python wrapper
    launch(*GRID, STREAM, *head, *ARGS)
    assert run.launch.calls == [through_wrapper]


class _OtherLauncher:
    """A launcher of another kind (another backend, or a stand-in)."""

    def __call__(self, *args):
        self.seen = args


@pytest.mark.parametrize("kind", ["scratch", "other_class"])
def test_the_wrapper_is_kept_where_it_does_more(kind):
    """A kernel with global scratch memory needs the wrapper to allocate it; a launcher
    that is not Triton's ``CudaLauncher`` is only ever called as a whole."""
    if kind == "scratch":
        if CudaLauncher is None:
            pytest.skip("no NVIDIA backend in this Triton")
        run = _launcher(scratch=64)
    else:
        run = _OtherLauncher()
    launch, head = _launch.direct_entry(_compiled(run))
    assert launch is run
    assert head == (FUNCTION, META, None, None, None)  # as the wrapper's call takes them
