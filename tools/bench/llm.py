"""LLM benchmark: genesis.models against transformers + torch eager, at real Qwen shapes.

    python tools/bench/llm.py [--models qwen2.5-0.5b,qwen3-0.6b] [--batch 8] [--seq 1024]
                              [--steps 10] [--warmup 3] [--precision bf16|autocast]
                              [--decode-batches 1,8,32] [--prompt 32] [--new-tokens 256]
                              [--prefill 2048] [--sections train,decode,prefill]
                              [--no-compile] [--gpu h200|h100] [--out FILE]
    python tools/bench/llm.py --device cpu --tiny          # a fast smoke test of every path

Random weights, real shapes: each model's config is written out below from its published
``config.json`` (nothing is downloaded). transformers builds the model (its initialisation,
``attn_implementation="sdpa"``) and saves it; genesis loads that checkpoint, so both
frameworks start from the same weights, in the same process on the same GPU.

Sections (each prints genesis/transformers ratios and goes into the JSON):

* **train** -- one training step (forward with labels, backward, AdamW, zero_grad) on
  ``--batch`` x ``--seq`` random tokens. ``--precision bf16`` keeps the parameters in bf16
  (the default); ``autocast`` keeps float32 parameters under bf16 autocast. transformers uses
  ``torch.optim.AdamW(fused=True)``, genesis ``genesis.optim.AdamW(fused=True)``. Reported:
  tokens/s and step time (median of synchronised steps), peak device memory (each
  framework's own allocator, reset after the warm-up steps), MFU (FLOPs per token as in
  ``tools/bench/train.py``, against the GPU's dense bf16 peak) and the losses; with
  ``--profile``, kernel launches and kernel time of one step (``kernel_profile.profile_step``);
  for decode, of one more ``generate`` call at the first batch size (and launches per token).
  The profiler leaves CUPTI attached to the process, which slows every later launch: with
  ``--profile``, figures timed after the first profiled call are not comparable (train.py
  times every framework before it profiles any). ``first_step_s``: the first step's wall
  time (for ``genesis-compile``, the trace and the compilation are in it).
* **decode** -- ``generate`` of ``--new-tokens`` greedy tokens after a ``--prompt``-token
  prompt, for each batch size in ``--decode-batches``, first model only: tokens/s
  (batch x new tokens / wall time of the call, prefill included, as a user sees it), after
  one untimed call of the same length. genesis runs eagerly and (unless ``--no-compile``)
  compiled (``genesis-compile``).

genesis-compile is the model after ``model.compile()``: its training forward and backward go
through ``genesis.compile`` (on CUDA fused Triton kernels replayed as CUDA graphs), and so does
``generate``'s decode step (``generate(compile=None)`` follows ``model.compile()``): the
untimed call traces it, the timed calls replay the step kept on the model (``timed_traces``:
decode steps the timed calls ran in Python, 0; ``compile_fallback``: whether genesis.compile
warned, e.g. a CUDA-graph capture it refused). The prefill is not compiled (its length
varies), so genesis-compile has no prefill row.
* **prefill** -- the prompt pass of generation for one ``--prefill``-token prompt (filling
  the KV cache, logits of the last position): tokens/s of the median of
  ``--prefill-repeats`` synchronised calls, after two untimed ones. Both frameworks' calls
  are host-bound at this size (tens of ms of Python for a few ms of kernels), so single calls
  vary by tens of percent with the host's load: the median of many is the figure.

The run ends with a markdown table of the figures (also written next to ``--out`` as .md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decoder import PEAK_BF16, ModelConfig, flops_per_token  # noqa: E402
from kernel_profile import profile_step  # noqa: E402
from llm_frameworks import Genesis, Torch, dtype_kwarg  # noqa: E402

# From the published config.json of each model (Hugging Face hub); ``model_type`` picks the
# transformers config class and genesis family.
CONFIGS = {
    "qwen2.5-0.5b": dict(
        model_type="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
        num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
        max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=True, use_sliding_window=False, sliding_window=32768,
        max_window_layers=24, hidden_act="silu", attention_dropout=0.0,
        initializer_range=0.02, bos_token_id=151643, eos_token_id=151643),
    "qwen3-0.6b": dict(
        model_type="qwen3", vocab_size=151936, hidden_size=1024, intermediate_size=3072,
        num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
        sliding_window=None, max_window_layers=28, hidden_act="silu", attention_dropout=0.0,
        initializer_range=0.02, bos_token_id=151643, eos_token_id=151645),
}

# --tiny: the same families at toy sizes (CPU smoke test).
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
            bos_token_id=1, eos_token_id=2)


def model_config(name: str, tiny: bool) -> dict:
    cfg = dict(CONFIGS[name])
    if tiny:
        cfg.update(TINY)
        if "head_dim" in cfg:
            cfg["head_dim"] = 16
    return cfg


def flops_config(cfg: dict) -> ModelConfig:
    """The config in ``tools/bench/decoder.py``'s terms, for its FLOP count."""
    heads = cfg["num_attention_heads"]
    return ModelConfig(vocab=cfg["vocab_size"], dim=cfg["hidden_size"],
                       layers=cfg["num_hidden_layers"], q_heads=heads,
                       kv_heads=cfg["num_key_value_heads"],
                       head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
                       ffn=cfg["intermediate_size"], tied=cfg["tie_word_embeddings"])


# ------------------------------------------------------------------------ the two frameworks
def _timed(fw, fn, repeats: int, *fn_args) -> tuple[list[float], object]:
    """Wall seconds of ``repeats`` synchronised calls of ``fn(*fn_args)``, and the last
    call's result."""
    times, result = [], None
    for _ in range(repeats):
        fw.sync()
        t0 = time.perf_counter()
        result = fn(*fn_args)
        fw.sync()
        times.append(time.perf_counter() - t0)
    return times, result


# ------------------------------------------------------------------------ sections
def bench_train(fw, path: str, cfg: dict, batches: list, args) -> dict:
    """Training-step figures of one framework."""
    autocast = args.precision == "autocast"
    model = fw.load(path, "float32" if autocast else "bfloat16")
    model.train()
    opt = fw.optimizer(model, args.lr)
    data = [fw.tokens(b) for b in batches]
    losses = []
    first_step_s = None

    def step(i: int) -> None:
        ids = data[i % len(data)]
        with fw.autocast(autocast):
            loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())  # read back once at the end: no per-step sync

    for i in range(args.warmup):
        seconds = _timed(fw, step, 1, i)[0][0]
        first_step_s = seconds if first_step_s is None else first_step_s
    fw.sync()
    fw.reset_peak()
    times = []
    for i in range(args.warmup, args.warmup + args.steps):
        times += _timed(fw, step, 1, i)[0]
    step_s = statistics.median(times)
    tokens = args.batch * args.seq
    res = {"step_ms": step_s * 1e3, "tok_per_s": tokens / step_s, "peak_mem_gib": fw.peak_gib(),
           "first_step_s": first_step_s, "losses": [float(v.item()) for v in losses]}
    res["mfu"] = (flops_per_token(flops_config(cfg), args.seq) * tokens / step_s / args.peak
                  if args.device == "cuda" else None)
    if args.profile:  # kernel launches and summed kernel time of one more step
        res.update(profile_step(lambda: step(args.warmup + args.steps), args.device, True))
    return res


def bench_decode(fw, path: str, cfg: dict, args) -> dict:
    """Generation tokens/s for each batch size."""
    model = fw.load(path, "bfloat16")
    model.eval()
    rng = np.random.default_rng(args.seed + 2)
    out = {}
    for b in args.decode_batches:
        ids = fw.tokens(rng.integers(0, cfg["vocab_size"], (b, args.prompt), dtype=np.int64))
        compiled = getattr(fw, "compiled", False)
        if compiled:
            fw.compile_fallback = False  # set by generate if genesis.compile warns
        # warm-up at the timed calls' length: kernels compiled for the same KV-cache
        # capacity and, compiled, the decode step traced for it (kept on the model)
        fw.generate(model, ids, args.new_tokens)
        traced = getattr(fw, "traced_steps", 0)
        times, result = _timed(fw, fw.generate, args.decode_repeats, model, ids,
                               args.new_tokens)
        produced = tuple(result.shape)
        if produced != (b, args.prompt + args.new_tokens):
            raise RuntimeError(f"{fw.name} generate returned {list(produced)}, expected "
                               f"{[b, args.prompt + args.new_tokens]}")
        out[str(b)] = {"tok_per_s": b * args.new_tokens / statistics.median(times),
                       "ms": statistics.median(times) * 1e3}
        if compiled:
            out[str(b)]["compile_fallback"] = fw.compile_fallback
            # 0 when the timed calls replayed the warm-up's trace (as they should)
            out[str(b)]["timed_traces"] = fw.traced_steps - traced
            if fw.traced_steps != traced:
                print(f"  warning: decode {fw.name} batch {b}: the timed calls ran "
                      f"{fw.traced_steps - traced} decode steps in Python (the warm-up's "
                      "trace was not reused)", file=sys.stderr, flush=True)
        if args.profile and b == args.decode_batches[0]:  # kernels of one more call
            print(f"  decode {fw.name} batch {b}: kernels of one generate call", flush=True)
            prof = profile_step(lambda ids=ids: fw.generate(model, ids, args.new_tokens),
                                args.device, True)
            if prof["launches"] is not None:
                prof["launches_per_token"] = prof["launches"] / args.new_tokens
                print(f"  {prof['launches_per_token']:.1f} kernel launches per new token",
                      flush=True)
            out[str(b)]["profile"] = prof
    return out


def bench_prefill(fw, path: str, cfg: dict, args) -> dict:
    """One prompt of ``args.prefill`` tokens through the generation prefill."""
    model = fw.load(path, "bfloat16")
    model.eval()
    rng = np.random.default_rng(args.seed + 3)
    ids = fw.tokens(rng.integers(0, cfg["vocab_size"], (1, args.prefill), dtype=np.int64))
    for _ in range(2):  # warm-up
        fw.prefill(model, ids)
    t = statistics.median(_timed(fw, fw.prefill, args.prefill_repeats, model, ids)[0])
    return {"tok_per_s": args.prefill / t, "ms": t * 1e3}


# ------------------------------------------------------------------------ driver
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qwen2.5-0.5b,qwen3-0.6b",
                    help=f"comma-separated, of {sorted(CONFIGS)}; decode/prefill use the first")
    ap.add_argument("--tiny", action="store_true", help="toy sizes of the same families")
    ap.add_argument("--sections", default="train,decode,prefill")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10, help="timed training steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed training steps first")
    ap.add_argument("--precision", choices=("bf16", "autocast"), default="bf16")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--decode-batches", default="1,8,32")
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens of the decode runs")
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--decode-repeats", type=int, default=3, help="timed generate calls")
    ap.add_argument("--prefill", type=int, default=2048, help="prefill prompt length")
    ap.add_argument("--prefill-repeats", type=int, default=21, help="timed prefill calls")
    ap.add_argument("--no-compile", action="store_true",
                    help="genesis eager only (no genesis-compile rows)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--gpu", choices=sorted(PEAK_BF16), default="h200",
                    help="GPU whose dense bf16 peak the MFU is taken against")
    ap.add_argument("--profile", action="store_true",
                    help="profile one more training step, and one more generate call at the "
                         "first decode batch size, per framework (GPU: kernel table; slows "
                         "every launch timed after it)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None,
                    help="write the results as JSON here (and the table next to it as .md)")
    args = ap.parse_args(argv)
    args.models = args.models.split(",")
    for m in args.models:
        if m not in CONFIGS:
            ap.error(f"unknown model {m!r}; known: {sorted(CONFIGS)}")
    args.sections = args.sections.split(",")
    args.decode_batches = [int(b) for b in args.decode_batches.split(",")]
    args.peak = PEAK_BF16[args.gpu]
    return args


def _section(doc: dict, fw, bench, *bench_args):
    """``bench(fw, *bench_args)``, then ``fw``'s cached device memory released (the section's
    model is gone by then), so the next framework's peak is its own. A failure of the
    compiled framework is printed and recorded in ``doc["errors"]`` (None returned): the
    eager rows of the run still come out."""
    try:
        result = bench(fw, *bench_args)
    except Exception as exc:  # any failure of the compiled path
        if not getattr(fw, "compiled", False):
            raise
        traceback.print_exc()
        doc.setdefault("errors", {})[f"{bench.__name__} {fw.name}"] = \
            f"{type(exc).__name__}: {exc}"
        result = None
    fw.free()
    return result


def _ratio(g, t):
    return g / t if g is not None and t else None


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def save_checkpoint(cfg: dict, path: str, seed: int) -> int:
    """A randomly initialised transformers model of ``cfg`` saved to ``path`` (bf16);
    returns its parameter count."""
    import torch
    import transformers

    torch.manual_seed(seed)
    kwargs = {k: v for k, v in cfg.items() if k != "model_type"}
    config = transformers.AutoConfig.for_model(cfg["model_type"], **kwargs)
    model = transformers.AutoModelForCausalLM.from_config(config,
                                                          **dtype_kwarg(torch.bfloat16))
    model.save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def run_model(name: str, args, frameworks: list, tmp: str, first: bool) -> dict:
    """Every section for one model; ``frameworks``: transformers, genesis and (train and
    decode) genesis-compile."""
    eager = [fw for fw in frameworks if not getattr(fw, "compiled", False)]
    cfg = model_config(name, args.tiny)
    path = os.path.join(tmp, name)
    n_params = save_checkpoint(cfg, path, args.seed)
    print(f"== {name}{' (tiny)' if args.tiny else ''}: {n_params / 1e6:.1f}M parameters",
          flush=True)
    doc = {"config": cfg, "params": n_params}
    if "train" in args.sections:
        rng = np.random.default_rng(args.seed + 1)
        batches = [rng.integers(0, cfg["vocab_size"], (args.batch, args.seq), dtype=np.int64)
                   for _ in range(3)]
        train = doc["train"] = {}
        for fw in frameworks:
            r = _section(doc, fw, bench_train, path, cfg, batches, args)
            if r is not None:
                train[fw.name] = r
        for fw_name, r in train.items():
            print(f"  train {fw_name:15s} {r['step_ms']:8.1f} ms  {r['tok_per_s']:10,.0f} tok/s"
                  f"  MFU {_fmt(r['mfu'] and 100 * r['mfu'], '.1f')}%  peak "
                  f"{_fmt(r['peak_mem_gib'], '.2f')} GiB  loss {r['losses'][0]:.3f} -> "
                  f"{r['losses'][-1]:.3f}", flush=True)
        g, t = train["genesis"], train["transformers"]
        train["ratios"] = {"tok_per_s": _ratio(g["tok_per_s"], t["tok_per_s"]),
                           "peak_mem_gib": _ratio(g["peak_mem_gib"], t["peak_mem_gib"])}
        print(f"  train genesis / transformers: tok/s {train['ratios']['tok_per_s']:.2f}x  "
              f"peak memory {_fmt(train['ratios']['peak_mem_gib'], '.2f')}x", flush=True)
        c = train.get("genesis-compile")
        if c is not None:  # the compiled step against transformers and against eager genesis
            train["compile_ratios"] = {
                "tok_per_s": _ratio(c["tok_per_s"], t["tok_per_s"]),
                "tok_per_s_vs_eager": _ratio(c["tok_per_s"], g["tok_per_s"]),
                "peak_mem_gib": _ratio(c["peak_mem_gib"], t["peak_mem_gib"])}
            print(f"  train genesis-compile: tok/s {train['compile_ratios']['tok_per_s']:.2f}x "
                  f"transformers, {train['compile_ratios']['tok_per_s_vs_eager']:.2f}x eager "
                  f"genesis; first step {c['first_step_s']:.1f} s", flush=True)
    if first and "decode" in args.sections:
        doc["decode"] = {}
        for fw in frameworks:
            r = _section(doc, fw, bench_decode, path, cfg, args)
            if r is None:
                continue
            doc["decode"][fw.name] = r
            for b, row in r.items():
                print(f"  decode {fw.name:16s} batch {b:>3s}: {row['tok_per_s']:10,.1f} tok/s",
                      flush=True)
        ref = doc["decode"]["transformers"]
        doc["decode"]["ratios"] = {
            name: {b: _ratio(r["tok_per_s"], ref[b]["tok_per_s"]) for b, r in runs.items()}
            for name, runs in doc["decode"].items() if name != "transformers"}
    if first and "prefill" in args.sections:
        doc["prefill"] = {fw.name: _section(doc, fw, bench_prefill, path, cfg, args)
                          for fw in eager}
        for fw_name, r in doc["prefill"].items():
            print(f"  prefill {args.prefill} {fw_name:12s}: {r['tok_per_s']:10,.0f} tok/s",
                  flush=True)
        doc["prefill"]["ratio"] = _ratio(doc["prefill"]["genesis"]["tok_per_s"],
                                         doc["prefill"]["transformers"]["tok_per_s"])
    return doc


def markdown(doc: dict) -> str:
    """The results as a markdown table (rows: what was measured; tok/s and ratios)."""
    lines = ["| benchmark | transformers | genesis | genesis / transformers |",
             "|---|---|---|---|"]
    for name, m in doc["models"].items():
        for fw_name in ("genesis", "genesis-compile"):
            if fw_name not in m.get("train", {}):
                continue
            g, t = m["train"][fw_name], m["train"]["transformers"]
            mfu = "" if g["mfu"] is None else f", MFU {100 * t['mfu']:.1f}% / {100 * g['mfu']:.1f}%"
            mem = ("" if g["peak_mem_gib"] is None else
                   f", peak {t['peak_mem_gib']:.1f} / {g['peak_mem_gib']:.1f} GiB")
            lines.append(f"| {name} train step ({fw_name}), {doc['batch']} x {doc['seq']} "
                         f"tok/s{mfu}{mem} | {t['tok_per_s']:,.0f} | {g['tok_per_s']:,.0f} "
                         f"| {g['tok_per_s'] / t['tok_per_s']:.2f}x |")
        for fw_name in ("genesis", "genesis-compile"):
            for b, r in m.get("decode", {}).get(fw_name, {}).items():
                t = m["decode"]["transformers"][b]
                lines.append(f"| {name} decode tok/s ({fw_name}), batch {b}, "
                             f"{doc['prompt']} + {doc['new_tokens']} tokens "
                             f"| {t['tok_per_s']:,.1f} | {r['tok_per_s']:,.1f} "
                             f"| {r['tok_per_s'] / t['tok_per_s']:.2f}x |")
        if "prefill" in m:
            t, g = m["prefill"]["transformers"], m["prefill"]["genesis"]
            lines.append(f"| {name} prefill tok/s, {doc['prefill']} tokens "
                         f"| {t['tok_per_s']:,.0f} | {g['tok_per_s']:,.0f} "
                         f"| {m['prefill']['ratio']:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    args = parse_args(argv)
    frameworks = [Torch(args.device), Genesis(args.device)]
    if not args.no_compile:
        frameworks.append(Genesis(args.device, compiled=True))
    doc = {"device": args.device, "precision": args.precision, "batch": args.batch,
           "seq": args.seq, "prompt": args.prompt, "new_tokens": args.new_tokens,
           "prefill": args.prefill, "peak_flops": args.peak if args.device == "cuda" else None,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "models": {}}
    if args.device == "cuda":
        import torch

        doc["gpu_name"] = torch.cuda.get_device_name(0)
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(args.models):
            doc["models"][name] = run_model(name, args, frameworks, tmp, first=i == 0)
    table = markdown(doc)
    print(table, end="")
    for name, m in doc["models"].items():
        for where, error in m.get("errors", {}).items():
            print(f"failed: {name} {where}: {error}", file=sys.stderr, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
        with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
            f.write(table)
    return doc


if __name__ == "__main__":
    main()
