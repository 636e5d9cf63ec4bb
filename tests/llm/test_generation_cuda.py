"""generate(use_cuda_graph=True) on the GPU: the captured decode step gives the eager tokens."""

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

pytestmark = pytest.mark.cuda

_SHAPE = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=512)


@pytest.fixture
def graph_api():
    import genesis.cuda

    if not hasattr(genesis.cuda, "graph"):
        pytest.skip("genesis.cuda.graph does not exist yet")
    return genesis.cuda


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "qwen2_moe", "qwen3_moe"])
def test_graphed_decode_matches_eager(family, tmp_path, graph_api, monkeypatch):
    """Dense and mixture-of-experts families (whose decode step routes at fixed shapes)."""
    make_checkpoint(family, tmp_path, **(dict(_SHAPE, head_dim=32) if family.startswith("qwen3")
                                         else _SHAPE))
    model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=genesis.bfloat16, device="cuda")
    ids, mask = left_padded_batch(_SHAPE["vocab_size"], [12, 7, 9])
    ids, mask = to_genesis(ids).to("cuda"), to_genesis(mask).to("cuda")
    eager = model.generate(ids, attention_mask=mask, max_new_tokens=24, eos_token_id=None)
    captures = []
    real_graph = graph_api.graph

    def spy(*args, **kwargs):
        captures.append(args)
        return real_graph(*args, **kwargs)

    monkeypatch.setattr(graph_api, "graph", spy, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a failed capture (eager fallback)
        graphed = model.generate(ids, attention_mask=mask, max_new_tokens=24,
                                 eos_token_id=None, use_cuda_graph=True)
    assert len(captures) == 1  # captured once, replayed for the remaining steps
    assert graphed.tolist() == eager.tolist()


def test_kept_graph_is_reused_across_calls(tmp_path, graph_api, monkeypatch):
    """Calls of one batch size and capacity bucket replay one captured step (the KV cache and
    key bounds refilled in place), give the eager tokens, and follow in-place weight edits;
    release_decode_graphs() makes the next call capture anew."""
    make_checkpoint("qwen2", tmp_path, **_SHAPE)  # q/k/v bias: the fused projection's too
    model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=genesis.bfloat16, device="cuda")
    captures = []
    real_graph = graph_api.graph

    def spy(*args, **kwargs):
        captures.append(args)
        return real_graph(*args, **kwargs)

    monkeypatch.setattr(graph_api, "graph", spy, raising=False)

    def both(lengths, new, seed):
        ids, mask = left_padded_batch(_SHAPE["vocab_size"], lengths, seed=seed)
        ids, mask = to_genesis(ids).to("cuda"), to_genesis(mask).to("cuda")
        kw = dict(attention_mask=mask, max_new_tokens=new, eos_token_id=None)
        eager = model.generate(ids, **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            graphed = model.generate(ids, use_cuda_graph=True, **kw)
        assert graphed.tolist() == eager.tolist()

    both([12, 7, 9], 24, 0)
    both([10, 10, 3], 40, 1)  # 50 slots: the same 512-slot bucket, other padding
    assert len(captures) == 1
    with genesis.no_grad():
        model.model.layers[0].self_attn.k_proj.bias.add_(0.25)
        model.model.layers[1].mlp.up_proj.weight.mul_(1.5)
    both([5, 9, 9], 30, 2)
    assert len(captures) == 1
    model.release_decode_graphs()
    both([5, 9, 9], 30, 2)
    assert len(captures) == 2
