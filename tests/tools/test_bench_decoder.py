"""``tools/bench/decoder.py``: the benchmarks' decoder and its FLOP count."""

from __future__ import annotations

from tool_script import load_tool


def test_flops_count_matches_parameter_count():
    decoder = load_tool("tools/bench/decoder.py", "bench_decoder")
    cfg = decoder.MODELS["qwen2.5-0.5b"]
    weights_n = 494_032_768  # Qwen2.5-0.5B's published parameter count (tied embeddings)
    attn_bias = cfg.layers * cfg.head_dim * (cfg.q_heads + 2 * cfg.kv_heads)
    norms = (2 * cfg.layers + 1) * cfg.dim
    # every parameter but the norms and biases sits in a matmul (the tied embedding once)
    assert decoder.matmul_params(cfg) == weights_n - attn_bias - norms
