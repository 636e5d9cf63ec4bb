"""genesis-sft compiled against eager: tokens/s of the same run, Qwen2.5-0.5B shape.

    python tools/bench/sft_compile.py [--shape qwen2.5-0.5b|qwen3-0.6b|tiny|tiny-qwen3]
                                      [--steps 20] [--batch-size 8] [--seq-len 1024]
                                      [--device cuda] [--precision auto] [--out FILE]

Writes a model directory of the shape (random weights; the layer sizes and vocabulary of
``tools/bench/llm.py``'s config), a ChatML BPE tokenizer and enough "repeat these words"
chats to fill ``steps x batch-size`` packed rows, then runs ``genesis-sft``'s training loop
(``genesis.models.apps.sft.train``, bf16 autocast on the GPU unless ``--precision`` says
otherwise) on them twice in this process:
``compile=False`` (eager) and ``compile=True`` (``model.compile()`` on fixed-shape batches).
Reported per run, from the run's log record: the first step's seconds (the compiled run
traces and compiles there), input tokens/s of the later steps (real tokens, padding not
counted, evaluation and checkpoints excluded) and the losses; then the compiled/eager
ratios (the issue's target: >= 1.3x tokens/s) and the largest relative loss difference.
``--shape tiny`` is a CPU smoke test of the same path; ``qwen3-0.6b`` and ``tiny-qwen3`` are
the Qwen3 family, whose q_norm/k_norm (an rms_norm of a bfloat16 projection under autocast)
the Qwen2.5 shapes lack.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llm import CONFIGS  # noqa: E402

WORDS = ["red", "green", "blue", "cat", "dog", "sun", "moon", "tree", "one", "two"]
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)


def make(root: Path, shape: str, rows: int, seq_len: int) -> tuple[Path, Path]:
    """``(model dir, chat file)`` under ``root``: enough chats for ``rows`` packed rows of
    ``seq_len`` tokens (and an eval-free run), a tokenizer trained on them, a random model."""
    import genesis
    from genesis.models import QwenForCausalLM, config_from_dict
    from genesis.models.apps.chat_data import write_chat_jsonl
    from genesis.models.apps.tokenizer_training import train_chat_tokenizer

    rng = np.random.default_rng(0)
    chats = []
    for _ in range(rows * max(1, seq_len // 40) + 16):  # ~40 tokens a chat
        words = " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), size=8))
        chats.append([{"role": "user", "content": "repeat " + words},
                      {"role": "assistant", "content": words}])
    data = root / "train.jsonl"
    write_chat_jsonl(data, chats)
    tok = train_chat_tokenizer([" ".join(WORDS), "repeat user assistant"], vocab_size=300)
    family = "qwen3-0.6b" if "qwen3" in shape else "qwen2.5-0.5b"
    cfg = dict(CONFIGS[family])
    if shape.startswith("tiny"):
        cfg.update(TINY)
        if "head_dim" in cfg:  # (Qwen3's is set apart from hidden_size / heads)
            cfg["head_dim"] = TINY["hidden_size"] // TINY["num_attention_heads"]
    cfg.update(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
               bos_token_id=None, max_position_embeddings=max(seq_len,
                                                              cfg["max_position_embeddings"]))
    if cfg["vocab_size"] < len(tok):
        raise SystemExit(f"the tokenizer's {len(tok)} tokens exceed the vocabulary")
    genesis.manual_seed(0)
    model_dir = root / "model"
    QwenForCausalLM(config_from_dict(cfg)).save_pretrained(str(model_dir))
    tok.save_pretrained(str(model_dir))
    return model_dir, data


def run(model_dir: Path, data: Path, out: Path, compile: bool, args) -> dict:
    """One genesis-sft session; its log record's figures."""
    from genesis.models.apps.sft import SFTConfig, train

    record = train(SFTConfig(model=str(model_dir), data=[str(data)], out=str(out),
                             seq_len=args.seq_len, batch_size=args.batch_size,
                             max_steps=args.steps, lr=1e-5, warmup_steps=0, eval_fraction=0.0,
                             device=args.device, precision=args.precision, compile=compile,
                             progress=False, plot=False))
    return {"compiled": record["runtime"]["compiled"],
            "compiled_graphs": record["runtime"]["compiled_graphs"],
            **record["speed"], "losses": record["history"]["train_loss"]}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=("qwen2.5-0.5b", "qwen3-0.6b", "tiny", "tiny-qwen3"),
                    default="qwen2.5-0.5b")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--precision", default="auto", choices=("auto", "bf16", "fp32"),
                    help="auto: bf16 autocast on the GPU, float32 on the CPU")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir, data = make(root, args.shape, args.steps * args.batch_size, args.seq_len)
        doc = {"shape": args.shape, "steps": args.steps, "batch_size": args.batch_size,
               "seq_len": args.seq_len, "device": args.device, "precision": args.precision}
        for name, compile in (("eager", False), ("compile", True)):
            try:
                doc[name] = run(model_dir, data, root / name, compile, args)
            except Exception as exc:  # the compiled run failing still reports the eager one
                if compile is False:
                    raise
                traceback.print_exc()
                doc["error"] = f"{type(exc).__name__}: {exc}"
            if args.device == "cuda":
                import genesis

                genesis.cuda.empty_cache()
    if "error" in doc:
        print(f"eager: {doc['eager']}\ncompiled run failed: {doc['error']}", file=sys.stderr)
        _write(doc, args.out)
        return doc
    e, c = doc["eager"], doc["compile"]
    doc["tok_per_s_ratio"] = (c["tokens_per_second"] / e["tokens_per_second"]
                              if e["tokens_per_second"] and c["tokens_per_second"] else None)
    doc["max_rel_loss_diff"] = float(np.max(np.abs(np.array(c["losses"]) - e["losses"])
                                            / np.abs(e["losses"])))
    print("| genesis-sft | first step s | tokens/s | last loss |\n|---|---|---|---|")
    for name in ("eager", "compile"):
        r = doc[name]
        print(f"| {name} | {r['first_step_seconds']:.2f} | {r['tokens_per_second'] or 0:,.0f} "
              f"| {r['losses'][-1]:.4f} |")
    ratio = doc["tok_per_s_ratio"]
    print(f"compile / eager tokens/s: {'-' if ratio is None else f'{ratio:.2f}x'}; largest "
          f"relative loss difference {doc['max_rel_loss_diff']:.2e}; compiled graphs "
          f"{c['compiled_graphs']}")
    _write(doc, args.out)
    return doc


def _write(doc: dict, path: str | None) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
