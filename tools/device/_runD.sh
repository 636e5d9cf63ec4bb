set -o pipefail; export PYTHONUNBUFFERED=1; source tools/device/setup.sh || exit 1
nvidia-smi -L
t() { timeout "$@"; }
s() { grep -E "^--|step .*tok/s|genesis / torch|max .loss|Error|rror:" "$1" | head -12; }
t 150 python3 tools/bench/train.py --model 0.2b --steps 15 --warmup 3 --gpu h200 --out $OUT/train_02b.json > /tmp/a.log 2>&1; s /tmp/a.log
t 90 python3 tools/bench/train.py --model 0.2b --steps 15 --warmup 3 --gpu h200 --frameworks genesis --graph --out $OUT/train_02b_graph.json > /tmp/b.log 2>&1; s /tmp/b.log
t 170 python3 tools/bench/train.py --model qwen2.5-0.5b --steps 10 --warmup 3 --gpu h200 --out $OUT/train_05b.json > /tmp/c.log 2>&1; s /tmp/c.log
t 100 python3 tools/bench/train.py --model qwen2.5-0.5b --steps 10 --warmup 3 --gpu h200 --frameworks genesis --graph --out $OUT/train_05b_graph.json > /tmp/d.log 2>&1; s /tmp/d.log
t 60 python3 tools/bench/overhead.py --device cuda --json $OUT/overhead_cuda.json 2>&1 | head -14
t 60 python3 tools/bench/overhead.py --device cpu --json $OUT/overhead_cpu.json 2>&1 | head -14
t 100 python3 tools/bench/llm.py --models qwen2.5-0.5b --sections decode --decode-batches 1 --decode-repeats 1 --gpu h200 --out $OUT/llm_decode.json 2>&1 | tail -8
