"""generate(compile=True) on the GPU: the decode step through genesis.compile — fused and
replayed as a CUDA graph — gives the eager tokens, is traced once and captured without a
fallback (a capture the CUDA backend refuses warns and runs without the graph)."""

import warnings

import pytest
from tiny_qwen import (
    left_padded_batch,
    make_checkpoint,
    one_cpu_thread,  # noqa: F401 - autouse fixture
    to_genesis,
)

import genesis
from genesis.models import AutoModelForCausalLM
from genesis.models.qwen import QwenForCausalLM

pytestmark = pytest.mark.cuda

_SHAPE = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=512)


def _load(family, tmp_path, dtype):
    make_checkpoint(family, tmp_path, **(dict(_SHAPE, head_dim=32) if family.startswith("qwen3")
                                         else _SHAPE))
    return AutoModelForCausalLM.from_pretrained(tmp_path, dtype=dtype, device="cuda")


def _batch(lengths, seed=0):
    ids, mask = left_padded_batch(_SHAPE["vocab_size"], lengths, seed=seed)
    return to_genesis(ids).to("cuda"), to_genesis(mask).to("cuda")


def _compiled_generate(model, ids, **kw):
    with warnings.catch_warnings():
        # a refused CUDA-graph capture, an untraceable step, a retrace past the cache limit
        warnings.filterwarnings("error", message="genesis.compile")
        return model.generate(ids, compile=True, **kw)


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "qwen2_moe", "qwen3_moe"])
def test_compiled_decode_matches_eager(family, tmp_path):
    """Dense and mixture-of-experts families (whose decode step routes at fixed shapes), in
    float32 so that the fused kernels' rounding cannot flip a greedy choice."""
    model = _load(family, tmp_path, genesis.float32)
    ids, mask = _batch([12, 7, 9])
    kw = dict(attention_mask=mask, max_new_tokens=24, eos_token_id=None)
    eager = model.generate(ids, **kw)
    assert _compiled_generate(model, ids, **kw).tolist() == eager.tolist()
    (decoder,) = model.__dict__["_decoders"][1].values()
    assert len(decoder.run.graphs()) == 1  # one graph: one CUDA graph for the whole step


def test_bf16_compiled_decode_is_captured(tmp_path):
    """The precision generation runs in: the step is captured (no warning) and gives tokens
    of the right shape (bf16 fused kernels may round differently from eager's)."""
    model = _load("qwen2", tmp_path, genesis.bfloat16)
    ids, mask = _batch([12, 7, 9])
    out = _compiled_generate(model, ids, attention_mask=mask, max_new_tokens=24,
                             eos_token_id=None)
    assert tuple(out.shape) == (3, 12 + 24)


def test_kept_step_is_reused_across_calls(tmp_path, monkeypatch):
    """Calls of one batch size and capacity bucket replay one compiled step (the KV cache and
    key bounds refilled in place), give the eager tokens, and follow in-place weight edits;
    release_decode_graphs() makes the next call trace anew."""
    model = _load("qwen2", tmp_path, genesis.float32)  # q/k/v bias: the fused projection's
    traced = []
    step = QwenForCausalLM.decode_step
    monkeypatch.setattr(QwenForCausalLM, "decode_step",
                        lambda self, *a, **k: traced.append(1) or step(self, *a, **k))

    def both(lengths, new, seed):
        ids, mask = _batch(lengths, seed)
        kw = dict(attention_mask=mask, max_new_tokens=new, eos_token_id=None)
        eager = model.generate(ids, compile=False, **kw)
        n = len(traced)
        assert _compiled_generate(model, ids, **kw).tolist() == eager.tolist()
        return len(traced) - n  # decode steps that ran in Python

    assert both([12, 7, 9], 24, 0) == 1  # traced once; replayed (then as a CUDA graph)
    assert both([10, 10, 3], 40, 1) == 0  # 50 slots: the same 512-slot bucket
    with genesis.no_grad():
        model.model.layers[0].self_attn.k_proj.bias.add_(0.25)
        model.model.layers[1].mlp.up_proj.weight.mul_(1.5)
    assert both([5, 9, 9], 30, 2) == 0
    model.release_decode_graphs()
    assert both([5, 9, 9], 30, 2) == 1
