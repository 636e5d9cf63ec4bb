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


@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_graphed_decode_matches_eager(family, tmp_path, graph_api, monkeypatch):
    make_checkpoint(family, tmp_path, **(dict(_SHAPE, head_dim=32) if family == "qwen3"
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
