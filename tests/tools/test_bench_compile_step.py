"""``tools/bench/compile_step.py`` runs on the CPU at toy size: eager against compiled,
alternated rounds, CPU clock (the figures are the benchmark's, not asserted here)."""

from __future__ import annotations

from tool_script import load_tool

import genesis


def test_compile_step_bench_tiny_cpu(capsys):
    bench = load_tool("tools/bench/compile_step.py", "bench_compile_step")
    threads = genesis.get_num_threads()
    try:
        bench.main(["--device", "cpu", "--batch", "1", "--seq", "8", "--dim", "16",
                    "--heads", "2", "--iters", "2", "--rounds", "2", "--no-autocast",
                    "--clock", "cpu", "--threads", "1"])
    finally:
        genesis.set_num_threads(threads)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["mode", "step"] and "(cpu clock, 2 round(s) of 2 steps)" \
        in lines[0]
    assert [line.split()[0] for line in lines[1:]] == ["eager", "compiled"]
    assert lines[1].split()[3] == "1.00"  # eager against itself
