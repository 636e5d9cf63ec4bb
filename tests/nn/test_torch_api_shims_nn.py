"""torch's spellings that live in genesis-nn (issue 31): ``genesis.cuda.amp.autocast`` and
``GradScaler`` (torch's deprecated CUDA-only aliases) and ``genesis.nn.parallel``'s
``DistributedDataParallel`` (looked up in genesis-distributed only when asked for)."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch

import genesis
import genesis.nn as nn


# ------------------------------------------------------------ genesis.cuda.amp
def test_cuda_amp_autocast_is_autocast_cuda_and_warns_as_torch():
    from genesis.cuda.amp import autocast

    with pytest.warns(FutureWarning, match=r"use genesis.autocast\('cuda', args...\)"):
        region = autocast(dtype=genesis.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's deprecation, and "CUDA is not available"
        want = torch.cuda.amp.autocast()
    assert isinstance(region, genesis.autocast) and region.device_type == want.device == "cuda"
    with pytest.warns(FutureWarning):
        assert genesis.cuda.amp.autocast().fast_dtype is genesis.float16  # torch's default
    assert str(want.fast_dtype) == "torch.float16"
    with region:
        assert genesis.is_autocast_enabled("cuda")
        assert genesis.get_autocast_dtype("cuda") is genesis.bfloat16
        assert not genesis.is_autocast_enabled("cpu")
    assert not genesis.is_autocast_enabled("cuda")


def test_cuda_amp_autocast_decorates_a_function():
    with pytest.warns(FutureWarning):
        region = genesis.cuda.amp.autocast()

    @region
    def inside():
        return genesis.is_autocast_enabled("cuda")

    assert inside() is True and not genesis.is_autocast_enabled("cuda")


def test_cuda_amp_grad_scaler_is_amp_grad_scaler_for_cuda():
    with pytest.warns(FutureWarning, match=r"use genesis.amp.GradScaler\('cuda', args...\)"):
        scaler = genesis.cuda.amp.GradScaler(init_scale=1024.0, growth_interval=7,
                                             enabled=genesis.cuda.is_available())
    assert isinstance(scaler, genesis.amp.GradScaler)
    assert scaler.is_enabled() == genesis.cuda.is_available()
    assert scaler.get_growth_interval() == 7


@pytest.mark.cuda
def test_cuda_amp_grad_scaler_scales_on_a_gpu():
    with pytest.warns(FutureWarning):
        scaler = genesis.cuda.amp.GradScaler(init_scale=1024.0)
    loss = genesis.tensor(2.0, device="cuda")
    assert scaler.scale(loss).item() == 2048.0


def test_cuda_amp_without_genesis_nn_names_the_distribution(monkeypatch):
    monkeypatch.setitem(sys.modules, "genesis.cuda.amp", None)  # as if genesis-nn were absent
    monkeypatch.delattr(genesis.cuda, "amp", raising=False)
    with pytest.raises(AttributeError, match="genesis.cuda.amp is provided by the genesis-nn "
                                             "distribution.*pip install genesis-nn"):
        genesis.cuda.amp  # noqa: B018


# ------------------------------------------------------------ genesis.nn.parallel
def test_ddp_from_nn_parallel_is_genesis_distributed_ddp():
    pytest.importorskip("genesis.distributed")
    import genesis.distributed as dist
    from genesis.nn.parallel import DistributedDataParallel

    assert DistributedDataParallel is dist.DistributedDataParallel
    assert nn.parallel.DistributedDataParallel is dist.DistributedDataParallel


def test_genesis_nn_does_not_import_genesis_distributed():
    """genesis.nn.parallel is genesis-distributed's: genesis-nn never imports it."""
    code = ("import sys, genesis.nn, genesis.utils.data\n"
            "print('genesis.distributed' in sys.modules, 'genesis.nn.parallel' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
