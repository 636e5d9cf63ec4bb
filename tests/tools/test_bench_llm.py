"""``tools/bench/llm.py`` runs every section end to end on the CPU at toy sizes."""

from __future__ import annotations

import json
import math

from tool_script import load_tool


def _load_llm():
    return load_tool("tools/bench/llm.py", "bench_llm")


def test_llm_bench_tiny_cpu(tmp_path, capsys):
    llm = _load_llm()
    out = tmp_path / "llm.json"
    doc = llm.main(["--device", "cpu", "--tiny", "--batch", "2", "--seq", "32", "--steps", "2",
                    "--warmup", "1", "--decode-batches", "1,2", "--prompt", "4",
                    "--new-tokens", "6", "--prefill", "48", "--decode-repeats", "1",
                    "--prefill-repeats", "2", "--out", str(out)])
    assert json.loads(out.read_text())["models"].keys() == {"qwen2.5-0.5b", "qwen3-0.6b"}
    for name, m in doc["models"].items():
        g, t = m["train"]["genesis"], m["train"]["transformers"]
        for r in (g, t):
            assert len(r["losses"]) == 3 and r["tok_per_s"] > 0 and r["step_ms"] > 0
            assert r["mfu"] is None and r["peak_mem_gib"] is None  # GPU-only figures
        # Same checkpoint and tokens: the first losses (before any update) agree to bf16
        # rounding of the forward, near ln(vocab) = 6.24 for random weights; both are float32.
        assert abs(t["losses"][0] - math.log(512)) < 0.15, name
        assert abs(g["losses"][0] - t["losses"][0]) < 0.05, name
        assert m["train"]["ratios"]["tok_per_s"] > 0
    first = doc["models"]["qwen2.5-0.5b"]
    assert set(first["decode"]["genesis"]) == {"1", "2"}
    assert first["decode"]["ratios"]["genesis"]["2"] > 0
    assert first["prefill"]["genesis"]["tok_per_s"] > 0 and first["prefill"]["ratio"] > 0
    assert "decode" not in doc["models"]["qwen3-0.6b"]  # decode and prefill: first model only
    assert "genesis / transformers" in capsys.readouterr().out
    table = (tmp_path / "llm.md").read_text().splitlines()
    assert len(table) == 2 + 2 + 2 + 1  # header, two train rows, decode 1 and 2, prefill


def test_configs_match_published_parameter_counts():
    llm = _load_llm()
    import torch
    import transformers

    # Published sizes: Qwen2.5-0.5B 494,032,768 and Qwen3-0.6B 596,049,920 (tied embeddings).
    for name, want in (("qwen2.5-0.5b", 494_032_768), ("qwen3-0.6b", 596_049_920)):
        cfg = llm.model_config(name, tiny=False)
        kwargs = {k: v for k, v in cfg.items() if k != "model_type"}
        config = transformers.AutoConfig.for_model(cfg["model_type"], **kwargs)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
        assert sum(p.numel() for p in model.parameters()) == want, name


def test_graphed_decode_runs_count_the_timed_calls_captures(tmp_path, monkeypatch, capsys):
    """The graph run's warm-up call makes the decode step that the timed calls reuse:
    ``timed_captures`` 0 (the capture itself needs a GPU; here the graph API is genesis.cuda
    with a capture that refuses, so each new decode step would try once and warn)."""
    import argparse

    import genesis
    from genesis.models import generation

    llm = _load_llm()
    tries = []

    def refuse(graph):
        tries.append(graph)
        raise genesis.cuda.GraphCaptureError("no GPU here")

    monkeypatch.setattr(genesis.cuda, "graph", refuse)
    monkeypatch.setattr(generation, "_graph_api", lambda device: genesis.cuda)
    cfg = llm.model_config("qwen2.5-0.5b", tiny=True)
    path = str(tmp_path / "ckpt")
    llm.save_checkpoint(cfg, path, 0)
    args = argparse.Namespace(decode_batches=[2], seed=0, prompt=4, new_tokens=5,
                              decode_repeats=2, profile=False)
    fw = llm.Genesis("cpu", graph=True)
    out = llm.bench_decode(fw, path, cfg, args)["2"]
    assert len(tries) == 1 and fw.captures == 1  # the warm-up's, kept for the timed calls
    assert out["timed_captures"] == 0 and out["graph_fallback"]
    assert genesis.cuda.graph is refuse  # the bench's counter is removed after each call
