"""erfinv: values vs torch on every floating dtype (edges included), gradient, in place."""

import pytest
import torch

import genesis


@pytest.mark.parametrize("name", ["float32", "float64", "bfloat16", "float16"])
def test_erfinv_matches_torch(name, device):
    tdt = getattr(torch, name)
    y = torch.linspace(-0.999999, 0.999999, 2001, dtype=torch.float64).to(tdt)
    y = torch.cat([y, torch.tensor([-1.0, 1.0, 0.0, 2.0, -3.0, float("nan")], dtype=tdt)])
    g = genesis.tensor(y.double().numpy(), device=device).to(getattr(genesis, name))
    out = g.erfinv().to(genesis.float64).cpu().numpy()
    torch.testing.assert_close(torch.from_numpy(out).to(tdt), torch.erfinv(y), equal_nan=True)


def test_erfinv_gradcheck():
    x = genesis.tensor([0.3, -0.5, 0.9, -0.99], dtype=genesis.float64, requires_grad=True)
    assert genesis.autograd.gradcheck(genesis.erfinv, (x,))


def test_erfinv_in_place_and_integer_input():
    t = genesis.tensor([0.5, -0.25])
    assert t.erfinv_() is t
    torch.testing.assert_close(torch.from_numpy(t.numpy()),
                               torch.erfinv(torch.tensor([0.5, -0.25])))
    assert genesis.erfinv(genesis.tensor([0, 1])).dtype is genesis.float32
