"""scaled_dot_product_attention, MultiheadAttention and the transformer layers against torch
(torch's weights copied in): outputs, attention weights and gradients."""

import numpy as np
import pytest
import torch
import torch.nn as tnn
import torch.nn.functional as TF
from device_params import cpu, to_genesis, to_torch, torch_device
from torch.testing import assert_close

import genesis
import genesis.nn as nn
import genesis.nn.functional as F
from genesis.backends.cpu import CPUBackend

RNG = np.random.default_rng(3)


def randn(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def copy_weights(g_mod, t_mod):
    g_mod.load_state_dict({k: to_genesis(v) for k, v in t_mod.state_dict().items()})


def to_device(g_mod, t_mod, device):
    """Both modules moved: genesis's to ``device``, torch's to ``torch_device(device)``."""
    return g_mod.to(device), t_mod.to(torch_device(device))


def run_both(g_fn, t_fn, arrays, consts=(), device="cpu"):
    """Call both functions on float inputs (requiring grad) plus constant extra arguments
    (numpy -> tensors without grad), genesis on ``device`` and torch on
    ``torch_device(device)``; backprop a random gradient of the first output; compare
    outputs and input gradients. Returns the genesis and torch outputs."""
    td = torch_device(device)
    g_in = [genesis.tensor(a, device=device, requires_grad=True) for a in arrays]
    t_in = [torch.tensor(a, device=td, requires_grad=True) for a in arrays]
    g_c = [genesis.tensor(c, device=device) if isinstance(c, np.ndarray) else c for c in consts]
    t_c = [torch.tensor(c, device=td) if isinstance(c, np.ndarray) else c for c in consts]
    g_out, t_out = g_fn(*g_in, *g_c), t_fn(*t_in, *t_c)
    g_main = g_out[0] if isinstance(g_out, tuple) else g_out
    t_main = t_out[0] if isinstance(t_out, tuple) else t_out
    assert g_main.device.type == genesis.device(device).type
    assert_close(to_torch(g_main), cpu(t_main))
    go = torch.randn_like(t_main)
    t_main.backward(go)
    g_main.backward(to_genesis(go, device))
    for g, t in zip(g_in, t_in):
        assert_close(to_torch(g.grad), cpu(t.grad))
    return g_out, t_out


# --------------------------------------------------------------- SDPA
@pytest.mark.parametrize("shape_q,shape_kv", [((2, 3, 5, 8), (2, 3, 7, 8)),
                                              ((4, 6, 8), (4, 6, 8)),
                                              ((2, 2, 3, 4, 8), (2, 2, 3, 6, 8))])
def test_sdpa_plain(shape_q, shape_kv, device):
    run_both(F.scaled_dot_product_attention, TF.scaled_dot_product_attention,
             [randn(*shape_q), randn(*shape_kv), randn(*shape_kv)], device=device)


@pytest.mark.parametrize("L,S", [(5, 5), (4, 7), (7, 4)])
def test_sdpa_causal(L, S, device):
    run_both(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
             lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True),
             [randn(2, 3, L, 8), randn(2, 3, S, 8), randn(2, 3, S, 8)], device=device)


def test_sdpa_scale_and_value_width(device):
    run_both(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3),
             lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, scale=0.3),
             [randn(2, 4, 8), randn(2, 6, 8), randn(2, 6, 5)], device=device)


def test_sdpa_bool_and_float_masks(device):
    q, k, v = randn(2, 3, 4, 8), randn(2, 3, 6, 8), randn(2, 3, 6, 8)
    bool_mask = RNG.random((2, 1, 4, 6)) > 0.3
    bool_mask[..., 0] = True  # every row attends somewhere
    run_both(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
             lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, attn_mask=m),
             [q, k, v], [bool_mask], device=device)
    float_mask = randn(4, 6)
    run_both(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
             lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, attn_mask=m),
             [q, k, v], [float_mask], device=device)


def test_sdpa_fully_masked_rows_give_zeros_and_finite_grads(device):
    q, k, v = randn(1, 2, 3, 4), randn(1, 2, 5, 4), randn(1, 2, 5, 4)
    mask = np.ones((3, 5), dtype=bool)
    mask[1] = False  # query 1 may attend nothing
    gq = genesis.tensor(q, device=device, requires_grad=True)
    out = F.scaled_dot_product_attention(gq, genesis.tensor(k, device=device),
                                         genesis.tensor(v, device=device),
                                         attn_mask=genesis.tensor(mask, device=device))
    assert not to_torch(out)[:, :, 1].any()
    ref = TF.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v),
                                          attn_mask=torch.tensor(mask))
    assert_close(to_torch(out), ref)
    out.sum().backward()
    assert torch.isfinite(to_torch(gq.grad)).all()


@pytest.mark.parametrize("hq,hk", [(8, 2), (6, 3), (4, 4)])
def test_sdpa_gqa(hq, hk, device):
    run_both(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True,
                                                            is_causal=True),
             lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, enable_gqa=True,
                                                             is_causal=True),
             [randn(2, hq, 5, 8), randn(2, hk, 5, 8), randn(2, hk, 5, 8)], device=device)


def test_sdpa_errors():
    q = genesis.zeros(1, 4, 3, 8)
    kv = genesis.zeros(1, 3, 3, 8)
    with pytest.raises(RuntimeError, match="multiple"):
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    with pytest.raises(RuntimeError, match="is_causal"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=genesis.zeros(3, 3), is_causal=True)
    with pytest.raises(RuntimeError, match="embedding size"):
        F.scaled_dot_product_attention(q, genesis.zeros(1, 4, 3, 5), q)


def test_sdpa_dropout_is_random_and_reproducible():
    q = genesis.tensor(randn(1, 1, 6, 4))
    base = F.scaled_dot_product_attention(q, q, q).numpy()
    genesis.manual_seed(5)
    a = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5).numpy()
    genesis.manual_seed(5)
    b = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, base)


# ----------------------------------------- the CPU backend's fused attention
def _sdpa_fused_and_composite(monkeypatch, dtype, q, k, v, **kw):
    """Output and q/k/v gradients of F.scaled_dot_product_attention on the CPU twice: through
    the backend's fused kernel (checked to be taken) and through the composite (the kernel
    declining), for the same inputs and output gradient."""
    calls = []
    fused = CPUBackend().kernel("scaled_dot_product_attention")

    def spy(*args):
        result = fused(*args)
        calls.append(result is not NotImplemented)
        return result

    g_out = genesis.tensor(randn(*q.shape[:-1], v.shape[-1])).to(dtype)
    results = []
    for kernel in (spy, lambda *args: NotImplemented):
        monkeypatch.setitem(CPUBackend._kernels, "scaled_dot_product_attention", kernel)
        ins = [genesis.tensor(a).to(dtype).requires_grad_() for a in (q, k, v)]
        out = F.scaled_dot_product_attention(*ins, **kw)
        out.backward(g_out)
        results.append([to_torch(t).float() for t in (out, *(t.grad for t in ins))])
    assert calls == [True], "the fused kernel was not taken"
    return results


@pytest.mark.parametrize("case", ["plain", "causal_short_q", "causal_long_q", "bool_mask",
                                  "float_mask", "gqa", "fully_masked_row"])
def test_cpu_fused_attention_matches_the_composite(case, monkeypatch):
    q, k, v = randn(2, 4, 5, 8), randn(2, 4, 7, 8), randn(2, 4, 7, 8)
    kw = {"scale": 0.3}
    if case == "causal_short_q":
        kw["is_causal"] = True
    elif case == "causal_long_q":  # top-left aligned: query i sees keys 0..i
        q, kw["is_causal"] = randn(2, 4, 9, 8), True
    elif case in ("bool_mask", "fully_masked_row"):
        mask = RNG.random((2, 1, 5, 7)) > 0.4
        mask[..., 0] = True
        if case == "fully_masked_row":
            mask[1, 0, 2] = False
        kw["attn_mask"] = genesis.tensor(mask)
    elif case == "float_mask":
        kw["attn_mask"] = genesis.tensor(randn(5, 7))
    elif case == "gqa":
        k, v, kw["enable_gqa"] = randn(2, 2, 7, 8), randn(2, 2, 7, 8), True
    fused, composite = _sdpa_fused_and_composite(monkeypatch, genesis.float32, q, k, v, **kw)
    for f, c in zip(fused, composite):
        assert torch.isfinite(f).all()
        assert_close(f, c, atol=1e-5, rtol=1e-4)
    if case == "fully_masked_row":
        assert not fused[0][1, :, 2].any() and not fused[1][1, :, 2].any()


def test_cpu_fused_attention_in_bfloat16(monkeypatch):
    q, k, v = randn(1, 2, 16, 8), randn(1, 2, 16, 8), randn(1, 2, 16, 8)
    fused, composite = _sdpa_fused_and_composite(monkeypatch, genesis.bfloat16, q, k, v,
                                                 is_causal=True)
    for f, c in zip(fused, composite):  # bf16 keeps 8 bits: both round differently
        assert_close(f, c, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("shape_q,shape_kv", [((2, 3, 0, 8), (2, 3, 4, 8)),
                                              ((0, 3, 5, 8), (0, 3, 4, 8)),
                                              ((2, 3, 5, 8), (2, 3, 0, 8)),
                                              ((2, 3, 5, 0), (2, 3, 4, 0))])
def test_sdpa_empty_operands_on_the_cpu(shape_q, shape_kv):
    # torch's CPU flash kernel divides by zero on an empty query: the backend declines it
    q = genesis.zeros(*shape_q, requires_grad=True)
    k = genesis.zeros(*shape_kv, requires_grad=True)
    out = F.scaled_dot_product_attention(q, k, k)
    out.sum().backward()
    tq = torch.zeros(*shape_q, requires_grad=True)
    tk = torch.zeros(*shape_kv, requires_grad=True)
    ref = TF.scaled_dot_product_attention(tq, tk, tk)
    ref.sum().backward()
    assert_close(to_torch(out), ref)
    assert_close(to_torch(q.grad), tq.grad)
    assert_close(to_torch(k.grad), tk.grad)


def test_cpu_fused_attention_declines_dropout_and_a_wider_value():
    q = torch.tensor(randn(1, 2, 3, 8))
    kernel = CPUBackend().kernel("scaled_dot_product_attention")
    assert kernel(q, q, q, None, 0.1, False, 0.5, None) is NotImplemented
    wide_v = torch.tensor(randn(1, 2, 3, 6))
    assert kernel(q, q, wide_v, None, 0.0, False, 0.5, None) is NotImplemented


# ------------------------------------------------------- MultiheadAttention
def make_mha(**kwargs):
    t = tnn.MultiheadAttention(**kwargs)
    g = nn.MultiheadAttention(**kwargs)
    with torch.no_grad():  # torch zero-inits the biases: make them count
        for name, p in t.named_parameters():
            if "bias" in name:
                p.normal_()
    copy_weights(g, t)
    return g, t


def test_mha_parameter_names_match_torch():
    g, t = make_mha(embed_dim=8, num_heads=2)
    assert [n for n, _ in g.named_parameters()] == [n for n, _ in t.named_parameters()]
    g2 = nn.MultiheadAttention(8, 2, kdim=5, vdim=3, add_bias_kv=True)
    t2 = tnn.MultiheadAttention(8, 2, kdim=5, vdim=3, add_bias_kv=True)
    assert sorted(n for n, _ in g2.named_parameters()) == \
        sorted(n for n, _ in t2.named_parameters())


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("average", [True, False])
def test_mha_self_attention_with_weights(batch_first, average, device):
    g, t = to_device(*make_mha(embed_dim=12, num_heads=3, batch_first=batch_first), device)
    x = randn(2, 5, 12) if batch_first else randn(5, 2, 12)
    (g_out, g_w), (t_out, t_w) = run_both(
        lambda q, k, v: g(q, k, v, average_attn_weights=average),
        lambda q, k, v: t(q, k, v, average_attn_weights=average), [x, x.copy(), x.copy()],
        device=device)
    assert_close(to_torch(g_w), cpu(t_w))
    for name, p in t.named_parameters():
        assert_close(to_torch(g.get_parameter(name).grad), cpu(p.grad), msg=name)


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")  # torch's
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_masks(need_weights, device):
    g, t = to_device(*make_mha(embed_dim=8, num_heads=2, batch_first=True), device)
    q, kv = randn(3, 4, 8), randn(3, 6, 8)
    kpm = np.zeros((3, 6), dtype=bool)
    kpm[0, 4:] = True
    kpm[2, 1] = True
    attn_bool = np.triu(np.ones((4, 6), dtype=bool), 3)
    attn_float = randn(3 * 2, 4, 6)
    for consts in ([kpm, attn_bool], [kpm, attn_float], [None, attn_bool], [kpm, None]):
        (g_out, g_w), (t_out, t_w) = run_both(
            lambda q, k, v, m, a: g(q, k, v, key_padding_mask=m, attn_mask=a,
                                    need_weights=need_weights),
            lambda q, k, v, m, a: t(q, k, v, key_padding_mask=m, attn_mask=a,
                                    need_weights=need_weights),
            [q, kv, kv.copy()], consts, device=device)
        if need_weights:
            assert_close(to_torch(g_w), cpu(t_w))
        else:
            assert g_w is None and t_w is None


def test_mha_causal_and_float_key_padding_mask(device):
    g, t = to_device(*make_mha(embed_dim=8, num_heads=4), device)
    x = randn(5, 2, 8)
    causal = np.triu(np.ones((5, 5), dtype=bool), 1)
    run_both(lambda q, k, v, m: g(q, k, v, attn_mask=m, is_causal=True, need_weights=False),
             lambda q, k, v, m: t(q, k, v, attn_mask=m, is_causal=True, need_weights=False),
             [x, x.copy(), x.copy()], [causal], device=device)
    kpm = np.zeros((2, 5), dtype=np.float32)
    kpm[1, 3] = -1e9
    run_both(lambda q, k, v, m: g(q, k, v, key_padding_mask=m),
             lambda q, k, v, m: t(q, k, v, key_padding_mask=m), [x, x.copy(), x.copy()], [kpm],
             device=device)


def test_mha_kdim_vdim_bias_kv_zero_attn_no_bias(device):
    g, t = to_device(*make_mha(embed_dim=8, num_heads=2, kdim=5, vdim=3, add_bias_kv=True,
                               add_zero_attn=True), device)
    kpm = np.zeros((2, 6), dtype=bool)
    kpm[0, 0] = True
    (_, g_w), (_, t_w) = run_both(lambda q, k, v, m: g(q, k, v, key_padding_mask=m),
                                  lambda q, k, v, m: t(q, k, v, key_padding_mask=m),
                                  [randn(4, 2, 8), randn(6, 2, 5), randn(6, 2, 3)], [kpm],
                                  device=device)
    assert_close(to_torch(g_w), cpu(t_w))
    g, t = to_device(*make_mha(embed_dim=8, num_heads=2, bias=False), device)
    run_both(g, t, [randn(4, 2, 8), randn(3, 2, 8), randn(3, 2, 8)], device=device)


def test_mha_unbatched(device):
    g, t = to_device(*make_mha(embed_dim=8, num_heads=2, batch_first=True), device)
    (_, g_w), (_, t_w) = run_both(g, t, [randn(4, 8), randn(6, 8), randn(6, 8)], device=device)
    assert_close(to_torch(g_w), cpu(t_w))


def test_mha_dropout_only_in_training():
    g = nn.MultiheadAttention(8, 2, dropout=0.5)
    x = genesis.tensor(randn(4, 1, 8))
    g.eval()
    a = g(x, x, x)[0].detach().numpy()
    b = g(x, x, x)[0].detach().numpy()
    np.testing.assert_array_equal(a, b)
    g.train()
    c = g(x, x, x)[0].detach().numpy()
    assert not np.allclose(a, c)


def test_mha_bad_shapes():
    with pytest.raises(AssertionError, match="divisible"):
        nn.MultiheadAttention(10, 3)
    g = nn.MultiheadAttention(8, 2)
    x = genesis.zeros(4, 2, 8)
    with pytest.raises(RuntimeError, match="2D attn_mask"):
        g(x, x, x, attn_mask=genesis.zeros(3, 3))


# -------------------------------------------------------- transformer layers
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_encoder_layer(norm_first, activation, batch_first, device):
    kw = {"d_model": 16, "nhead": 4, "dim_feedforward": 32, "dropout": 0.0,
          "activation": activation, "batch_first": batch_first, "norm_first": norm_first}
    t = tnn.TransformerEncoderLayer(**kw)
    g = nn.TransformerEncoderLayer(**kw)
    copy_weights(g, t)
    to_device(g, t, device)
    x = randn(2, 5, 16) if batch_first else randn(5, 2, 16)
    kpm = np.zeros((2, 5), dtype=bool)
    kpm[1, 3:] = True
    run_both(lambda x, m: g(x, src_key_padding_mask=m),
             lambda x, m: t(x, src_key_padding_mask=m), [x], [kpm], device=device)
    for name, p in t.named_parameters():
        assert_close(to_torch(g.get_parameter(name).grad), cpu(p.grad), msg=name)


def test_transformer_encoder_layer_causal_mask(device):
    t = tnn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    g = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    copy_weights(g, t)
    to_device(g, t, device)
    mask = np.triu(np.ones((6, 6), dtype=bool), 1)
    run_both(lambda x, m: g(x, src_mask=m, is_causal=True),
             lambda x, m: t(x, src_mask=m, is_causal=True), [randn(2, 6, 8)], [mask], device=device)


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_decoder_layer(norm_first, device):
    kw = {"d_model": 16, "nhead": 2, "dim_feedforward": 24, "dropout": 0.0,
          "batch_first": True, "norm_first": norm_first, "activation": "gelu"}
    t = tnn.TransformerDecoderLayer(**kw)
    g = nn.TransformerDecoderLayer(**kw)
    copy_weights(g, t)
    to_device(g, t, device)
    tgt_mask = np.triu(np.ones((4, 4), dtype=bool), 1)
    mem_kpm = np.zeros((2, 6), dtype=bool)
    mem_kpm[0, 5] = True
    run_both(lambda x, m, a, b: g(x, m, tgt_mask=a, memory_key_padding_mask=b),
             lambda x, m, a, b: t(x, m, tgt_mask=a, memory_key_padding_mask=b),
             [randn(2, 4, 16), randn(2, 6, 16)], [tgt_mask, mem_kpm], device=device)
    for name, p in t.named_parameters():
        assert_close(to_torch(g.get_parameter(name).grad), cpu(p.grad), msg=name)


def test_transformer_encoder_stack(device):
    layer_t = tnn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    t = tnn.TransformerEncoder(layer_t, 2, norm=tnn.LayerNorm(8), enable_nested_tensor=False)
    g = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                                         batch_first=True), 2,
                              norm=nn.LayerNorm(8))
    assert [n for n, _ in g.named_parameters()] == [n for n, _ in t.named_parameters()]
    copy_weights(g, t)
    to_device(g, t, device)
    run_both(g, t, [randn(2, 5, 8)], device=device)
    g_dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0), 2)
    assert g_dec(genesis.zeros(3, 2, 8), genesis.zeros(4, 2, 8)).shape == (3, 2, 8)


# -------------------------------------------------------------- half precision
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mha_half_precision(dtype, device):
    genesis.manual_seed(0)
    mha = nn.MultiheadAttention(32, 4, batch_first=True).to(device)
    x = genesis.tensor(randn(2, 9, 32), device=device)
    ref, ref_w = mha(x, x, x)
    dt = getattr(genesis, dtype)
    low = mha.half() if dtype == "float16" else mha.bfloat16()
    out, w = low(x.to(dt), x.to(dt), x.to(dt))
    assert out.dtype is dt
    # Half types carry 8-11 mantissa bits: compare against float32 loosely.
    assert out.device.type == genesis.device(device).type
    assert_close(to_torch(out.float()), to_torch(ref), atol=5e-2, rtol=5e-2)
    assert_close(to_torch(w.float()), to_torch(ref_w), atol=2e-2, rtol=5e-2)
    out.float().sum().backward()
    assert all(p.grad is not None and p.grad.dtype is dt for p in low.parameters())
