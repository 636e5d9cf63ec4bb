#!/usr/bin/env bash
# What the GPU machine checks, in one or two calls (see docs/developing.md). Run from the
# repository root there:  bash tools/device/gpu_suite.sh tests|bench OUTDIR
#   tests: every test that needs a GPU (markers cuda, multigpu), then a compute-sanitizer
#          memcheck pass over a subset of the GPU tests.
#   bench: tools/bench/{ops,memory,overhead}.py, genesis vs torch in the same run.
# Logs and results land in OUTDIR.
set -uo pipefail
what=${1:?tests or bench}
out=${2:?output folder}
mkdir -p "$out"
source tools/device/setup.sh || exit 1
nvidia-smi -L | tee "$out/gpu.txt"

if [ "$what" = tests ]; then
    # The GPU tests, split round-robin into parallel shards (Triton compiles dominate).
    shards=${SHARDS:-8}
    python3 -m pytest -q -p no:cacheprovider --collect-only -m "cuda or multigpu" tests \
        | grep "::" > "$out/gpu_tests.ids"
    split -n r/"$shards" -d "$out/gpu_tests.ids" "$out/shard."
    for f in "$out"/shard.*; do
        python3 -m pytest -q -p no:cacheprovider -m "cuda or multigpu" $(cat "$f") \
            > "$f.log" 2>&1 &
    done
    wait
    for f in "$out"/shard.*.log; do tail -n 1 "$f"; done | tee "$out/gpu_tests_summary.txt"
    grep -h "^FAILED\|^ERROR" "$out"/shard.*.log | tee "$out/gpu_tests_failures.txt" | head -n 40
    compute-sanitizer --tool memcheck --print-limit 20 \
        python3 -m pytest -q -p no:cacheprovider -m cuda -x \
        tests/cuda/test_runtime.py tests/cuda/test_kernels_layout.py 2>&1 \
        | tee "$out/sanitizer.log" | tail -n 8
elif [ "$what" = bench ]; then
    python3 tools/bench/ops.py --out "$out" 2>&1 | tee "$out/ops.log"
    python3 tools/bench/memory.py --out "$out/memory.json" 2>&1 | tee "$out/memory.log"
    python3 tools/bench/overhead.py --device cuda --json "$out/overhead_cuda.json" 2>&1 \
        | tee "$out/overhead_cuda.log"
    python3 tools/bench/overhead.py --device cpu --json "$out/overhead_cpu.json" 2>&1 \
        | tee "$out/overhead_cpu.log"
fi
