#!/usr/bin/env bash
# Before/after timing on the GPU machine, alternated in one call (timing there moves between
# calls, so A and B are only compared within one). Run from the repository root there, after
# `source tools/device/setup.sh`:
#
#   bash tools/device/ab.sh OUTDIR A_TREE [ROUNDS] [WHAT]
#
# A_TREE is a copy of an older commit's packages/ and tools/ (here:
# `mkdir -p .ab/A && git archive COMMIT packages tools | tar -x -C .ab/A`, carried with the
# working tree); B is the working tree itself. Each round runs A then B (odd rounds) or B then
# A (even rounds) for each of WHAT (default "train overhead"):
#   train:    tools/bench/train.py --model 0.2b, torch beside genesis eager, 10 timed steps
#             (the working tree's script for both: the eager step is the same code in A's,
#             and the working tree's also reports the host time per kernel launch);
#   overhead: tools/bench/overhead.py --device cuda and --device cpu, --no-stages (the working
#             tree's script for both: its rows use the public API only), --clock $CLOCK
#             (default wall; CLOCK=cpu counts the thread's CPU time only);
#   step:     tools/bench/host_step.py (the tiny training step's host time per phase, CPU).
# A runs with A_TREE's packages first on PYTHONPATH and A_TREE's host_step.py.
# Results go
# to OUTDIR/{train,overhead_cuda,overhead_cpu,step}_{A,B}_ROUND.json; tools/device/ab_summary.py
# prints medians and ranges.
set -uo pipefail
out=${1:?output folder}
a_tree=${2:?tree of the older commit}
rounds=${3:-2}
what=${4:-train overhead}
mkdir -p "$out"
a_path=$(ls -d "$a_tree"/packages/*/src | tr '\n' ':')

run_one() {  # version round
    local v=$1 r=$2 tree=. pp=$PYTHONPATH
    if [ "$v" = A ]; then tree=$a_tree pp=$a_path$PYTHONPATH; fi
    for w in $what; do
        if [ "$w" = train ]; then
            PYTHONPATH=$pp python3 tools/bench/train.py --model 0.2b --steps 10 \
                --warmup 3 --frameworks torch,genesis --out "$out/train_${v}_$r.json" \
                | tail -n 12
        elif [ "$w" = overhead ]; then
            for dev in cuda cpu; do
                PYTHONPATH=$pp python3 tools/bench/overhead.py --device $dev --no-stages \
                    --clock "${CLOCK:-wall}" --json "$out/overhead_${dev}_${v}_$r.json" \
                    | tail -n 14
            done
        elif [ "$w" = step ]; then
            PYTHONPATH=$pp python3 "$tree/tools/bench/host_step.py" \
                --json "$out/step_${v}_$r.json" | tail -n 7
        fi
    done
}

for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) = 1 ]; then order="A B"; else order="B A"; fi
    for v in $order; do
        echo "== round $r: $v"
        run_one "$v" "$r"
    done
done
python3 tools/device/ab_summary.py "$out"
