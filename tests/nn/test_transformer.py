"""nn.Transformer (encoder + decoder) against torch with torch's weights copied in: outputs
and the gradients of the inputs and every parameter, in eval mode and in train mode with
dropout 0; the causal-mask helper; the accepted-but-inert ``enable_nested_tensor``."""

from __future__ import annotations

import pytest
import torch
from device_params import cpu, to_genesis, to_torch, torch_device
from torch.testing import assert_close

import genesis
import genesis.nn as nn

# torch's note that its nested-tensor fast path is off for these configurations
pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")


def _pair(device, **kw):
    torch.manual_seed(0)
    t = torch.nn.Transformer(**kw).to(torch_device(device))
    g = nn.Transformer(**kw, device=device)
    assert [n for n, _ in g.named_parameters()] == [n for n, _ in t.named_parameters()]
    g.load_state_dict({k: to_genesis(v, device) for k, v in t.state_dict().items()})
    return t, g


def _leaf(shape, device):
    t = torch.randn(*shape, device=torch_device(device), requires_grad=True)
    return t, to_genesis(t, device, requires_grad=True)


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("batch_first,norm_first", [(False, False), (True, True),
                                                    (True, False)])
def test_transformer_matches_torch(train, batch_first, norm_first, device):
    kw = {"d_model": 16, "nhead": 4, "num_encoder_layers": 2, "num_decoder_layers": 2,
          "dim_feedforward": 24, "dropout": 0.0 if train else 0.3, "activation": "gelu",
          "batch_first": batch_first, "norm_first": norm_first}
    t, g = _pair(device, **kw)
    t.train(train)
    g.train(train)
    src_shape, tgt_shape = ((2, 6, 16), (2, 5, 16)) if batch_first else ((6, 2, 16),
                                                                          (5, 2, 16))
    t_src, g_src = _leaf(src_shape, device)
    t_tgt, g_tgt = _leaf(tgt_shape, device)
    t_mask = torch.nn.Transformer.generate_square_subsequent_mask(5, device=t_src.device)
    g_mask = nn.Transformer.generate_square_subsequent_mask(5, device=device)
    assert_close(to_torch(g_mask), cpu(t_mask))
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    t_pad, g_pad = pad.to(t_src.device), to_genesis(pad, device)
    t_out = t(t_src, t_tgt, tgt_mask=t_mask, src_key_padding_mask=t_pad,
              memory_key_padding_mask=t_pad)
    g_out = g(g_src, g_tgt, tgt_mask=g_mask, src_key_padding_mask=g_pad,
              memory_key_padding_mask=g_pad)
    assert_close(to_torch(g_out), cpu(t_out))
    cot = torch.randn_like(t_out)
    t_out.backward(cot)
    g_out.backward(to_genesis(cot, device))
    for name, p in t.named_parameters():
        assert_close(to_torch(g.get_parameter(name).grad), cpu(p.grad), msg=name)
    assert_close(to_torch(g_src.grad), cpu(t_src.grad))
    assert_close(to_torch(g_tgt.grad), cpu(t_tgt.grad))


def test_transformer_defaults_and_unbatched():
    t, g = _pair("cpu", d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                 dim_feedforward=16)
    assert (g.d_model, g.nhead, g.batch_first) == (8, 2, False)
    assert isinstance(g.encoder.norm, nn.LayerNorm) and isinstance(g.decoder.norm,
                                                                    nn.LayerNorm)
    t.eval()
    g.eval()
    src, tgt = torch.randn(7, 8), torch.randn(3, 8)
    with torch.no_grad():
        want = t(src, tgt)
    assert_close(to_torch(g(to_genesis(src), to_genesis(tgt))), want)


def test_default_init_is_xavier_for_matrices():
    genesis.manual_seed(0)
    g = nn.Transformer(d_model=32, nhead=4, num_encoder_layers=1, num_decoder_layers=1,
                       dim_feedforward=64)
    w = g.encoder.layers[0].linear1.weight                         # (64, 32)
    bound = (6 / (32 + 64)) ** 0.5
    assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.8 * bound


def test_custom_encoder_and_decoder_are_used():
    class Enc(nn.Module):
        def forward(self, src, **kwargs):
            return src * 2

    class Dec(nn.Module):
        def forward(self, tgt, memory, **kwargs):
            return tgt + memory.mean()

    enc, dec = Enc(), Dec()
    g = nn.Transformer(d_model=4, nhead=2, custom_encoder=enc, custom_decoder=dec)
    assert g.encoder is enc and g.decoder is dec
    assert sum(p.numel() for p in g.parameters()) == 0
    out = g(genesis.ones(3, 1, 4), genesis.zeros(2, 1, 4))
    assert out.tolist() == [[[2.0] * 4]] * 2


def test_generate_square_subsequent_mask():
    m = nn.Transformer.generate_square_subsequent_mask(4, dtype=genesis.float64)
    assert m.dtype is genesis.float64
    assert_close(to_torch(m), torch.nn.Transformer.generate_square_subsequent_mask(
        4, dtype=torch.float64))


def test_encoder_accepts_enable_nested_tensor_with_no_effect():
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    x = genesis.randn(2, 5, 8)
    genesis.manual_seed(1)
    a = nn.TransformerEncoder(layer, 2, enable_nested_tensor=True, mask_check=False)
    genesis.manual_seed(1)
    b = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    assert a.enable_nested_tensor and not b.enable_nested_tensor and not a.mask_check
    assert genesis.equal(a(x), b(x))


def test_transformer_bad_shapes():
    g = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                       dim_feedforward=16)
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        g(genesis.randn(5, 2, 8), genesis.randn(4, 3, 8))
    with pytest.raises(RuntimeError, match="must be equal to d_model"):
        g(genesis.randn(5, 2, 8), genesis.randn(4, 2, 6))
