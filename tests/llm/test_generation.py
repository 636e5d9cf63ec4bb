"""model.generate: greedy parity with transformers, eos, sampling, streaming."""

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
from genesis.models import AutoModelForCausalLM
from genesis.models.moe import SparseMoeBlock


@pytest.fixture(scope="module", params=list(FAMILIES))
def pair(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    ref = make_checkpoint(request.param, path)
    return ref, AutoModelForCausalLM.from_pretrained(path)


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3")
    ref = make_checkpoint("qwen3", path)
    return ref, AutoModelForCausalLM.from_pretrained(path)


def _hf_generate(ref, ids, mask, **kw):
    with torch.no_grad():
        # output_router_logits: transformers' MoE aux loss breaks on cached decode steps
        return ref.generate(ids, attention_mask=mask, pad_token_id=0,
                            output_router_logits=False, **kw).numpy()


def test_greedy_32_tokens_match_transformers(pair):
    ref, model = pair
    ids, mask = left_padded_batch(ref.config.vocab_size, [6, 3, 5], seed=2)
    expected = _hf_generate(ref, ids, mask, max_new_tokens=32, do_sample=False)
    out = model.generate(to_genesis(ids), attention_mask=to_genesis(mask), max_new_tokens=32,
                         eos_token_id=None)
    assert out.shape == (3, 6 + 32)
    np.testing.assert_array_equal(to_numpy(out), expected)


def test_repetition_penalty_matches_transformers(qwen3):
    ref, model = qwen3
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(0, ref.config.vocab_size, (2, 5), generator=g)
    expected = _hf_generate(ref, ids, None, max_new_tokens=12, do_sample=False,
                            repetition_penalty=1.8)
    out = model.generate(to_genesis(ids), max_new_tokens=12, repetition_penalty=1.8,
                         eos_token_id=None)
    np.testing.assert_array_equal(to_numpy(out), expected)


def test_stops_at_any_eos_and_pads(qwen3):
    _, model = qwen3
    ids, mask = left_padded_batch(model.config.vocab_size, [4, 4], seed=5)
    free = to_numpy(model.generate(to_genesis(ids), max_new_tokens=10, eos_token_id=None))
    # Make the 3rd new token of row 0 and the 5th of row 1 end their rows.
    eos = [int(free[0, 4 + 2]), int(free[1, 4 + 4])]
    out = to_numpy(model.generate(to_genesis(ids), max_new_tokens=10, eos_token_id=eos,
                                  pad_token_id=0))
    for row in range(2):
        new = out[row, 4:]
        first = next(i for i, t in enumerate(new) if t in eos)
        np.testing.assert_array_equal(new[:first + 1], free[row, 4:4 + first + 1])
        assert (new[first + 1:] == 0).all()
    assert out.shape[1] < 4 + 10  # stopped once both rows ended



def test_eos_stop_read_back_in_batches_gives_the_per_step_length(qwen3, monkeypatch):
    """On an accelerator the all-rows-ended flag is read every few steps (here forced on the
    CPU); the output still ends at the step where the last row ended (the rest is cut off)."""
    from genesis.models import generation
    from genesis.models.generation import _EOS_CHECK_EVERY

    monkeypatch.setattr(generation, "_eos_check_every", lambda device: _EOS_CHECK_EVERY)
    _, model = qwen3
    ids, _ = left_padded_batch(model.config.vocab_size, [4, 4], seed=5)
    n = 2 * _EOS_CHECK_EVERY + 3
    free = to_numpy(model.generate(to_genesis(ids), max_new_tokens=n, eos_token_id=None))
    row1 = list(free[1, 4:])
    # Row 1 ends past the first read-back, at a step that is no multiple of the interval
    # (its token's first appearance), so the stop comes from cutting off, not the read.
    late = next(j for j in range(_EOS_CHECK_EVERY + 1, n)
                if row1[j] not in row1[:j] and (j + 1) % _EOS_CHECK_EVERY)
    eos = [int(free[0, 4 + 1]), int(row1[late])]
    ends = [next(i for i, t in enumerate(free[row, 4:]) if t in eos) for row in range(2)]
    assert ends[1] == late and (max(ends) + 1) % _EOS_CHECK_EVERY
    out = to_numpy(model.generate(to_genesis(ids), max_new_tokens=n, eos_token_id=eos,
                                  pad_token_id=0))
    assert out.shape == (2, 4 + max(ends) + 1)
    for row in range(2):
        np.testing.assert_array_equal(out[row, 4:4 + ends[row] + 1],
                                      free[row, 4:4 + ends[row] + 1])
        assert (out[row, 4 + ends[row] + 1:] == 0).all()

def test_sampling_is_seedable(qwen3):
    _, model = qwen3
    ids = to_genesis(torch.randint(0, 97, (3, 4), generator=torch.Generator().manual_seed(6)))
    kw = dict(max_new_tokens=16, do_sample=True, temperature=1.5, top_k=20, top_p=0.9,
              eos_token_id=None)
    a = model.generate(ids, generator=genesis.Generator().manual_seed(7), **kw)
    b = model.generate(ids, generator=genesis.Generator().manual_seed(7), **kw)
    c = model.generate(ids, generator=genesis.Generator().manual_seed(8), **kw)
    np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    assert not np.array_equal(to_numpy(a), to_numpy(c))


def test_top_k_1_sampling_is_greedy(qwen3):
    _, model = qwen3
    ids = to_genesis(torch.randint(0, 97, (2, 4), generator=torch.Generator().manual_seed(9)))
    greedy = model.generate(ids, max_new_tokens=8, eos_token_id=None)
    sampled = model.generate(ids, max_new_tokens=8, do_sample=True, top_k=1, eos_token_id=None,
                             generator=genesis.Generator().manual_seed(1))
    np.testing.assert_array_equal(to_numpy(sampled), to_numpy(greedy))


def test_sampling_follows_the_distribution():
    from genesis.models.sampling import sample_token, warp_logits

    probs = np.array([0.5, 0.3, 0.15, 0.05], np.float32)
    logits = genesis.tensor(np.log(np.tile(probs, (4000, 1))))
    draws = to_numpy(sample_token(logits, genesis.Generator().manual_seed(0)))
    freq = np.bincount(draws, minlength=4) / draws.size
    np.testing.assert_allclose(freq, probs, atol=0.03)
    # top_p=0.75 keeps {0.5, 0.3}: the smallest set reaching 0.75
    kept = to_numpy(warp_logits(logits[:1], top_p=0.75))[0]
    assert np.isfinite(kept[:2]).all() and np.isneginf(kept[2:]).all()


def test_streamer_gets_prompt_then_each_token(qwen3):
    _, model = qwen3

    class Recorder:
        def __init__(self):
            self.puts, self.ended = [], False

        def put(self, tokens):
            self.puts.append(tokens.tolist())

        def end(self):
            self.ended = True

    rec = Recorder()
    ids = genesis.tensor([[1, 2, 3]])
    out = model.generate(ids, max_new_tokens=5, eos_token_id=None, streamer=rec)
    assert rec.ended and rec.puts[0] == [[1, 2, 3]]
    assert [t[0] for t in rec.puts[1:]] == out.tolist()[0][3:]


def test_decode_step_keeps_its_shapes(pair):
    """The decode step's inputs and outputs have one shape at every step (graph capture),
    and its logits are the full forward's (for MoE: the fixed-shape routing of a no-grad
    decode step against the per-expert grouping of a forward with gradients)."""
    _, model = pair
    from genesis.models.attention import KVCache

    cfg = model.config
    cache = KVCache(cfg, 2, 12, model.dtype, model.device)
    valid = genesis.ones((2, 12), dtype=genesis.bool)
    ids = genesis.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    logits = model.prefill(ids, genesis.arange(4).unsqueeze(0).expand(2, 4), valid[:, :4], cache)
    full = model(genesis.cat([ids, logits.argmax(-1).unsqueeze(1)], 1)).logits
    token = logits.argmax(-1).unsqueeze(1)
    with genesis.no_grad():
        step = model.decode_step(token, genesis.tensor([[4], [4]]), genesis.tensor([4]), valid,
                                 cache)
    assert step.shape == (2, cfg.vocab_size)
    np.testing.assert_allclose(to_numpy(step), to_numpy(full)[:, -1], atol=1e-5, rtol=0)


def test_prefill_writes_the_prompt_to_the_first_slots(qwen3):
    """The prompt pass copies each layer's keys/values into slots 0 .. P-1 and leaves the
    rest of the cache untouched; a prompt longer than the cache is refused by name."""
    _, model = qwen3
    from genesis.models.attention import KVCache

    cfg = model.config
    cache = KVCache(cfg, 1, 9, model.dtype, model.device)
    ids = genesis.tensor([[3, 1, 4, 1, 5]])
    with genesis.no_grad():
        model.prefill(ids, genesis.arange(5).unsqueeze(0), None, cache)
    for buf in (cache.keys[0], cache.values[-1]):
        data = to_numpy(buf)
        assert np.abs(data[:, :, :5]).max(axis=-1).min() > 0  # every prompt slot written
        assert not data[:, :, 5:].any()
    small = KVCache(cfg, 1, 3, model.dtype, model.device)
    with genesis.no_grad(), pytest.raises(ValueError, match="5 tokens .* KV cache of 3 slots"):
        model.prefill(ids, genesis.arange(5).unsqueeze(0), None, small)


def test_bad_attention_masks(qwen3):
    _, model = qwen3
    ids = genesis.tensor([[1, 2, 3], [4, 5, 6]])
    with pytest.raises(ValueError, match="left-padded"):
        model.generate(ids, attention_mask=genesis.tensor([[1, 1, 1], [1, 1, 0]]))
    with pytest.raises(ValueError, match=r"\[2, 2\] must have input_ids' shape \[2, 3\]"):
        model.generate(ids, attention_mask=genesis.tensor([[1, 1], [1, 1]]))


def test_decode_step_reads_nothing_back_to_the_host(pair, monkeypatch):
    """A CUDA graph cannot capture a host read: the decode step of every family (dense and
    mixture-of-experts) makes none of its own (counted at the backend contract's host-value
    methods, on the CPU backend), with a mask or with slot ranges as its keys, for one and
    for several query positions per row. The index bound check of core's
    ``ops/indexing.py`` (the embedding lookup) reads its index back on the CPU only; it is
    allowed here."""
    import traceback

    _, model = pair
    from genesis.backends.cpu import CPUBackend
    from genesis.models.attention import KVCache

    reads = []
    for name in ("to_numpy", "item", "nonzero"):
        original = getattr(CPUBackend, name)

        def counted(self, *args, _original=original):
            callers = {frame.name for frame in traceback.extract_stack()}
            if "_check_index_tensor" not in callers:
                reads.append(traceback.format_stack(limit=8))
            return _original(self, *args)

        monkeypatch.setattr(CPUBackend, name, counted)
    cache = KVCache(model.config, 2, 8, model.dtype, model.device)
    valid = genesis.ones((2, 8), dtype=genesis.bool)
    assert model.graphable()
    with genesis.no_grad():
        model.decode_step(genesis.tensor([[5], [6]]), genesis.tensor([[0], [0]]),
                          genesis.tensor([0]), valid, cache)
        model.decode_step(genesis.tensor([[5], [6]]), genesis.tensor([[1], [1]]),
                          genesis.tensor([1]), None, cache, key_starts=genesis.tensor([0, 1]))
        for layer in model.model.layers:  # MoE: every short query (<= 16 per row) too
            if layer.sparse:
                layer.mlp(genesis.randn(2, 16, model.config.hidden_size))
    assert reads == []


def test_decode_attention_gives_the_masked_steps_tokens(pair, monkeypatch):
    """Decode steps through F.attention_decode (slot ranges) and through a mask over the
    whole cache choose the same greedy tokens, for every family (sliding window included)."""
    _, model = pair
    ids, mask = left_padded_batch(model.config.vocab_size, [7, 2, 5], seed=3)
    ids, mask = to_genesis(ids), to_genesis(mask)
    _, starts = model._prompt_padding(ids, mask)
    assert to_numpy(starts).tolist() == [0, 5, 2]
    ranged = model.generate(ids, attention_mask=mask, max_new_tokens=20, eos_token_id=None)
    monkeypatch.setattr(model, "decode_attention", False)
    assert model._prompt_padding(ids, mask)[1] is None
    masked = model.generate(ids, attention_mask=mask, max_new_tokens=20, eos_token_id=None)
    np.testing.assert_array_equal(to_numpy(ranged), to_numpy(masked))


def test_a_mask_with_a_hole_takes_the_masked_steps(qwen3, monkeypatch):
    _, model = qwen3
    ids = genesis.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    mask = genesis.tensor([[1, 0, 1, 1], [1, 1, 1, 1]])  # no single range of slots in row 0
    assert model._prompt_padding(ids, mask)[1] is None
    out = model.generate(ids, attention_mask=mask, max_new_tokens=8, eos_token_id=None)
    monkeypatch.setattr(model, "decode_attention", False)
    again = model.generate(ids, attention_mask=mask, max_new_tokens=8, eos_token_id=None)
    np.testing.assert_array_equal(to_numpy(out), to_numpy(again))


def test_fused_projections_follow_weight_edits_in_place(tmp_path):
    """Inference runs q/k/v (and gate/up) as one matmul over the stacked weights, which the
    layers' parameters are views of: in-place edits show at once, at the same address;
    ``to()`` shares them again. Parameters given memory of their own by hand: q/k/v use a
    stacked copy and gate/up run one by one; the logits stay the unfused ones."""
    make_checkpoint("qwen2", tmp_path)  # q/k/v with bias
    model = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = genesis.tensor([[3, 1, 4, 1, 5]])
    attn, mlp = model.model.layers[0].self_attn, model.model.layers[1].mlp
    weight, bias = attn.qkv.refresh()
    assert attn.k_proj.weight.data_ptr() == weight[attn.q_proj.out_features:].data_ptr()
    assert mlp.gate_up.refresh() is mlp.gate_up.shared
    with genesis.no_grad():
        attn.k_proj.bias.add_(0.5)
        attn.v_proj.weight.mul_(2.0)
        mlp.up_proj.weight.mul_(0.5)
        fused = model(ids).logits
        again = attn.qkv.refresh()
        assert again[0] is weight and again[1] is bias
    unfused = model(ids).logits  # grad mode: the layers one by one
    np.testing.assert_allclose(to_numpy(fused), to_numpy(unfused), atol=1e-5, rtol=0)
    params = list(model.parameters())
    model.to(genesis.float64)
    assert all(a is b for a, b in zip(model.parameters(), params))  # the same objects
    assert attn.qkv.refresh()[0] is attn.qkv.shared[0]
    assert attn.qkv.shared[0].dtype is genesis.float64
    with genesis.no_grad():
        for m in (attn.k_proj, mlp.gate_proj):
            m.weight.data = m.weight.detach().clone()
        fused = model(ids).logits
        assert attn.qkv.shared is None and attn.qkv.refresh()[0].dtype is genesis.float64
        assert mlp.gate_up.refresh() is None
    np.testing.assert_allclose(to_numpy(fused), to_numpy(model(ids).logits), atol=1e-9,
                               rtol=0)


def test_moe_experts_are_slabs_of_stacked_weights(tmp_path):
    """A no-grad decode step gathers the routed experts' weight slabs from two stacked
    buffers that every expert's gate/up/down parameters are views of: in-place edits show at
    once, ``to()`` shares them again, and a weight given memory of its own by hand is shared
    again on the next step; the logits stay the grouped (grad-mode) path's."""
    make_checkpoint("qwen3_moe", tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = genesis.tensor([[3, 1, 4, 1, 5]])
    block = next(m for m in model.modules() if isinstance(m, SparseMoeBlock))
    gate_up, down = block.stacked
    inter = down.shape[-1]
    last = block.experts[-1]
    assert last.up_proj.weight.data_ptr() == gate_up[-1, inter:].data_ptr()
    assert last.down_proj.weight.data_ptr() == down[-1].data_ptr()
    assert last.gate_up.refresh()[0].data_ptr() == gate_up[-1].data_ptr()

    def routed_matches_grouped(atol):
        with genesis.no_grad():
            routed = model(ids).logits
        grouped = model(ids).logits  # grad mode: each expert on its tokens
        np.testing.assert_allclose(to_numpy(routed), to_numpy(grouped), atol=atol, rtol=0)

    with genesis.no_grad():
        for expert in block.experts:
            expert.down_proj.weight.mul_(3.0)
    assert block.stacked[0] is gate_up
    routed_matches_grouped(1e-5)
    params = list(model.parameters())
    model.to(genesis.float64)
    assert all(a is b for a, b in zip(model.parameters(), params))  # the same objects
    gate_up, down = block.stacked
    assert gate_up.dtype is genesis.float64
    assert block.experts[1].gate_proj.weight.data_ptr() == gate_up[1].data_ptr()
    with genesis.no_grad():
        last.up_proj.weight.data = last.up_proj.weight.detach().clone() * 2.0
    routed_matches_grouped(1e-9)
    assert block.stacked[0] is not gate_up  # shared again, with the new values
    assert last.up_proj.weight.data_ptr() == block.stacked[0][-1, inter:].data_ptr()
