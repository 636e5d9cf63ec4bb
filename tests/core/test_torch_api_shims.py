"""torch's configuration and legacy API that ported programs call first (issue 31):
``genesis.backends.cuda/cudnn`` flags, the float32 matmul precision, ``genesis.accelerator``,
``set_default_device``, ``genesis.cuda.is_bf16_supported``, the legacy tensor types,
``Tensor.type()`` and ``pin_memory``. Checked against torch where torch gives a value."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import genesis
from genesis.backends import registry


@pytest.fixture
def torch_precision():
    """torch's float32 matmul precision, restored after the test."""
    saved = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(saved)


@pytest.fixture(autouse=True)
def _restore_flags():
    cudnn = genesis.backends.cudnn
    saved = (genesis.get_float32_matmul_precision(), cudnn.enabled, cudnn.benchmark,
             cudnn.deterministic, cudnn.allow_tf32, genesis.get_default_device())
    yield
    genesis.set_float32_matmul_precision(saved[0])
    cudnn.enabled, cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32 = saved[1:5]
    genesis.set_default_device(None)


# ------------------------------------------------------------ backends flags
def test_cudnn_flag_defaults_match_torch():
    import genesis.backends.cudnn as cudnn  # the torch spelling imports it as a module

    for name in ("enabled", "benchmark", "deterministic", "allow_tf32"):
        assert getattr(cudnn, name) == getattr(torch.backends.cudnn, name), name
    assert cudnn.is_available() is False and cudnn.version() is None


def test_cudnn_flags_are_settable_checked_and_scoped():
    cudnn = genesis.backends.cudnn
    cudnn.benchmark = True
    cudnn.deterministic = True
    assert genesis.backends.cudnn.benchmark is True and cudnn.deterministic is True
    with pytest.raises(TypeError, match="cudnn.benchmark must be a bool, got str"):
        cudnn.benchmark = "yes"
    with cudnn.flags(enabled=True, benchmark=False, deterministic=False):
        assert cudnn.benchmark is False and cudnn.deterministic is False
    assert cudnn.benchmark is True and cudnn.deterministic is True


@pytest.mark.parametrize("precision", ["highest", "high", "medium"])
def test_float32_matmul_precision_and_allow_tf32_agree_with_torch(precision, torch_precision):
    assert genesis.get_float32_matmul_precision() == torch.get_float32_matmul_precision()
    genesis.set_float32_matmul_precision(precision)
    torch.set_float32_matmul_precision(precision)
    assert genesis.get_float32_matmul_precision() == precision
    assert genesis.backends.cuda.matmul.allow_tf32 == torch.backends.cuda.matmul.allow_tf32


def test_allow_tf32_sets_the_precision():
    matmul = genesis.backends.cuda.matmul
    matmul.allow_tf32 = True
    assert genesis.get_float32_matmul_precision() == "high"
    matmul.allow_tf32 = False
    assert genesis.get_float32_matmul_precision() == "highest"
    assert matmul.allow_fp16_reduced_precision_reduction is True
    matmul.allow_bf16_reduced_precision_reduction = False
    assert matmul.allow_bf16_reduced_precision_reduction is False
    matmul.allow_bf16_reduced_precision_reduction = True


def test_bad_precision_and_flag_values_are_refused():
    with pytest.raises(ValueError, match="'low' is not one of 'highest', 'high', 'medium'"):
        genesis.set_float32_matmul_precision("low")
    with pytest.raises(TypeError, match="matmul.allow_tf32 must be a bool, got int"):
        genesis.backends.cuda.matmul.allow_tf32 = 1
    with pytest.raises(AttributeError):
        genesis.backends.cuda.matmul.allow_fp8 = True


def test_float32_matmuls_stay_full_precision_whatever_is_set():
    a, b = genesis.randn(64, 64, dtype=genesis.float64), genesis.randn(64, 64,
                                                                        dtype=genesis.float64)
    genesis.set_float32_matmul_precision("medium")
    got = (a.float() @ b.float()).double()
    torch.testing.assert_close(torch.from_numpy(got.numpy()),
                               torch.from_numpy((a @ b).numpy()), rtol=1e-5, atol=1e-4)


def test_cuda_backend_is_built_says_whether_the_plugin_is_installed():
    assert genesis.backends.cuda.is_built() == ("cuda" in registry.installed())


# ------------------------------------------------------------ accelerator
def _only(monkeypatch, *types):
    monkeypatch.setattr(registry, "installed", lambda: ["cpu", *types])


def test_no_accelerator_answers_as_torch_without_one(monkeypatch):
    _only(monkeypatch)
    acc = genesis.accelerator
    assert acc.current_accelerator() is None and acc.is_available() is False
    assert acc.device_count() == 0
    with pytest.raises(RuntimeError, match="no accelerator device is available"):
        acc.synchronize()
    with pytest.raises(RuntimeError, match="no accelerator device is available"):
        acc.current_device_index()


@pytest.mark.parametrize("device", ["toy:0"], indirect=True)  # registers the toy backend
def test_an_installed_plugin_is_the_accelerator(monkeypatch, device):
    _only(monkeypatch, "toy")
    acc = genesis.accelerator
    assert acc.current_accelerator() == genesis.device("toy")
    assert acc.current_accelerator().index is None
    assert acc.current_accelerator(check_available=True) == genesis.device("toy")
    assert acc.is_available() and acc.device_count() == 1 and acc.current_device_index() == 0
    acc.synchronize()
    acc.synchronize("toy:0")
    acc.synchronize(0)
    with pytest.raises(RuntimeError, match="'cpu' is not a device of the accelerator"):
        acc.synchronize("cpu")


def test_cuda_is_the_accelerator_when_installed():
    if "cuda" not in registry.installed():
        pytest.skip("genesis-cuda is not installed")
    acc = genesis.accelerator
    assert acc.current_accelerator() == genesis.device("cuda")
    assert acc.is_available() == genesis.cuda.is_available()
    assert acc.device_count() == genesis.cuda.device_count()


@pytest.mark.cuda
def test_accelerator_on_a_gpu():
    acc = genesis.accelerator
    assert acc.current_accelerator(check_available=True) == genesis.device("cuda")
    assert acc.current_device_index() == genesis.cuda.current_device()
    x = genesis.ones(1000, device=acc.current_accelerator()) * 2
    acc.synchronize()
    assert x.sum().item() == 2000.0


def test_is_bf16_supported_is_false_without_a_gpu():
    if genesis.cuda.is_available():
        major = genesis.cuda.get_device_capability()[0]
        assert genesis.cuda.is_bf16_supported() == (major >= 8)
    else:
        assert genesis.cuda.is_bf16_supported() is False
        assert genesis.cuda.is_bf16_supported(including_emulation=False) is False


@pytest.mark.cuda
def test_is_bf16_supported_matches_torch_on_a_gpu():
    assert genesis.cuda.is_bf16_supported() == torch.cuda.is_bf16_supported()


# ------------------------------------------------------------ default device
def test_default_device_starts_as_the_cpu():
    assert genesis.get_default_device() == genesis.device("cpu")
    assert genesis.get_default_device() == torch.get_default_device().type


def _factories(dev):
    return {
        "zeros": genesis.zeros(2), "ones": genesis.ones(2, 3), "empty": genesis.empty(2),
        "full": genesis.full((2,), 1.5), "tensor": genesis.tensor([1.0, 2.0]),
        "arange": genesis.arange(4), "linspace": genesis.linspace(0, 1, 3),
        "eye": genesis.eye(2), "rand": genesis.rand(2), "randn": genesis.randn(2),
        "randint": genesis.randint(0, 5, (3,)),
        "randperm": genesis.randperm(4, generator=genesis.Generator(dev)),
        "as_tensor": genesis.as_tensor(np.zeros(2)),
    }


@pytest.mark.parametrize("device", ["toy:0", pytest.param("cuda:0", marks=pytest.mark.cuda)],
                         indirect=True)
def test_factories_honour_the_default_device(device):
    device_type = device.partition(":")[0]
    genesis.set_default_device(device_type)  # no index: the current device of the type
    dev = genesis.get_default_device()
    assert dev.type == device_type and dev.index == 0
    for name, t in _factories(dev).items():
        assert t.device == dev, name
    cpu = genesis.zeros(2, device="cpu")
    assert cpu.device == genesis.device("cpu")
    assert genesis.zeros_like(cpu).device == cpu.device  # *_like keep their input's device
    assert genesis.from_numpy(np.zeros(2)).device == cpu.device
    assert genesis.as_tensor(cpu).device == dev  # as torch: moved to the default device
    seen = []
    thread = threading.Thread(target=lambda: seen.append(genesis.zeros(1).device))
    thread.start()
    thread.join()
    assert seen == [genesis.device("cpu")]  # per thread, as torch's
    genesis.set_default_device(None)
    assert genesis.zeros(2).device == genesis.device("cpu")


def test_default_device_is_checked():
    with pytest.raises(ValueError, match="invalid device string"):
        genesis.set_default_device("cuda:x")
    with pytest.raises(registry.BackendUnavailableError, match="'gpu' is not a valid device"):
        genesis.set_default_device("gpu")
    assert genesis.get_default_device() == genesis.device("cpu")


# ------------------------------------------------------------ legacy tensor types
_LEGACY = ["FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor",
           "IntTensor", "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor"]


@pytest.mark.parametrize("name", _LEGACY)
def test_legacy_constructors_match_torch(name):
    g, t = getattr(genesis, name), getattr(torch, name)
    data = [[1, 0], [3, 4]]
    got, want = g(data), t(data)
    assert got.dtype.name == str(want.dtype).removeprefix("torch.")
    torch.testing.assert_close(torch.from_numpy(np.asarray(got.float().numpy())),
                               want.float())
    assert g(2, 3).shape == t(2, 3).shape and g(2, 3).dtype is got.dtype
    assert g().shape == t().shape
    assert g(genesis.Size([4])).shape == t(torch.Size([4])).shape
    assert isinstance(got, g) and not isinstance(got.to(genesis.float64 if name != "DoubleTensor"
                                                        else genesis.float32), g)
    assert got.type() == f"genesis.{name}" and want.type() == f"torch.{name}"


def test_legacy_constructor_of_a_tensor_shares_its_memory():
    a = genesis.zeros(3)
    b = genesis.FloatTensor(a)
    b[0] = 5.0
    assert a[0].item() == 5.0
    with pytest.raises(TypeError, match="needs a float32 CPU tensor, got int64"):
        genesis.FloatTensor(genesis.zeros(2, dtype=genesis.int64))


def test_legacy_constructors_refuse_bad_arguments():
    with pytest.raises(RuntimeError, match="negative dimension"):
        genesis.FloatTensor(-1)
    with pytest.raises(TypeError, match=r"takes sizes \(ints\).*got \(str\)"):
        genesis.FloatTensor("a")
    with pytest.raises(TypeError, match=r"got \(float\)"):
        genesis.FloatTensor(2.5)
    with pytest.raises(RuntimeError, match="makes CPU tensors, got device='cuda'"):
        genesis.FloatTensor(2, device="cuda")


def test_tensor_type_converts_as_torch():
    x, tx = genesis.tensor([1.5, -2.0]), torch.tensor([1.5, -2.0])
    for arg, targ in [(genesis.int64, torch.int64), (genesis.LongTensor, torch.LongTensor),
                      ("genesis.LongTensor", "torch.LongTensor"),
                      ("genesis.HalfTensor", "torch.HalfTensor")]:
        got, want = x.type(arg), tx.type(targ)
        assert got.tolist() == want.tolist() and got.type() == want.type().replace("torch",
                                                                                  "genesis")
    assert x.type(genesis.float32) is x and x.type("genesis.FloatTensor") is x
    with pytest.raises(ValueError, match="invalid type: 'float'"):
        x.type("float")
    with pytest.raises(TypeError, match="expected a dtype, a legacy type or a type name"):
        x.type(3)


@pytest.mark.cuda
def test_tensor_type_on_a_gpu_names_cuda():
    x = genesis.zeros(2, device="cuda")
    assert x.type() == "genesis.cuda.FloatTensor"
    assert x.type(genesis.LongTensor).device == genesis.device("cpu")
    y = genesis.zeros(2).type("genesis.cuda.HalfTensor")
    assert y.device.type == "cuda" and y.dtype is genesis.float16


# ------------------------------------------------------------ pinned memory
def test_pin_memory_is_a_copy_in_the_graph_and_never_pinned():
    x = genesis.tensor([1.0, 2.0], requires_grad=True)
    p = x.pin_memory()
    assert p is not x and p.tolist() == x.tolist()
    assert p.is_pinned() is False and x.is_pinned() is torch.zeros(1).is_pinned()
    (p * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


@pytest.mark.parametrize("device", ["toy:0"], indirect=True)
def test_pin_memory_refuses_a_device_tensor(device):
    with pytest.raises(RuntimeError, match="cannot pin a tensor on toy:0"):
        genesis.zeros(2, device=device).pin_memory()
