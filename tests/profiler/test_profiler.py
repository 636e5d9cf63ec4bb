"""genesis.profiler: op counts, times, user ranges, the table, memory summary, no-op when off."""

from __future__ import annotations

import json

import pytest

import genesis
import genesis.profiler as profiler
from genesis import dispatch


def _workload():
    a = genesis.randn(32, 32, requires_grad=True)
    b = genesis.randn(32, 32)
    for _ in range(3):
        y = (a @ b).relu()
    loss = y.sum()
    loss.backward()
    return loss


def test_counts_and_times():
    with profiler.profile() as prof:
        _workload()
    rows = {r.key: r for r in prof.key_averages()}
    matmul = next(r for k, r in rows.items() if "matmul" in k.lower())
    assert matmul.count >= 3
    assert matmul.cpu_time_total > 0 and matmul.cpu_time_min <= matmul.cpu_time_max
    assert matmul.cpu_time == pytest.approx(matmul.cpu_time_total / matmul.count)
    total_events = sum(r.count for r in rows.values())
    assert total_events == len(prof.events())
    assert prof.total_time_us >= sum(r.self_cpu_time_total for r in rows.values()) * 0.999


def test_table_is_printable_sorted_and_limited():
    with profiler.profile() as prof:
        _workload()
    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=2)
    lines = table.splitlines()
    assert "Name" in lines[1] and "# of Calls" in lines[1] and "CPU total" in lines[1]
    body = lines[3:5]
    assert len(body) == 2 and lines[5].startswith("---")
    assert "Self CPU time total:" in table
    by_count = prof.key_averages().table(sort_by="count", row_limit=-1)
    counts = [int(line.split()[-1]) for line in by_count.splitlines()[3:]
              if line and not line.startswith(("-", "Self", "Memory", " "))]
    assert counts == sorted(counts, reverse=True) and len(counts) == len(prof.key_averages())
    with pytest.raises(ValueError, match="sort_by"):
        prof.key_averages().table(sort_by="bogus")


def test_record_function_and_self_time():
    with profiler.profile() as prof:
        with profiler.record_function("my_block"):
            x = genesis.randn(16, 16)
            for _ in range(4):
                x = x + 1.0
    rows = {r.key: r for r in prof.key_averages()}
    block = rows["my_block"]
    assert block.count == 1
    inner = sum(r.cpu_time_total for k, r in rows.items() if k != "my_block")
    assert block.cpu_time_total >= inner
    assert block.self_cpu_time_total == pytest.approx(block.cpu_time_total - inner, abs=1.0)


def test_no_observer_left_behind_and_disabled_profile():
    before = list(dispatch._modes)
    with profiler.profile(enabled=False) as prof:
        genesis.randn(4) + 1
    assert len(prof.events()) == 0
    with pytest.raises(RuntimeError):
        with profiler.profile():
            raise RuntimeError("boom")
    assert dispatch._modes == before


def test_memory_summary_and_chrome_trace(tmp_path):
    with profiler.profile(profile_memory=True) as prof:
        _workload()
    summary = prof.memory_summary()
    assert isinstance(summary, dict)  # one entry per loaded accelerator (none on the CPU)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    assert len(trace["traceEvents"]) == len(prof.events())


def test_a_failed_trace_export_leaves_the_previous_trace(tmp_path, monkeypatch):
    """The export writes beside the file and renames: a writer that fails half-way (here a
    disk that fills) leaves the old trace whole and no temporary behind."""
    import genesis.profiler.profiler as profiler_module

    with profiler.profile() as prof:
        genesis.ones(3).exp()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    before = path.read_bytes()
    real_dump = json.dump

    def disk_fills(obj, f, **kw):
        text = json.dumps(obj, **kw)
        f.write(text[: len(text) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(profiler_module.json, "dump", disk_fills)
    with pytest.raises(OSError, match="No space left"):
        prof.export_chrome_trace(path)
    monkeypatch.setattr(profiler_module.json, "dump", real_dump)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]


def test_memory_lines_format():
    from genesis.profiler.profiler import _memory_lines

    lines = _memory_lines({"cuda:0": (
        {"allocated_bytes.all.current": 1024, "num_allocs": 1, "allocation.all.allocated": 1},
        {"allocated_bytes.all.current": 3 * 1024 * 1024, "num_allocs": 5,
         "allocation.all.allocated": 5})})
    text = "\n".join(lines)
    assert "Memory summary (cuda:0)" in text and "3.00MiB" in text and "+3.00MiB" in text
    count_line = next(line for line in lines if "allocation.all.allocated" in line)
    assert "B" not in count_line.split("allocated", 1)[1]  # a count, not bytes


@pytest.mark.cuda
def test_device_time_on_cuda():
    with profiler.profile(sync_device=True) as prof:
        a = genesis.randn(256, 256, device="cuda")
        (a @ a).sum()
    table = prof.key_averages().table(sort_by="device_time_total")
    assert "Device total" in table
    assert any(r.device_time_total > 0 for r in prof.key_averages())
    assert prof.memory_summary()  # the CUDA backend reports allocator statistics
