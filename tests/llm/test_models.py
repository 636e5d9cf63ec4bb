"""genesis.models against transformers on tiny random checkpoints (float32, CPU)."""

import numpy as np
import pytest
import torch
from tiny_qwen import (
    FAMILIES,
    left_padded_batch,
    make_checkpoint,
    one_cpu_thread,  # noqa: F401 - autouse fixture
    to_genesis,
    to_numpy,
)

import genesis
from genesis.models import AutoModelForCausalLM, QwenForCausalLM

FAMILY_NAMES = list(FAMILIES)


@pytest.fixture(scope="module", params=FAMILY_NAMES)
def pair(request, tmp_path_factory):
    """(transformers model, genesis model) with the same weights."""
    path = tmp_path_factory.mktemp(request.param)
    ref = make_checkpoint(request.param, path)
    return ref, AutoModelForCausalLM.from_pretrained(path)


def _hf_positions(mask: torch.Tensor) -> torch.Tensor:
    """Positions counting real tokens only (what generate uses with left padding)."""
    return (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)


def test_loaded_model_is_the_right_family(pair):
    ref, model = pair
    assert isinstance(model, QwenForCausalLM)
    assert model.config.model_type == ref.config.model_type
    n_ref = sum(p.numel() for p in ref.parameters())
    assert sum(p.numel() for p in model.parameters()) == n_ref


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("positions", ["default", "from_mask"])
def test_logits_left_padded_batch(pair, positions, grad):
    """With and without gradients: MoE blocks route a short no-grad query at fixed shapes
    (the routed experts' stacked weight slabs) and otherwise group the tokens by expert."""
    ref, model = pair
    ids, mask = left_padded_batch(ref.config.vocab_size, [9, 5, 7])
    pos = None if positions == "default" else _hf_positions(mask)
    with torch.no_grad():
        expected = ref(ids, attention_mask=mask, position_ids=pos).logits.numpy()
    with genesis.set_grad_enabled(grad):
        out = model(to_genesis(ids), attention_mask=to_genesis(mask),
                    position_ids=None if pos is None else to_genesis(pos)).logits
    real = mask.numpy().astype(bool)  # padding rows are meaningless in both
    np.testing.assert_allclose(to_numpy(out)[real], expected[real], atol=1e-4, rtol=0)


def test_left_padding_does_not_change_a_prompt(pair):
    """With generate-style positions, a left-padded row equals the same prompt alone."""
    _, model = pair
    ids, mask = left_padded_batch(model.config.vocab_size, [8, 5])
    pos = _hf_positions(mask)
    batch = model(to_genesis(ids), attention_mask=to_genesis(mask), position_ids=to_genesis(pos))
    alone = model(to_genesis(ids[1:, 3:]))
    np.testing.assert_allclose(to_numpy(batch.logits)[1, 3:], to_numpy(alone.logits)[0],
                               atol=1e-5, rtol=0)


def _reference_grads(ref) -> dict:
    """transformers' gradients under the checkpoint's names (fused experts split back)."""
    grads = {}
    for name, p in ref.named_parameters():
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        if name.endswith("experts.gate_up_proj"):
            prefix, inter = name[: -len("gate_up_proj")], g.shape[1] // 2
            for e in range(g.shape[0]):
                grads[f"{prefix}{e}.gate_proj.weight"] = g[e, :inter]
                grads[f"{prefix}{e}.up_proj.weight"] = g[e, inter:]
        elif name.endswith("experts.down_proj"):
            prefix = name[: -len("down_proj")]
            for e in range(g.shape[0]):
                grads[f"{prefix}{e}.down_proj.weight"] = g[e]
        else:
            grads[name] = g
    return grads


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    # Relative to the tensor's norm: elementwise relative error is noise for near-zero entries.
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))


def test_loss_and_every_gradient(pair):
    ref, model = pair
    ids, mask = left_padded_batch(ref.config.vocab_size, [8, 6, 8], seed=1)
    labels = ids.masked_fill(mask == 0, -100)
    labels[0, 4] = -100
    ref.zero_grad()
    ref.train()
    out_ref = ref(ids, attention_mask=mask, labels=labels)
    out_ref.loss.backward()
    ref.eval()
    model.zero_grad()
    out = model(to_genesis(ids), attention_mask=to_genesis(mask), labels=to_genesis(labels))
    out.loss.backward()
    assert abs(out.loss.item() - out_ref.loss.item()) <= 1e-4 * abs(out_ref.loss.item())
    if getattr(ref.config, "output_router_logits", False):
        assert out.aux_loss is not None
        assert abs(out.aux_loss.item() - out_ref.aux_loss.item()) <= 1e-4 * out_ref.aux_loss.item()
    expected = _reference_grads(ref)
    params = dict(model.named_parameters())
    assert set(params) == set(expected) - ({"lm_head.weight"} if ref.config.tie_word_embeddings
                                          else set())
    for name, p in params.items():
        g = np.zeros(p.shape, np.float32) if p.grad is None else to_numpy(p.grad)
        assert _rel_err(g, expected[name].numpy()) <= 1e-4, name



def test_bf16_loss_is_float32_and_unrounded(tmp_path):
    """A bf16 model's loss comes back in float32 (the fused cross-entropy's own precision),
    as transformers' does, not rounded to bf16 (whose step near ln(vocab) is ~0.03)."""
    make_checkpoint("qwen3", tmp_path)
    f32 = AutoModelForCausalLM.from_pretrained(tmp_path)
    bf16 = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=genesis.bfloat16)
    ids = to_genesis(left_padded_batch(f32.config.vocab_size, [16, 16], seed=3)[0])
    want = f32(ids, labels=ids).loss.item()
    got = bf16(ids, labels=ids).loss
    assert got.dtype == genesis.float32
    assert abs(got.item() - want) < 0.02  # bf16 weights and activations, float32 loss
    assert got.item() != got.to(genesis.bfloat16).item()  # not a bf16 value (chance 2**-16)


ROPE_VARIANTS = {
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8},
}


@pytest.mark.parametrize("variant", list(ROPE_VARIANTS))
def test_rope_scaling(variant, tmp_path):
    # max_position_embeddings 12 < sequence 20: dynamic NTK really rescales.
    params = {"rope_theta": 10000.0, **ROPE_VARIANTS[variant]}
    ref = make_checkpoint("qwen3", tmp_path, max_position_embeddings=12,
                          rope_parameters=params)
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert model.config.rope_scaling["rope_type"] == variant
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, ref.config.vocab_size, (2, 20), generator=g)
    with torch.no_grad():
        expected = ref(ids).logits.numpy()
    np.testing.assert_allclose(to_numpy(model(to_genesis(ids)).logits), expected, atol=1e-4,
                               rtol=0)


def test_legacy_rope_scaling_keys():
    """transformers 4.x configs spell RoPE as rope_theta + rope_scaling {"type": ...}."""
    from genesis.models import config_from_dict

    cfg = config_from_dict({"model_type": "qwen2", "rope_theta": 1e6,
                            "rope_scaling": {"type": "yarn", "factor": 4.0,
                                             "original_max_position_embeddings": 32768}})
    assert cfg.rope_theta == 1e6
    assert cfg.rope_scaling == {"rope_type": "yarn", "factor": 4.0,
                                "original_max_position_embeddings": 32768}


def test_unknown_model_type_is_named():
    from genesis.models import config_from_dict

    with pytest.raises(ValueError, match="'llama'"):
        config_from_dict({"model_type": "llama"})


def test_bad_input_shape():
    from genesis.models import Qwen2Config

    model = QwenForCausalLM(Qwen2Config(vocab_size=11, hidden_size=8, intermediate_size=8,
                                        num_hidden_layers=1, num_attention_heads=2,
                                        num_key_value_heads=1))
    with pytest.raises(ValueError, match=r"\(batch, seq\).*\[5\]"):
        model(genesis.tensor([1, 2, 3, 4, 5]))
