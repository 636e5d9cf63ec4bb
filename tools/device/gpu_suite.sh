#!/usr/bin/env bash
# What the GPU machine checks, in one or two calls (see docs/developing.md). Run from the
# repository root there:  bash tools/device/gpu_suite.sh tests|bench|train|multigpu OUTDIR [GPU]
#   tests: every test that needs a GPU (markers cuda, multigpu) in parallel shards, then a
#          compute-sanitizer memcheck pass over a subset of the GPU tests. SHARDS sets the
#          number of shards (default 8); GPUS=2 spreads them over two GPUs, one GPU a shard.
#   bench: tools/bench/{ops,memory,overhead}.py, genesis vs torch in the same run.
#   train: the end-to-end figures: tools/bench/train.py (eager and graph), tools/bench/llm.py
#          (training, decode, prefill against transformers; eager and compiled),
#          tools/bench/sft_compile.py (genesis-sft --compile against eager; the Qwen2.5
#          and the Qwen3 shape, whose q/k norms run under bf16 autocast) and the
#          fused-kernel rows of ops.py; GPU (h100 or h200, default h200) picks the peak
#          FLOP/s behind MFU.
#   multigpu: on a two-GPU kind (nvidia-h200-x2): the multigpu tests, tools/bench/ddp.py on
#          one GPU then on two under torchrun, and genesis-sft on one GPU against two ranks
#          with the same global batch (tools/bench/sft_ranks.py).
#   fsdp:  on a two-GPU kind: the FSDP multigpu tests, tools/bench/fsdp.py on two GPUs (7B
#          shape; 0.5B shape beside DDP), genesis-sft --fsdp on two ranks (stopped at step
#          20, resumed) against one GPU, and the second device's allocator test under
#          compute-sanitizer (issue 32's two-GPU re-run).
# OUTDIR receives a handful of files (logs and results); scratch goes to /tmp/gpu_suite.
set -uo pipefail
what=${1:?tests, bench, train, multigpu or fsdp}
out=${2:?output folder}
gpu=${3:-h200}
work=/tmp/gpu_suite
mkdir -p "$out" "$work"
source tools/device/setup.sh || exit 1
nvidia-smi -L | tee "$out/gpu.txt"

if [ "$what" = tests ]; then
    shards=${SHARDS:-8}  # Triton compiles dominate: run shards side by side
    # tests that assert on measured GPU time run alone afterwards: beside the other shards'
    # kernels on the same GPU they measure the sharing, not the code
    shard_marks="(cuda or multigpu) and not gpu_timing"
    python3 -m pytest -q -p no:cacheprovider --collect-only -m "$shard_marks" tests \
        | grep "::" > "$work/ids"
    split -n r/"$shards" -d "$work/ids" "$work/shard."
    gpus=${GPUS:-1}  # GPUS=2 on a two-GPU kind: shard k sees GPU k % 2 alone (its
    k=0              # multigpu tests then skip: run `-m multigpu` on its own)
    for f in "$work"/shard.??; do
        mapfile -t ids < "$f"  # one id a line; ids may hold spaces
        one_gpu=()
        [ "$gpus" -gt 1 ] && one_gpu=(env CUDA_VISIBLE_DEVICES=$((k % gpus)))
        "${one_gpu[@]}" python3 -m pytest -q -p no:cacheprovider -m "$shard_marks" \
            "${ids[@]}" > "$f.log" 2>&1 &
        k=$((k + 1))
    done
    wait
    python3 -m pytest -q -p no:cacheprovider -m "cuda and gpu_timing" tests \
        > "$work/shard.timing.log" 2>&1
    cat "$work"/shard.??.log "$work/shard.timing.log" > "$out/gpu_tests.log"
    { echo "shard summaries:"
      for f in "$work"/shard.??.log "$work/shard.timing.log"; do tail -n 1 "$f"; done
      echo "failures:"; grep -h "^FAILED\|^ERROR" "$work"/shard.??.log "$work/shard.timing.log"; } \
        | tee "$out/gpu_tests_summary.txt" | head -n 60
    compute-sanitizer --tool memcheck --print-limit 20 \
        python3 -m pytest -q -p no:cacheprovider -m cuda -x \
        tests/cuda/test_runtime.py tests/cuda/test_kernels_layout.py 2>&1 \
        | tee "$out/sanitizer.log" | tail -n 8
elif [ "$what" = bench ]; then
    {
        python3 tools/bench/ops.py --out "$out"
        python3 tools/bench/memory.py --out "$out/memory.json"
        python3 tools/bench/overhead.py --device cuda --json "$out/overhead_cuda.json"
        python3 tools/bench/overhead.py --device cpu --json "$out/overhead_cpu.json"
    } 2>&1 | tee "$out/bench.log"
elif [ "$what" = train ]; then
    res="$work/results"  # the JSON/markdown results, returned as one archive
    rm -rf "$res" && mkdir -p "$res"
    {
        for model in 0.2b qwen2.5-0.5b; do
            python3 tools/bench/train.py --model $model --steps 10 --warmup 3 --gpu "$gpu" \
                --out "$res/train_$model.json"
            python3 tools/bench/train.py --model $model --steps 10 --warmup 3 --gpu "$gpu" \
                --frameworks genesis --graph --out "$res/train_${model}_graph.json"
        done
        python3 tools/bench/llm.py --gpu "$gpu" --out "$res/llm.json"
        python3 tools/bench/sft_compile.py --out "$res/sft_compile.json"
        python3 tools/bench/sft_compile.py --shape qwen3-0.6b --out "$res/sft_compile_qwen3.json"
        python3 tools/bench/ops.py --only-llm --out "$res"
        python3 tools/bench/ops.py --attention-only --out "$res"
        python3 tools/bench/ops.py --matmul-training --out "$res"
    } 2>&1 | tee "$out/train.log"
    tar czf "$out/train_results.tgz" -C "$work" results
elif [ "$what" = multigpu ]; then
    {
        timeout 200 python3 -m pytest -q -p no:cacheprovider -m multigpu tests
        sft=$work/sft
        rm -rf "$sft" && python3 tools/bench/sft_ranks.py make "$sft"
        args=(--model "$sft/base" --data "$sft/train.jsonl" --max-steps 30 --lr 1e-3
              --warmup-steps 5 --seq-len 64 --device cuda --no-progress --no-plot
              --eval-fraction 0.05 --eval-every 10)
        timeout 100 python3 -m genesis.models.apps.sft_cli "${args[@]}" --out "$sft/one" \
            --batch-size 8 | tail -n 2
        timeout 120 torchrun --nproc_per_node=2 -m genesis.models.apps.sft_cli "${args[@]}" \
            --out "$sft/two" --batch-size 4 | tail -n 2
        python3 tools/bench/sft_ranks.py compare "$sft"
        timeout 170 python3 tools/bench/ddp.py --out "$out/ddp_1gpu.json"
        timeout 200 torchrun --nproc_per_node=2 tools/bench/ddp.py --out "$out/ddp_2gpu.json"
    } 2>&1 | tee "$out/multigpu.log"
elif [ "$what" = fsdp ]; then
    # issue 34's run, on a two-GPU kind: the FSDP multigpu tests, tools/bench/fsdp.py (7B
    # shape; 0.5B shape against DDP) and genesis-sft --fsdp on two ranks (stopped, resumed)
    # against one GPU with the same global batch
    {
        # (five tests, each starting ranks that compile cold: 180 s cut the last one)
        timeout 300 python3 -m pytest -q -p no:cacheprovider -m multigpu --durations=0 \
            tests/distributed/test_fsdp_nccl.py tests/llm/test_apps_sft_fsdp.py
        # (--memory-report: what genesis's forward and backward peaks are made of; --profile:
        # where the 0.5B step's host time goes, rank 0's top functions)
        timeout 150 torchrun --nproc_per_node=2 tools/bench/fsdp.py --gpu "$gpu" \
            --memory-report 8 --out "$out/fsdp_7b_2gpu.json"
        timeout 150 torchrun --nproc_per_node=2 tools/bench/fsdp.py --model qwen2.5-0.5b \
            --frameworks genesis,torch,genesis-ddp --gpu "$gpu" --profile 25 \
            --out "$out/fsdp_0.5b_2gpu.json"
        sft=$work/sft
        rm -rf "$sft" && python3 tools/bench/sft_ranks.py make "$sft"
        args=(--model "$sft/base" --data "$sft/train.jsonl" --max-steps 30 --lr 1e-3
              --warmup-steps 5 --seq-len 64 --device cuda --no-progress --no-plot
              --eval-fraction 0.05 --eval-every 10 --save-every 10)
        timeout 50 python3 -m genesis.models.apps.sft_cli "${args[@]}" --out "$sft/one" \
            --batch-size 8 | tail -n 2
        timeout 50 torchrun --nproc_per_node=2 -m genesis.models.apps.sft_cli "${args[@]}" \
            --fsdp --out "$sft/two" --batch-size 4 --stop-after 20 | tail -n 2
        timeout 50 torchrun --nproc_per_node=2 -m genesis.models.apps.sft_cli "${args[@]}" \
            --fsdp --out "$sft/two" --batch-size 4 --resume | tail -n 2
        python3 tools/bench/sft_ranks.py compare "$sft"
        device1=tests/cuda/test_runtime.py::test_second_device_allocator_streams_and_kernels
        timeout 60 python3 -m pytest -q -p no:cacheprovider -m multigpu "$device1" | tail -n 30
        timeout 120 compute-sanitizer --tool memcheck --print-limit 20 python3 -m pytest -q \
            -p no:cacheprovider -m multigpu "$device1"
    } 2>&1 | tee "$out/fsdp.log"
fi
