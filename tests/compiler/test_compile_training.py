"""A short AdamW training loop: a compiled model trains exactly as the eager one."""

from __future__ import annotations

import warnings

import pytest
from tool_script import load_tool

import genesis
import genesis.nn as nn
import genesis.nn.functional as F


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 32, dim: int = 16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.norm = nn.RMSNorm(dim)
        self.fc = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(2 * dim, vocab)
        self.drop = nn.Dropout(0.1)

    calls = 0  # how often the Python forward ran

    def forward(self, tokens):
        TinyLM.calls += 1
        h = self.norm(self.emb(tokens))                   # (B, S, D)
        h = self.drop(F.gelu(self.fc(h)))                 # (B, S, 2D)
        return self.out(h)                                # (B, S, V)


def train(compile_model: bool, steps: int = 6, autocast: bool = False) -> list[float]:
    genesis.manual_seed(0)
    TinyLM.calls = 0
    model = TinyLM()
    run = genesis.compile(model) if compile_model else model
    opt = genesis.optim.AdamW(model.parameters(), lr=1e-2)
    tokens = genesis.randint(0, 32, (4, 9))
    losses = []
    for _ in range(steps):
        with genesis.autocast("cpu", dtype=genesis.bfloat16, enabled=autocast):
            logits = run(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, 32).float(), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    if compile_model:  # the step replayed a traced forward and backward, not eager autograd
        assert all(entry.plan is not None for entry in run._entries.values())
        assert TinyLM.calls == 1  # traced once, replayed on every later step
    return losses


def test_cross_entropy_rows_backward_is_one_node():
    logits = genesis.randn(6, 5, requires_grad=True)
    target = genesis.tensor([0, 1, 2, 3, 4, 0])
    compiled = genesis.compile(lambda z: F.cross_entropy(z.bfloat16(), target))
    compiled(logits).backward()
    (entry,) = compiled._entries.values()
    ops = [n.op for n in entry.plan.backward_graph.nodes]
    assert "cross_entropy_rows_backward" in ops  # a fused backward kernel: a whole node
    saved = [v for n in entry.plan.forward_graph.nodes for v in n.saved if v is not None]
    assert saved and saved[0] in entry.plan.forward_graph.outputs  # its logsumexp is saved
    g = logits.grad.clone()
    logits.grad = None
    compiled(logits).backward()
    close_to = (logits.grad - g).abs().max().item()
    assert close_to == 0.0


def test_adamw_losses_equal_eager():
    eager, compiled = train(False), train(True)
    assert eager == compiled  # same ops, same order, same random draws: bit for bit
    assert compiled[-1] < compiled[0]


def test_adamw_losses_equal_eager_under_bf16_autocast():
    eager, compiled = train(False, autocast=True), train(True, autocast=True)
    assert eager == compiled


def test_the_benchmark_decoder_trains_exactly_as_eager():
    """tools/bench/decoder.py's model (RoPE, fused attention, tied head, clip, AdamW)."""
    bench = load_tool("tools/bench/train.py", "bench_train_compile")
    decoder = load_tool("tools/bench/decoder.py", "bench_decoder")
    cfg, seq = decoder.MODELS["tiny"], 16
    weights = decoder.init_weights(cfg, seq, 0)
    lib = bench.import_framework("genesis")
    batches = [(genesis.randint(0, cfg.vocab, (2, seq)), genesis.randint(0, cfg.vocab, (2, seq)))
               for _ in range(3)]

    def losses(compiled: bool) -> list[float]:
        model = bench.load_model(lib, cfg, weights, seq, "cpu")
        run = genesis.compile(model) if compiled else model
        opt = genesis.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
        out = []
        for x, y in batches * 2:
            with genesis.autocast("cpu", dtype=genesis.bfloat16):
                loss = run(x, y)
            loss.backward()
            genesis.nn.utils.clip_grad_norm_(list(model.parameters()), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            out.append(loss.item())
        return out

    assert losses(True) == losses(False)


def test_compiled_optimizer_step_matches_eager():
    """``genesis.compile(opt.step)``: a host step count or a new lr is a guard (never a stale
    constant); with ``capturable=True`` the step count is a tensor and one trace serves."""

    def weights(compile_step: bool, **options):
        genesis.manual_seed(0)
        model = nn.Linear(4, 2)
        opt = genesis.optim.AdamW(model.parameters(), lr=1e-2, **options)
        step = genesis.compile(opt.step) if compile_step else opt.step
        x = genesis.randn(8, 4)
        for i in range(10):
            if i == 5:
                opt.param_groups[0]["lr"] = 5e-3  # as a scheduler would
            model(x).pow(2).mean().backward()
            step()
            opt.zero_grad(set_to_none=False)
        return model.weight.detach(), step

    for options in ({"foreach": False}, {"capturable": True}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (a host step count: past 8 traces, eager)
            got, step = weights(True, **options)
        want, _ = weights(False, **options)
        assert (got - want).abs().max().item() == 0.0
    assert len(step._entries) == 3  # capturable: the first step (making the state), then
    # one trace per lr


def test_a_compiled_qwen_model_trains_exactly_as_eager():
    models = pytest.importorskip("genesis.models")
    config = models.Qwen2Config(vocab_size=128, hidden_size=32, intermediate_size=64,
                                num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=2, tie_word_embeddings=True)

    def losses(compiled: bool) -> list[float]:
        genesis.manual_seed(0)
        model = models.AutoModelForCausalLM.from_config(config)
        run = genesis.compile(model) if compiled else model
        opt = genesis.optim.AdamW(model.parameters(), lr=1e-3)
        ids = genesis.randint(0, 128, (2, 12))
        out = []
        for _ in range(4):
            loss = run(ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            out.append(loss.item())
        if compiled:  # one trace, its backward compiled too
            assert [e.plan is not None for e in run._entries.values()] == [True]
        return out

    assert losses(True) == losses(False)
