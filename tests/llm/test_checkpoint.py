"""from_pretrained / save_pretrained: transformers round trips, shards, dtypes, bad input."""

import json
import os

import numpy as np
import pytest
import torch
import transformers
from tiny_qwen import (
    FAMILIES,
    left_padded_batch,
    make_checkpoint,
    one_cpu_thread,  # noqa: F401 - autouse fixture
    to_genesis,
    to_numpy,
)

import genesis
from genesis.models import AutoModelForCausalLM, Qwen3Config, QwenForCausalLM
from genesis.models.safetensors_io import load_tensor, read_header, save_tensors


@pytest.mark.parametrize("family", list(FAMILIES))
def test_save_pretrained_round_trips_through_transformers(family, tmp_path):
    """genesis saves what it loaded: transformers gets the same weights and the same logits."""
    ref = make_checkpoint(family, tmp_path / "src")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "src")
    model.save_pretrained(tmp_path / "out")
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert type(back).__name__ == model.config.architecture
    for name, t in ref.state_dict().items():
        torch.testing.assert_close(back.state_dict()[name], t, rtol=0, atol=0)
    ids, mask = left_padded_batch(model.config.vocab_size, [7, 4])
    with torch.no_grad():
        expected = ref(ids, attention_mask=mask).logits.numpy()
        again = back(ids, attention_mask=mask).logits.numpy()
    np.testing.assert_array_equal(again, expected)


def test_sharded_save_loads_in_both(tmp_path):
    ref = make_checkpoint("qwen3", tmp_path / "src")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "src")
    model.save_pretrained(tmp_path / "out", max_shard_size="20KB")
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and not (tmp_path / "out" / "model.safetensors").exists()
    assert set(index["weight_map"]) == set(ref.state_dict())
    for name in shards:
        assert os.path.getsize(tmp_path / "out" / name) < 20_000 + 4_096  # + header
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    ids = torch.randint(0, 97, (2, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = ref(ids).logits.numpy()
        np.testing.assert_array_equal(back(ids).logits.numpy(), expected)
    np.testing.assert_allclose(to_numpy(again(to_genesis(ids)).logits), expected, atol=1e-5)


def test_bfloat16_checkpoint(tmp_path):
    ref = make_checkpoint("qwen2", tmp_path / "src")
    ref.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "bf16")
    assert model.dtype is genesis.bfloat16  # the config's dtype by default
    w = ref.model.layers[0].self_attn.q_proj.weight.float().detach().numpy()
    np.testing.assert_array_equal(to_numpy(model.model.layers[0].self_attn.q_proj.weight.float()),
                                  w)
    as_f32 = AutoModelForCausalLM.from_pretrained(tmp_path / "bf16", dtype=genesis.float32)
    assert as_f32.dtype is genesis.float32
    model.save_pretrained(tmp_path / "again")
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "again", dtype="auto")
    assert back.dtype == torch.bfloat16
    torch.testing.assert_close(back.model.layers[0].self_attn.q_proj.weight,
                               ref.model.layers[0].self_attn.q_proj.weight, rtol=0, atol=0)


def test_fresh_model_saves_for_transformers(tmp_path):
    cfg = Qwen3Config(vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                      tie_word_embeddings=True, rope_theta=5e5)
    model = QwenForCausalLM(cfg)
    model.save_pretrained(tmp_path)
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert back.config.rope_parameters["rope_theta"] == 5e5
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        expected = back(ids).logits.numpy()
    np.testing.assert_allclose(to_numpy(model(to_genesis(ids)).logits), expected, atol=1e-6)


def test_safetensors_io_every_dtype(tmp_path):
    tensors = {"f32": genesis.randn(3, 4), "bf16": genesis.randn(5).to(genesis.bfloat16),
               "f16": genesis.randn(2, 2).to(genesis.float16),
               "i64": genesis.arange(6).reshape(2, 3), "empty": genesis.zeros(0, 3)}
    save_tensors(tensors, tmp_path / "t.safetensors", {"format": "pt"})
    header = read_header(tmp_path / "t.safetensors")
    for name, t in tensors.items():
        back = load_tensor(tmp_path / "t.safetensors", header, name)
        assert back.dtype is t.dtype and back.shape == t.shape
        np.testing.assert_array_equal(np.asarray(back), np.asarray(t))


def test_missing_directory_and_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        AutoModelForCausalLM.from_pretrained(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        AutoModelForCausalLM.from_pretrained(tmp_path)


def test_missing_weights_file(tmp_path):
    make_checkpoint("qwen2", tmp_path)
    os.remove(tmp_path / "model.safetensors")
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        AutoModelForCausalLM.from_pretrained(tmp_path)


def test_one_error_names_every_bad_tensor(tmp_path):
    make_checkpoint("qwen2", tmp_path)
    path = tmp_path / "model.safetensors"
    header = read_header(path)
    tensors = {name: load_tensor(path, header, name) for name in header.tensors}
    del tensors["model.norm.weight"]
    del tensors["model.layers.1.mlp.up_proj.weight"]
    tensors["model.layers.0.extra.weight"] = genesis.zeros(3)
    tensors["model.layers.0.self_attn.k_proj.weight"] = genesis.zeros(16, 31)
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = genesis.zeros(4)  # ignored
    save_tensors(tensors, path, {"format": "pt"})
    with pytest.raises(ValueError) as err:
        AutoModelForCausalLM.from_pretrained(tmp_path)
    msg = str(err.value)
    assert "missing tensors (2): model.layers.1.mlp.up_proj.weight, model.norm.weight" in msg
    assert "unexpected tensors (1): model.layers.0.extra.weight" in msg
    assert "model.layers.0.self_attn.k_proj.weight: checkpoint [16, 31], model [16, 32]" in msg
    assert "inv_freq" not in msg
    # the model was built with initialisers switched off: they are back after the failure
    t = genesis.nn.init.normal_(genesis.zeros(1000), 0.0, 1.0)
    assert float(t.std()) > 0.5


def test_malformed_config(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        AutoModelForCausalLM.from_pretrained(tmp_path)
