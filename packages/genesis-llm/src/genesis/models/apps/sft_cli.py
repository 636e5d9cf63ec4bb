"""``genesis-sft``: fine-tune a model directory on chat JSONL (or plain text) from the shell.

    genesis-sft --model Qwen3-0.6B --data train.jsonl --out runs/sft
    genesis-sft --model runs/sft --data a.txt b.txt --pretrain --out runs/pt --seq-len 512
    genesis-sft --model M --data D --out O --no-compile     # eager (compiled by default on CUDA)
    torchrun --nproc_per_node=2 -m genesis.models.apps.sft_cli --model M --data D --out O
    torchrun --nproc_per_node=2 -m genesis.models.apps.sft_cli --fsdp --model M --data D --out O
"""

from __future__ import annotations

import argparse
import sys

from genesis.models.apps.chat_data import ChatDataError
from genesis.models.apps.chat_tokens import OVERFLOW_CHOICES
from genesis.models.apps.cli_help import DefaultsHelpFormatter
from genesis.models.apps.model_dir import ModelDirError
from genesis.models.apps.runtime import PRECISIONS
from genesis.models.apps.sft import SFTConfig, train


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``genesis-sft``."""
    d = SFTConfig(model="", data=[], out="")
    p = argparse.ArgumentParser(
        prog="genesis-sft", formatter_class=DefaultsHelpFormatter,
        description="Supervised fine-tuning of a genesis causal LM: "
        "loss on assistant tokens only, packed rows, AdamW with warmup + cosine.")
    p.add_argument("--model", required=True, help="model directory (config, weights, tokenizer)")
    p.add_argument("--data", required=True, nargs="+",
                   help='chat JSONL ({"messages": [{"role", "content"}]} a line); with '
                        "--pretrain, plain text files")
    p.add_argument("--out", required=True, help="output directory (model, log, checkpoints)")
    p.add_argument("--pretrain", action="store_true",
                   help="train on every token of plain text files (packed causal LM)")
    p.add_argument("--seq-len", type=int, default=d.seq_len, help="row length in tokens")
    p.add_argument("--overflow", choices=OVERFLOW_CHOICES, default=d.overflow,
                   help="what to do with a conversation longer than --seq-len")
    p.add_argument("--no-pack", dest="pack", action="store_false",
                   help="one conversation per row instead of packing several")
    p.add_argument("--batch-size", type=int, default=d.batch_size,
                   help="rows per micro-batch (per process)")
    p.add_argument("--grad-accum", type=int, default=d.grad_accum,
                   help="micro-batches per optimizer step")
    p.add_argument("--epochs", type=float, default=d.epochs,
                   help="passes over the training rows (fractions allowed)")
    p.add_argument("--max-steps", type=int, default=None, help="optimizer steps (overrides "
                   "--epochs)")
    p.add_argument("--lr", type=float, default=d.lr, help="peak learning rate")
    p.add_argument("--min-lr-ratio", type=float, default=d.min_lr_ratio,
                   help="final learning rate as a fraction of --lr")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay,
                   help="AdamW's decoupled weight decay")
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps,
                   help="steps of linear warmup before the cosine decay")
    p.add_argument("--max-grad-norm", type=float, default=d.max_grad_norm,
                   help="clip the gradient norm to this (0: no clipping)")
    p.add_argument("--eval-fraction", type=float, default=d.eval_fraction,
                   help="share of rows held out for evaluation")
    p.add_argument("--eval-every", type=int, default=d.eval_every,
                   help="evaluate every N steps (0: at checkpoints and at the end)")
    p.add_argument("--save-every", type=int, default=d.save_every,
                   help="write a checkpoint every N steps (0: none)")
    p.add_argument("--keep-checkpoints", type=int, default=d.keep_checkpoints,
                   help="newest checkpoints kept in --out/checkpoints")
    p.add_argument("--stop-after", type=int, default=None,
                   help="end this session after global step N with a checkpoint (the schedule "
                        "keeps its full length; --resume continues)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest checkpoint in --out")
    p.add_argument("--overwrite", action="store_true",
                   help="allow writing into a non-empty --out (its old checkpoints are removed "
                        "once the model and data have been read)")
    p.add_argument("--seed", type=int, default=d.seed,
                   help="seeds the eval split, the row order and the model's randomness")
    p.add_argument("--fsdp", action="store_true",
                   help="shard weights, gradients and optimizer state over the ranks "
                        "(fully sharded data parallel; under torchrun)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="train through model.compile() (genesis.compile: traced once, then "
                        "replayed; on CUDA fused kernels in a CUDA graph), every batch padded "
                        "to --batch-size x --seq-len so one graph serves every step; "
                        "default: on with CUDA (not with --fsdp), off on the CPU")
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: the GPU if "
                   "there is one)")
    p.add_argument("--precision", choices=PRECISIONS, default=d.precision,
                   help="auto: bf16 autocast on the GPU, float32 on the CPU")
    p.add_argument("--threads", type=int, default=None, help="CPU kernel threads")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress bar")
    p.add_argument("--no-plot", dest="plot", action="store_false",
                   help="do not draw loss.png")
    return p


def config_from_args(argv=None) -> SFTConfig:
    """Parse ``genesis-sft`` arguments into an ``SFTConfig``.

    Raises:
        ValueError: a setting no run can use (e.g. ``--lr nan``, ``--batch-size 0``).
    """
    args = build_parser().parse_args(argv)
    return SFTConfig(**vars(args))


def main(argv=None) -> int:
    """Entry point of ``genesis-sft``; returns the exit status."""
    try:
        record = train(config_from_args(argv))
    except (ChatDataError, ModelDirError, OSError, ValueError) as exc:
        # ValueError covers CheckpointError; OSError a missing, unreadable or directory path
        print(f"genesis-sft: error: {exc}", file=sys.stderr)
        return 2
    if record["loss_curve"]:
        print(f"log: {record['log']}\nloss curve: {record['loss_curve']}")
    if record["model_dir"]:
        print(f"model: {record['model_dir']}  (try: genesis-chat {record['model_dir']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
