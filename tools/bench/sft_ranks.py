"""genesis-sft on one GPU against genesis-sft under torchrun on several: the loss curves of
the same global batch, step by step (the two-GPU issue's SFT check).

    python tools/bench/sft_ranks.py make ROOT          # data, tokenizer and a small model
    python -m genesis.models.apps.sft_cli ... --out ROOT/one --batch-size 8
    torchrun --nproc_per_node=2 -m genesis.models.apps.sft_cli ... --out ROOT/two \\
        --batch-size 4
    python tools/bench/sft_ranks.py compare ROOT       # prints the two curves side by side

``make`` writes ``ROOT/train.jsonl`` (512 "repeat these words" chats), a ChatML BPE
tokenizer trained on them and a randomly initialised Qwen3-architecture model (4 layers,
hidden 256) to ``ROOT/base``. ``compare`` reads ``ROOT/one/log.json`` and
``ROOT/two/log.json`` (``tools/device/gpu_suite.sh multigpu`` runs the whole sequence).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

WORDS = ["red", "green", "blue", "cat", "dog", "sun", "moon", "tree", "one", "two"]


def make(root: Path) -> None:
    import genesis
    from genesis.models import Qwen3Config, QwenForCausalLM
    from genesis.models.apps.chat_data import write_chat_jsonl
    from genesis.models.apps.tokenizer_training import train_chat_tokenizer

    rng = np.random.default_rng(0)
    chats = []
    for _ in range(512):
        words = " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), size=4))
        chats.append([{"role": "user", "content": "repeat " + words},
                      {"role": "assistant", "content": words}])
    root.mkdir(parents=True, exist_ok=True)
    write_chat_jsonl(root / "train.jsonl", chats)
    tok = train_chat_tokenizer([m["content"] for c in chats for m in c] + ["user assistant"],
                               vocab_size=300)
    config = Qwen3Config(vocab_size=len(tok), hidden_size=256, intermediate_size=768,
                         num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                         head_dim=32, max_position_embeddings=256, tie_word_embeddings=True,
                         attention_bias=False, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    genesis.manual_seed(0)
    QwenForCausalLM(config).save_pretrained(str(root / "base"))
    tok.save_pretrained(str(root / "base"))
    print(f"wrote {root / 'train.jsonl'} and {root / 'base'}")


def compare(root: Path) -> float:
    """Print both runs' train losses per step; return the largest difference."""
    one = json.loads((root / "one" / "log.json").read_text())
    two = json.loads((root / "two" / "log.json").read_text())
    a, b = one["history"]["train_loss"], two["history"]["train_loss"]
    if len(a) != len(b):
        raise SystemExit(f"the runs made {len(a)} and {len(b)} steps")
    print(f"processes: {one['runtime']['world_size']} vs {two['runtime']['world_size']}")
    print("step  one run    two ranks  difference")
    for i, (x, y) in enumerate(zip(a, b)):
        print(f"{i + 1:4d}  {x:9.4f}  {y:9.4f}  {y - x:+.4f}")
    diff = np.abs(np.array(a) - np.array(b))
    print(f"max |difference| {diff.max():.4f}, mean {diff.mean():.4f}; eval loss "
          f"{one['history']['eval_loss']} vs {two['history']['eval_loss']}")
    return float(diff.max())


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in ("make", "compare"):
        raise SystemExit("usage: sft_ranks.py make|compare ROOT")
    (make if argv[0] == "make" else compare)(Path(argv[1]))


if __name__ == "__main__":
    main()
