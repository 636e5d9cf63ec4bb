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
    from genesis_cuda.array import contiguous_strides, is_contiguous, new_array, numel

    class FakeStorage:
        ptr, size, device = 4096, 4096, 0

    a = new_array((2, 3, 4), contiguous_strides((2, 3, 4)), 0, D.float32, FakeStorage(), 0)
    assert a.strides == (12, 4, 1) and numel(a) == 24 and is_contiguous(a)
    t = new_array((4, 3), (1, 4), 2, D.float32, FakeStorage(), 0)
    assert not is_contiguous(t) and t.data_ptr() == 4096 + 8
    assert is_contiguous(new_array((1, 5), (99, 1), 0, D.float32, FakeStorage(), 0))
    assert is_contiguous(new_array((0, 5), (7, 3), 0, D.float32, FakeStorage(), 0))
    assert str(a.dtype).endswith("float32")


def test_new_array_sets_every_field():
    """``new_array`` makes every CudaArray (the class has no ``__init__``: a Python one
    would cost a second interpreter frame per op's output): each field is the one given, a
    weak reference to the array is allowed, and calling the class with fields is refused."""
    import weakref

    import genesis
    from genesis_cuda.array import CudaArray, new_array

    class FakeStorage:
        ptr, size, device = 4096, 4096, 1

    storage = FakeStorage()
    a = new_array((2, 3), (1, 2), 5, genesis.bfloat16, storage, 1)
    assert (a.shape, a.strides, a.offset, a.dtype, a.storage, a.device) == (
        (2, 3), (1, 2), 5, genesis.bfloat16, storage, 1)
    assert weakref.ref(a)() is a and a.data_ptr() == 4096 + 10
    with pytest.raises(TypeError):
        CudaArray((2, 3), (1, 2), 5, genesis.bfloat16, storage, 1)


def test_views_of_cuda_tensors_keep_the_offset_without_a_gpu():
    """``x.view``, ``x[a:b]`` and ``.t()`` of a CUDA tensor only describe its storage anew
    (no GPU call): the backend's own ``view`` keeps the array's offset, dtype and storage as
    the contract's default (``as_strided`` at ``storage_offset_of``) does."""
    import genesis
    from genesis.tensor import Tensor
    from genesis_cuda.array import new_array
    from genesis_cuda.backend import CUDABackend

    class FakeStorage:  # (views never read or write it)
        ptr, size, device = 4096, 4096, 0

    backend = CUDABackend()
    assert "view" in CUDABackend.__dict__  # its own: one frame, not the default's three
    a = new_array((2, 6), (6, 1), 3, genesis.float32, FakeStorage(), 0)
    v = backend.view(a, (3, 4), (4, 1))
    default = super(CUDABackend, backend).view(a, (3, 4), (4, 1))
    for got in (v, default):
        assert (got.shape, got.strides, got.offset) == ((3, 4), (4, 1), 3)
        assert got.storage is a.storage and got.dtype is a.dtype and got.device == 0
    x = Tensor._wrap(a, genesis.device("cuda:0"))
    assert x.view(12).stride() == (1,) and x.view(12).storage_offset() == 3
    assert x.view(3, 4)._data.storage is a.storage and x.view(3, 4)._base is x
    assert x[1:2].storage_offset() == 9 and x[1:2].shape == (1, 6)
    assert x.t().stride() == (1, 6) and x.t().storage_offset() == 3
