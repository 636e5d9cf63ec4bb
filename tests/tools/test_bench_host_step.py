"""``tools/bench/host_step.py`` times every phase of a tiny training step under both
frameworks and counts the kernels each phase reaches."""

from __future__ import annotations

import json

from tool_script import load_tool


def test_host_step_reports_every_phase(tmp_path, capsys):
    mod = load_tool("tools/bench/host_step.py", "bench_host_step")
    out = tmp_path / "host.json"
    res = mod.main(["--steps", "2", "--seq", "8", "--json", str(out)])
    assert json.loads(out.read_text()).keys() == {"genesis", "torch", "total"}
    for name in ("genesis", "torch"):
        assert set(res[name]) == set(mod.PHASES)
        assert all(res[name][ph]["us"] > 0 for ph in mod.PHASES)
        # forward and backward run kernels; the totals add the phases up
        assert res[name]["forward"]["kernels"] > 0 and res[name]["backward"]["kernels"] > 0
        assert res["total"][name]["kernels"] == sum(res[name][ph]["kernels"]
                                                    for ph in mod.PHASES)
    assert "µs/k" in capsys.readouterr().out
