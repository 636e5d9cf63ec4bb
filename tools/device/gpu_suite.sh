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
    python3 -m pytest -q -p no:cacheprovider -m "cuda or multigpu" tests 2>&1 \
        | tee "$out/gpu_tests.log" | tail -n 25
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
