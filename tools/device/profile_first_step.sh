#!/usr/bin/env bash
# Where genesis.compile's first step (tracing, code generation, Triton compilation, capture)
# spends its time: train.py --compile for genesis alone, once plain and once under cProfile
# (first step only), on the GPU machine. Usage: bash tools/device/profile_first_step.sh OUT
set -uo pipefail
out=${1:?output folder}
source tools/device/setup.sh || exit 1
rm -rf ~/.triton/cache ~/.cache/genesis/compile  # cold: no Triton or genesis kernel cache
python3 tools/bench/train.py --model 0.2b --steps 5 --warmup 2 --compile \
    --frameworks genesis 2>&1 | grep -v Warning | tee "$out/plain.txt" | tail -n 12
rm -rf ~/.triton/cache ~/.cache/genesis/compile  # cold again
python3 -m cProfile -o "$out/first_step.prof" tools/bench/train.py --model 0.2b --steps 1 \
    --warmup 1 --compile --frameworks genesis > "$out/profiled.txt" 2>&1
python3 - "$out/first_step.prof" <<'PY' | tee "$out/first_step_top.txt"
import pstats, sys
s = pstats.Stats(sys.argv[1])
s.sort_stats("cumulative").print_stats(45)
s.sort_stats("tottime").print_stats(25)
PY
