"""``tools/bench/ops.py`` without a GPU: its command line, the report writers and the matmul
section's shape tables (the timed sections need CUDA and run on the device machine)."""

from __future__ import annotations

import json

from tool_script import load_tool


def _load(name):
    return load_tool(f"tools/bench/{name}.py", f"bench_{name}")


def test_plot_only_rewrites_the_section_report(tmp_path):
    ops = _load("ops")
    row = {"group": "matmul-decode", "name": "q_proj M=1 896->896", "dtype": "bfloat16",
           "shape": [1, 896, 896], "torch_ms": 0.004, "genesis_ms": 0.005, "ratio": 0.8,
           "target": 0.95, "genesis_TBps": 0.32, "torch_TBps": 0.4}
    doc = {"device": "test GPU", "torch": "x", "triton": "y", "copy_TBps": 3.0,
           "date": "today", "rows": [row]}
    (tmp_path / "matmul_training.json").write_text(json.dumps(doc))
    ops.main(["--matmul-training", "--plot-only", "--out", str(tmp_path)])
    md = (tmp_path / "matmul_training.md").read_text()
    assert "`python tools/bench/ops.py --matmul-training`" in md
    assert "| matmul-decode | q_proj M=1 896->896 | bfloat16 | 4.0 | 5.0 | 0.80 | >= 0.95 | NO |" \
        in md


def test_matmul_section_shapes():
    _load("ops")
    import ops_matmul

    linears = ops_matmul.qwen05_linears()
    assert [(i, o) for _, i, o, _ in linears] == [(896, 896), (896, 128), (896, 4864),
                                                   (4864, 896), (896, 151936)]
    # one decode step: 24 layers of q, k, v, o, gate, up, down, then lm_head
    assert sum(ops_matmul._PER_STEP.values()) == 24 * 7 + 1
    assert set(ops_matmul._PER_STEP) == {name for name, *_ in linears}
