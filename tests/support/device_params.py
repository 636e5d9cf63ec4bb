"""The ``device`` fixture of the device-parametrised suites (``tests/nn``, ``tests/optim``,
``tests/amp``), and the helpers that move values between genesis on that device and the
torch reference.

Each of those folders' ``conftest.py`` imports ``device`` from here (one definition). A test
that takes ``device`` runs on ``"cpu"`` and on ``"cuda:0"``; the CUDA parameter carries the
``cuda`` marker, so ``tests/conftest.py`` skips it without a GPU.

The torch reference runs on the same device when torch has CUDA (``torch_device``), else on
the CPU; values are always compared on the CPU (``to_torch`` and ``cpu``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import genesis

DEVICES = ["cpu", pytest.param("cuda:0", marks=pytest.mark.cuda)]


@pytest.fixture(params=DEVICES)
def device(request):
    """'cpu' always; 'cuda:0' too (marked ``cuda``: skipped without a GPU).

    For 'cuda:0' torch's reference runs without TF32: torch's cuDNN convolutions use TF32
    by default (``torch.backends.cudnn.allow_tf32``), which would make the float32
    reference itself ~1e-3 off; matmuls already default to full float32. Restored after.
    """
    if not request.param.startswith("cuda"):
        yield request.param
        return
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield request.param
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def torch_device(device: str) -> str:
    """Where the torch reference runs: the same device when torch has it, else the CPU."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return device
    return "cpu"


def to_genesis(t, device: str = "cpu", requires_grad: bool = False):
    """A genesis tensor on ``device`` with exactly ``t``'s values and dtype (``t``: a torch
    tensor on any device, or a numpy array)."""
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu().contiguous()
        if t.dtype is torch.bfloat16:
            g = genesis.tensor(t.float().numpy()).to(genesis.bfloat16)
        else:
            g = genesis.tensor(t.numpy().copy())
    else:
        g = genesis.tensor(np.array(t, copy=True))
    g = g.to(device)
    return g.requires_grad_(True) if requires_grad else g


def to_torch(x) -> torch.Tensor:
    """A CPU torch tensor with exactly genesis tensor ``x``'s values, shape and dtype."""
    x = x.detach().cpu()
    if x.dtype is genesis.bfloat16:
        return torch.from_numpy(np.array(x.to(genesis.float32).numpy())).to(torch.bfloat16)
    return torch.from_numpy(np.array(x.numpy(), copy=True))


def cpu(t: torch.Tensor) -> torch.Tensor:
    """A torch reference value, detached and on the CPU (for ``assert_close``)."""
    return t.detach().cpu()
