set -o pipefail; export PYTHONUNBUFFERED=1; source tools/device/setup.sh || exit 1
python3 -m pytest -q -p no:cacheprovider -m "cuda or not cuda" tests/cuda/test_graphs.py tests/cuda/test_graphs_logic.py tests/cuda/test_kernels_optim.py tests/optim/test_multi_tensor.py tests/cuda/test_allocator.py tests/cuda/test_runtime.py tests/distributed/test_nccl.py tests/cuda/test_kernels_attention.py 2>&1 | tee $OUT/testsB.log | grep -E "passed|failed|^FAILED|^ERROR" | head -30
timeout 100 python3 -m torch.distributed.run --nproc_per_node=1 examples/ddp_train.py --device cuda --epochs 2 2>&1 | tail -4
timeout 200 python3 tools/bench/train.py --model 0.2b --steps 8 --warmup 3 --gpu h200 --profile --out $OUT/train_02b.json > $OUT/train.log 2>&1; grep -A3 "^-- genesis" $OUT/train.log | head; grep -E "genesis / torch|step .*tok/s" $OUT/train.log
timeout 60 python3 tools/bench/overhead.py --device cuda --json $OUT/overhead_cuda.json 2>&1 | tail -30
