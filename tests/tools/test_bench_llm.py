"""``tools/bench/llm.py`` runs every section end to end on the CPU at toy sizes."""

from __future__ import annotations

import json
import math

import pytest
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
        c = m["train"]["genesis-compile"]
        for r in (g, t, c):
            assert len(r["losses"]) == 3 and r["tok_per_s"] > 0 and r["step_ms"] > 0
            assert r["mfu"] is None and r["peak_mem_gib"] is None  # GPU-only figures
            assert r["first_step_s"] > 0
        # the compiled model trains as the eager one (float32 rounding of the traced backward)
        assert c["losses"] == pytest.approx(g["losses"], rel=1e-4), name
        assert m["train"]["compile_ratios"]["tok_per_s_vs_eager"] > 0
        # Same checkpoint and tokens: the first losses (before any update) agree to bf16
        # rounding of the forward, near ln(vocab) = 6.24 for random weights; both are float32.
        assert abs(t["losses"][0] - math.log(512)) < 0.15, name
        assert abs(g["losses"][0] - t["losses"][0]) < 0.05, name
        assert m["train"]["ratios"]["tok_per_s"] > 0
    first = doc["models"]["qwen2.5-0.5b"]
    assert set(first["decode"]["genesis"]) == {"1", "2"}
    assert first["decode"]["ratios"]["genesis"]["2"] > 0
    compiled = first["decode"]["genesis-compile"]
    assert set(compiled) == {"1", "2"} and compiled["2"]["timed_traces"] == 0
    assert "genesis-compile" not in first["prefill"]  # the prefill is not compiled
    assert first["prefill"]["genesis"]["tok_per_s"] > 0 and first["prefill"]["ratio"] > 0
    assert "decode" not in doc["models"]["qwen3-0.6b"]  # decode and prefill: first model only
    assert "genesis / transformers" in capsys.readouterr().out
    table = (tmp_path / "llm.md").read_text().splitlines()
    # header; train rows of both models, eager and compiled; decode 1 and 2, eager and
    # compiled; the prefill
    assert len(table) == 2 + 4 + 4 + 1


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


def test_compiled_decode_runs_count_the_timed_calls_traces(tmp_path, capsys):
    """The compiled run's warm-up call traces the decode step that the timed calls replay:
    ``timed_traces`` 0, no genesis.compile warning (on the CPU: core's replay)."""
    import argparse

    llm = _load_llm()
    cfg = llm.model_config("qwen2.5-0.5b", tiny=True)
    path = str(tmp_path / "ckpt")
    llm.save_checkpoint(cfg, path, 0)
    args = argparse.Namespace(decode_batches=[2], seed=0, prompt=4, new_tokens=5,
                              decode_repeats=2, profile=False)
    fw = llm.Genesis("cpu", compiled=True)
    out = llm.bench_decode(fw, path, cfg, args)["2"]
    assert fw.traced_steps == 1  # the warm-up's first step, kept for the timed calls
    assert out["timed_traces"] == 0 and not out["compile_fallback"]
    assert "warning" not in capsys.readouterr().err


def test_a_failing_compiled_run_leaves_the_eager_rows(tmp_path, monkeypatch, capsys):
    """A failure of the compiled framework (here its training step raises) is recorded in the
    model's ``errors`` and printed; the eager rows and the table still come out."""
    llm = _load_llm()
    real = llm.bench_train

    def failing(fw, *args):
        if fw.name == "genesis-compile":
            raise RuntimeError("no kernel for this op")
        return real(fw, *args)

    failing.__name__ = "bench_train"
    monkeypatch.setattr(llm, "bench_train", failing)
    doc = llm.main(["--device", "cpu", "--tiny", "--models", "qwen2.5-0.5b", "--sections",
                    "train", "--batch", "1", "--seq", "16", "--steps", "1", "--warmup", "1"])
    m = doc["models"]["qwen2.5-0.5b"]
    assert set(m["train"]) >= {"genesis", "transformers"} and "genesis-compile" not in m["train"]
    assert m["errors"] == {"bench_train genesis-compile": "RuntimeError: no kernel for this op"}
    assert "failed: qwen2.5-0.5b bench_train genesis-compile" in capsys.readouterr().err
