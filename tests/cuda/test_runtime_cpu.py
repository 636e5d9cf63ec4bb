"""The CUDA plugin's host side without a GPU: it loads, reports availability without
raising, and importing it initialises nothing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest


def test_backend_constructs_and_reports_without_raising():
    from genesis_cuda.backend import CUDABackend

    backend = CUDABackend()
    assert isinstance(backend.is_available(), bool)
    assert isinstance(backend.device_count(), int) and backend.device_count() >= 0
    from genesis_cuda import api

    assert backend.public_api() is api
    if not backend.is_available():
        assert api.memory_allocated() == 0 and api.memory_stats() == {}
        assert "not used by genesis yet" in api.memory_summary()


def test_importing_the_plugin_initialises_nothing():
    code = textwrap.dedent("""
        import sys
        import genesis
        assert "genesis_cuda" not in sys.modules
        import genesis_cuda.backend, genesis_cuda.api
        from genesis_cuda import device, driver, triton_hooks
        assert "triton" not in sys.modules, "Triton imported before any CUDA use"
        assert driver._cu is None, "the driver was initialised at import"
        assert not device.is_initialized()
        print("IMPORT-OK")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert "IMPORT-OK" in out.stdout, out.stdout + out.stderr


def test_generator_state_roundtrip():
    from genesis_cuda.generator import PhiloxGenerator

    gen = PhiloxGenerator(0, seed=2**64 + 5)
    assert gen.seed == 5
    assert gen.next_offset(10) == 0 and gen.next_offset(3) == 10
    state = gen.get_state()
    assert state.dtype == np.uint8 and state.shape == (16,)
    gen.manual_seed(7)
    assert (gen.seed, gen.offset) == (7, 0)
    gen.set_state(state)
    assert (gen.seed, gen.offset) == (5, 13)
    with pytest.raises(ValueError, match="16 uint8"):
        gen.set_state(np.zeros(3, np.uint8))


def test_array_geometry_helpers():
    from genesis import dtypes as D
    from genesis_cuda.array import CudaArray, contiguous_strides, is_contiguous, numel

    class FakeStorage:
        ptr, size, device = 4096, 4096, 0

    a = CudaArray((2, 3, 4), contiguous_strides((2, 3, 4)), 0, D.float32, FakeStorage(), 0)
    assert a.strides == (12, 4, 1) and numel(a) == 24 and is_contiguous(a)
    t = CudaArray((4, 3), (1, 4), 2, D.float32, FakeStorage(), 0)
    assert not is_contiguous(t) and t.data_ptr() == 4096 + 8
    assert is_contiguous(CudaArray((1, 5), (99, 1), 0, D.float32, FakeStorage(), 0))
    assert is_contiguous(CudaArray((0, 5), (7, 3), 0, D.float32, FakeStorage(), 0))
    assert str(a.dtype).endswith("float32")
