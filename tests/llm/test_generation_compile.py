"""generate() with its decode step through genesis.compile (CPU: core's replay; the CUDA
graph of the same step is tested in test_generation_cuda.py): the eager tokens from one
traced graph per kept decoder, model.compile() turning it on, the decoders kept per shape."""

import dataclasses
import gc
import weakref

import numpy as np
import pytest
from tiny_qwen import (
    FAMILIES,
    left_padded_batch,
    make_checkpoint,
    one_cpu_thread,  # noqa: F401 - autouse fixture
    to_genesis,
)

import genesis
from genesis.models import AutoModelForCausalLM
from genesis.models.qwen import QwenForCausalLM


@pytest.fixture(scope="module", params=list(FAMILIES))
def model(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    make_checkpoint(request.param, path)
    return AutoModelForCausalLM.from_pretrained(path)


@pytest.fixture
def qwen3(tmp_path):
    make_checkpoint("qwen3", tmp_path)
    return AutoModelForCausalLM.from_pretrained(tmp_path)


def _kept(model) -> dict:
    """The compiled decoders kept on ``model``, by (batch, capacity, spans, greedy)."""
    return model.__dict__.get("_decoders", (None, {}))[1]


@pytest.mark.parametrize("how", ["greedy", "masked_keys", "sampled", "penalised"])
def test_compiled_decode_gives_the_eager_tokens_from_one_graph(model, how, monkeypatch):
    """Every family (dense, sliding window, MoE) and every kind of step: greedy (the token
    chosen inside the step), keys as a mask over the whole cache, sampling and repetition
    penalty (logits out, the caller's token in). The step traces as one graph: no graph
    break, so on CUDA one CUDA graph captures the whole step."""
    ids, mask = left_padded_batch(model.config.vocab_size, [6, 3, 5], seed=2)
    kw = dict(attention_mask=to_genesis(mask), max_new_tokens=12, eos_token_id=None)
    if how == "masked_keys":
        monkeypatch.setattr(model, "decode_attention", False)
    if how == "penalised":
        kw["repetition_penalty"] = 1.5

    def run(compile):
        if how == "sampled":
            kw.update(do_sample=True, top_k=20, generator=genesis.Generator().manual_seed(3))
        return model.generate(to_genesis(ids), compile=compile, **kw).tolist()

    eager = run(False)
    assert _kept(model) == {}  # an eager step is not kept
    assert run(True) == eager
    (decoder,) = _kept(model).values()
    assert len(decoder.run.graphs()) == 1
    assert run(True) == eager  # the kept step, replayed from the first step on
    model.release_decode_graphs()


def test_model_compile_turns_the_compiled_decode_step_on(qwen3):
    ids = genesis.tensor([[3, 1, 4, 1, 5]])
    eager = qwen3.generate(ids, max_new_tokens=6, eos_token_id=None).tolist()
    assert _kept(qwen3) == {}
    qwen3.compile()
    assert qwen3.generate(ids, max_new_tokens=6, eos_token_id=None).tolist() == eager
    assert len(_kept(qwen3)) == 1
    qwen3.release_decode_graphs()
    assert qwen3.generate(ids, max_new_tokens=6, eos_token_id=None, compile=False).tolist() \
        == eager
    assert _kept(qwen3) == {}  # compile=False: eager even on a compiled model


def test_kept_step_is_traced_once_and_follows_weight_edits(qwen3, monkeypatch):
    """Calls of one batch size and capacity bucket replay one traced step (the KV cache and
    key bounds refilled in place) and read the weights in place; a model in training mode
    (as from_pretrained leaves it) is put back without dropping the kept step, while the
    user's own train() drops it."""
    assert qwen3.training
    traced = []
    step = QwenForCausalLM.decode_step
    monkeypatch.setattr(QwenForCausalLM, "decode_step",
                        lambda self, *a, **k: traced.append(1) or step(self, *a, **k))

    def both(lengths, new, seed):
        ids, mask = left_padded_batch(qwen3.config.vocab_size, lengths, seed=seed)
        kw = dict(attention_mask=to_genesis(mask), max_new_tokens=new, eos_token_id=None)
        eager = qwen3.generate(to_genesis(ids), compile=False, **kw).tolist()
        n = len(traced)
        assert qwen3.generate(to_genesis(ids), compile=True, **kw).tolist() == eager
        return len(traced) - n  # decode steps that ran in Python

    assert both([6, 3, 5], 10, 0) == 1  # the first step is traced, the others replay
    assert qwen3.training
    decoder = next(iter(_kept(qwen3).values()))
    assert both([4, 4, 2], 20, 1) == 0  # the same 512-slot bucket, other padding
    with genesis.no_grad():
        qwen3.model.layers[0].self_attn.k_proj.weight.mul_(1.5)
        qwen3.model.layers[1].mlp.up_proj.weight.mul_(0.5)
    assert both([5, 6, 6], 12, 2) == 0
    assert list(_kept(qwen3).values()) == [decoder]
    qwen3.train()
    assert _kept(qwen3) == {}


def test_dynamic_rope_steps_run_eagerly_when_compile_is_asked(qwen3):
    """Dynamic RoPE reads the longest position on the host at every step: its step is not
    compiled (it would break the graph at each step), and generate still works."""
    config = dataclasses.replace(qwen3.config,
                                 rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    genesis.manual_seed(0)
    model = QwenForCausalLM(config)
    assert not model.graphable()
    ids = genesis.tensor([[3, 1, 4, 1, 5]])
    eager = model.generate(ids, max_new_tokens=6, eos_token_id=None).tolist()
    assert model.generate(ids, max_new_tokens=6, eos_token_id=None, compile=True).tolist() \
        == eager
    assert _kept(model) == {}


def test_compiled_decoders_are_kept_per_shape_and_dropped_on_change(qwen3):
    """One kept decoder per batch size, capacity bucket, kind of key bounds and greedy or
    not, at most _KEPT_GRAPHS (least recently used go); train(), to() and
    release_decode_graphs() drop them."""
    qwen3.eval()
    first = qwen3._decoder(2, 40, True, True, True)
    assert qwen3._decoder(2, 300, True, True, True) is first  # both fit 512 slots
    assert first.cache.max_length == 512
    assert qwen3._decoder(2, 513, True, True, True) is not first
    assert qwen3._decoder(3, 40, True, True, True) is not first
    assert qwen3._decoder(2, 40, False, True, True) is not first
    assert qwen3._decoder(2, 40, True, True, True) is first
    assert qwen3._decoder(2, 40, True, False, True) is not first  # sampling
    assert len(_kept(qwen3)) == qwen3._KEPT_GRAPHS
    assert qwen3._decoder(2, 40, True, True, False) is not first  # eager: a new one
    qwen3.train()
    qwen3.eval()
    assert qwen3._decoder(2, 40, True, True, True) is not first
    again = qwen3._decoder(2, 40, True, True, True)
    qwen3.to(genesis.float32)
    assert qwen3._decoder(2, 40, True, True, True) is not again
    qwen3.release_decode_graphs()
    assert "_decoders" not in qwen3.__dict__


@pytest.mark.parametrize("how", ["dropped", "released"])
def test_compiled_decoders_are_freed_without_a_collection(qwen3, how):
    """Kept decoders refer to their model weakly, their compiled step to the decoder weakly,
    and a decoder that goes clears its step's traces: dropping the model (or releasing its
    decode steps) frees the model, the compiled step, the weights and KV cache its trace
    held (and, on CUDA, its graphs' memory) at once, not at the next cyclic collection."""
    model = QwenForCausalLM(qwen3.config)
    model.generate(genesis.tensor([[3, 1, 4]]), max_new_tokens=4, eos_token_id=None,
                   compile=True)
    (decoder,) = _kept(model).values()
    refs = [weakref.ref(decoder), weakref.ref(decoder.run), weakref.ref(decoder.cache.keys[0])]
    del decoder
    gc.disable()
    try:
        if how == "dropped":
            refs += [weakref.ref(model), weakref.ref(model.lm_head.weight)]
            del model
        else:
            model.release_decode_graphs()
        assert [r() for r in refs] == [None] * len(refs)
    finally:
        gc.enable()


def test_greedy_compiled_decode_matches_eager_for_a_long_run(qwen3):
    """Past the first capacity bucket's warm-up: 40 tokens, two rows, one finishing at an
    eos (the step pads it from then on, inside the replayed graph)."""
    ids, mask = left_padded_batch(qwen3.config.vocab_size, [5, 5], seed=5)
    free = qwen3.generate(to_genesis(ids), max_new_tokens=40, eos_token_id=None).tolist()
    eos = [free[0][5 + 3]]
    kw = dict(max_new_tokens=40, eos_token_id=eos, pad_token_id=0)
    eager = qwen3.generate(to_genesis(ids), compile=False, **kw)
    compiled = qwen3.generate(to_genesis(ids), compile=True, **kw)
    np.testing.assert_array_equal(compiled.numpy(), eager.numpy())
