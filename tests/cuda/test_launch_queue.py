"""Deferred kernel launches while genesis.compile traces (``kernels.launch_queue``), on the
null device without a GPU: Triton's compile-on-first-launch is emulated and logged
(``tests/support/null_device_launches.py``, run in a subprocess because it patches
genesis_cuda and Triton for the whole process). The GPU twin, with real values, is
``test_launch_queue_gpu.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support",
                      "null_device_launches.py")


def scenario(*args: str) -> dict:
    pytest.importorskip("triton")
    proc = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("body", ["elementwise", "matmul"])
def test_deferred_launches_keep_eager_order_and_compile_off_this_thread(body):
    eager = scenario("eager", body)
    deferred = scenario("deferred", body)
    # eagerly, every new kernel compiles in this thread at its first launch
    assert eager["compiles"] and {c[2] for c in eager["compiles"]} == {"MainThread"}
    # deferred: the same launches in the same order, no compilation at a launch: all of
    # them went to compile_jobs (worker processes on a GPU machine), in batches
    assert deferred["launches"] == eager["launches"]
    assert deferred["compiles"] == []
    compiled = sorted(k for batch in deferred["batches"] for k in batch)
    candidates = ["_mm_kernel"] * 3 if body == "matmul" else []  # the tuner's: batched anyway
    assert compiled == sorted([c[1] for c in eager["compiles"]] + candidates)
    # nothing inside needed the device (a new matmul bucket's timing waits in the queue
    # too): everything compiles in one batch, when the trace ends
    assert deferred["launches_inside"] == []
    assert sorted(deferred["batches"][0]) == compiled
    assert not any(deferred["batches"][1:])  # (the tuner's own batch: nothing left to do)
    if body == "elementwise":
        assert deferred["deferred"] == len(eager["launches"])


def test_a_driver_call_launches_what_waits_first():
    res = scenario("driver_flush")
    assert res["before"] == []  # x.neg() waits for its kernel's compilation
    assert res["after_sync"] == ["_ew_flat"]  # synchronize() made it first
    assert res["inside"] == ["_ew_flat"]  # x.abs() (a new kernel) waits again
    assert res["launches"] == ["_ew_flat", "_ew_flat"]  # leaving the trace made it
    assert len(res["batches"]) == 2


def test_compile_compiles_the_traces_eager_kernels_with_its_generated_ones():
    res = scenario("compile")
    # one batch: the trace's three eager kernels (mul, sin, add) and the fused kernel the
    # compiler generated for the graph; nothing compiled at a launch
    assert len(res["batches"]) == 1
    batch = res["batches"][0]
    assert batch.count("_ew_flat") == 3 and any(k.startswith("fused_") for k in batch)
    assert res["compiles"] == []
    assert res["launches"] == ["_ew_flat"] * 3  # the first call's eager results


def test_a_queued_launch_keeps_the_descriptor_it_was_given():
    pytest.importorskip("triton")
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    from genesis_cuda.kernels.launch_queue import LaunchQueue

    first, second = torch.zeros(16, 16), torch.ones(16, 16)  # (any array with a data_ptr)
    seen = []
    queue = LaunchQueue(collect=lambda calls: [], compile_jobs=lambda jobs: None)
    desc = TensorDescriptor(first, [16, 16], [16, 1], [16, 16])
    queue.defer(lambda d, n: seen.append((d.base, d.block_shape, n)), (desc, 3))
    desc.base, desc.block_shape = second, [8, 8]  # the plan re-points it
    queue.flush()
    assert len(seen) == 1 and seen[0][0] is first and seen[0][1:] == ([16, 16], 3)
    assert queue.items == []
