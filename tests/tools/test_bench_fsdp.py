"""``tools/bench/fsdp.py`` on the CPU at the tiny size, a world of one (Gloo): both
frameworks build the same sharded weights (and DDP the same whole ones) and train (no timing
asserts)."""

from __future__ import annotations

import json
import socket

import numpy as np
from tool_script import load_tool


def _load_bench():
    return load_tool("tools/bench/fsdp.py", "bench_fsdp")


def _world_of_one(monkeypatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                           MASTER_PORT=str(port)).items():
        monkeypatch.setenv(key, value)


def test_arguments_default_to_the_7b_shape():
    bench = _load_bench()
    args = bench.parse_args([])
    assert (args.model, args.batch, args.seq) == ("qwen2.5-7b", 1, 2048)
    cfg = bench.MODELS["qwen2.5-7b"]
    params = (cfg.vocab * cfg.dim * 2 + cfg.layers * (
        cfg.dim * cfg.head_dim * (2 * cfg.q_heads + 2 * cfg.kv_heads) + 3 * cfg.dim * cfg.ffn
        + 2 * cfg.dim + cfg.head_dim * (cfg.q_heads + 2 * cfg.kv_heads)) + cfg.dim)
    assert 7.6e9 < params < 7.7e9  # Qwen2.5-7B has 7.62 B parameters


def test_both_frameworks_shard_the_same_weights(monkeypatch):
    bench = _load_bench()
    _world_of_one(monkeypatch)
    _, dist, _, tdist, _ = bench.ddp.setup("cpu")
    try:
        cfg = bench.MODELS["tiny"]
        _, g, _, _ = bench.build("genesis", cfg, 16, "cpu", True)
        _, t, _, _ = bench.build("torch", cfg, 16, "cpu", True)
        _, d, _, _ = bench.build("genesis-ddp", cfg, 16, "cpu", True)
        gp, tp = dict(g.named_parameters()), dict(t.named_parameters())
        assert gp.keys() == tp.keys()
        dp = dict(d.module.named_parameters())
        for name in gp:
            np.testing.assert_array_equal(gp[name].to_local().detach().numpy(),
                                          tp[name].to_local().detach().numpy(), err_msg=name)
            np.testing.assert_array_equal(gp[name].to_local().detach().numpy(),
                                          dp[name].detach().numpy(), err_msg=name)
    finally:
        tdist.destroy_process_group()
        dist.destroy_process_group()


def test_tiny_cpu_run_writes_json(monkeypatch, tmp_path, capsys):
    bench = _load_bench()
    _world_of_one(monkeypatch)
    out = tmp_path / "fsdp.json"
    bench.main(["--device", "cpu", "--model", "tiny", "--seq", "16", "--steps", "1",
                "--warmup", "1", "--frameworks", "genesis,torch,genesis-ddp,torch-ddp",
                "--out", str(out)])
    report = json.loads(out.read_text())
    assert report["results"].keys() == {"genesis", "torch", "genesis-ddp", "torch-ddp"}
    for r in report["results"].values():
        assert len(r["losses"]) == 2 and r["tok_per_s"] > 0
        assert abs(r["losses"][0] - 5.55) < 0.1  # ln(vocab 256): random weights
    assert "genesis / torch tok/s" in capsys.readouterr().out


def test_profile_prints_phases_and_the_distributed_hooks(monkeypatch, tmp_path, capsys):
    bench = _load_bench()
    _world_of_one(monkeypatch)
    assert bench.MODELS["narrow-0.5b"].layers == bench.MODELS["qwen2.5-0.5b"].layers
    out = tmp_path / "fsdp.json"
    bench.main(["--device", "cpu", "--model", "tiny", "--seq", "16", "--steps", "2",
                "--warmup", "1", "--frameworks", "genesis", "--profile", "5",
                "--out", str(out)])
    phases = json.loads(out.read_text())["results"]["genesis"]["phase_host_ms"]
    assert phases.keys() == {"forward", "backward", "clip", "optimizer"}
    assert all(v > 0 for v in phases.values())
    printed = capsys.readouterr().out
    assert "host ms: forward" in printed and "fsdp/fully_shard.py" in printed
