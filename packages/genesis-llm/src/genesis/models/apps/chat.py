"""``genesis-chat MODEL_DIR``: talk to a model through its tokenizer's chat template.

    genesis-chat runs/qwen_arithmetic                       # interactive, streamed
    genesis-chat runs/qwen_arithmetic --prompt "What is 12+7?" --greedy
    genesis-chat Qwen3-0.6B --system "You are terse." --temperature 0.7 --top-p 0.9

In the interactive loop, ``/reset`` forgets the conversation (the system prompt stays) and
``/exit`` (or Ctrl-D) quits. When the conversation outgrows the model's context, the oldest
turns are dropped.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import genesis
from genesis.models.apps.cli_help import DefaultsHelpFormatter
from genesis.models.apps.model_dir import ModelDirError, load_model, load_tokenizer


class TextPrinter:
    """A generation streamer that prints decoded text as tokens arrive.

    ``generate`` calls ``put(ids)`` with the prompt first and then each new token, and
    ``end()`` once. Text is decoded from all new tokens so far and only the new suffix is
    written, held back while it ends in an incomplete UTF-8 character.

    Args:
        tokenizer: decodes the ids.
        file: where text goes (default stdout).
    """

    def __init__(self, tokenizer, file=None):
        self.tokenizer = tokenizer
        self.file = file
        self.prompt_seen = False
        self.ids: list[int] = []
        self.printed = 0

    def put(self, ids) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.ids += [int(t) for t in _flat(ids)]
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return
        self._write(text[self.printed:])
        self.printed = len(text)

    def end(self) -> None:
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        self._write(text[self.printed:] + "\n")

    def _write(self, text: str) -> None:
        f = self.file or sys.stdout
        f.write(text)
        f.flush()


def _flat(ids) -> list:
    values = ids.tolist() if hasattr(ids, "tolist") else ids
    out = []
    stack = [values]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(reversed(v))
        else:
            out.append(v)
    return out


def stop_token_ids(model_dir: Path, tokenizer) -> list[int]:
    """Token ids that end a reply: the tokenizer's eos and generation_config.json's."""
    ids = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
    gen_cfg = model_dir / "generation_config.json"
    if gen_cfg.is_file():
        eos = json.loads(gen_cfg.read_text(encoding="utf-8")).get("eos_token_id")
        ids += eos if isinstance(eos, list) else ([] if eos is None else [eos])
    if not ids:
        raise ModelDirError(f"{model_dir}: the tokenizer has no eos_token and "
                            "generation_config.json names no eos_token_id: replies could "
                            "not stop")
    return sorted(set(ids))


class PromptTooLongError(ValueError):
    """The prompt alone fills the model's context: there is no room for a reply."""


class ChatSession:
    """A conversation with a model: history, the template, and one reply at a time.

    Args:
        model: a genesis causal LM with ``generate``.
        tokenizer: its tokenizer (with a chat template).
        eos_ids: ids that end a reply.
        system: an optional system prompt kept across ``reset``.
        context: the model's context length (oldest turns are dropped beyond it; a reply
            that would run past it is cut short, with a warning).
        gen_kwargs: sampling settings passed to ``generate``.
    """

    def __init__(self, model, tokenizer, eos_ids: list[int], system: str | None = None,
                 context: int | None = None, **gen_kwargs):
        self.model, self.tokenizer, self.eos_ids = model, tokenizer, eos_ids
        self.system, self.context, self.gen_kwargs = system, context, gen_kwargs
        self.reset()

    def reset(self) -> None:
        """Forget the conversation; keep the system prompt."""
        self.messages = [{"role": "system", "content": self.system}] if self.system else []

    def _prompt_ids(self) -> tuple[list[int], int]:
        """The prompt's ids (oldest exchanges dropped to fit) and the reply's token budget."""
        max_new = self.gen_kwargs.get("max_new_tokens", 0)
        budget = (self.context or 0) - max_new
        while True:
            ids = self.tokenizer.apply_chat_template(self.messages, tokenize=True,
                                                     add_generation_prompt=True)
            ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys")
                       else ids)
            first = 1 if self.system else 0
            if not self.context or len(ids) <= budget or len(self.messages) - first <= 1:
                break
            del self.messages[first:first + 2]  # the oldest user/assistant exchange
        if self.context and len(ids) >= self.context:
            raise PromptTooLongError(
                f"the prompt is {len(ids)} tokens, but the model's context is {self.context} "
                "(max_position_embeddings in config.json): no room for a reply; shorten the "
                "message" + (" or the system prompt" if self.system else ""))
        if self.context and len(ids) + max_new > self.context:
            max_new = self.context - len(ids)
            print(f"genesis-chat: warning: the prompt is {len(ids)} tokens of the model's "
                  f"{self.context}; the reply is limited to {max_new} tokens", file=sys.stderr)
        return ids, max_new

    def ask(self, text: str, streamer=None, generator=None) -> str:
        """Add a user message, generate the reply, add it to the history and return it.

        Raises:
            PromptTooLongError: the prompt fills the context (the message is not kept).
        """
        self.messages.append({"role": "user", "content": text})
        try:
            ids, max_new = self._prompt_ids()
        except PromptTooLongError:
            self.messages.pop()
            raise
        device = next(iter(self.model.parameters())).device
        input_ids = genesis.tensor([ids], dtype=genesis.int64, device=device)
        settings = dict(self.gen_kwargs)
        if "max_new_tokens" in settings:
            settings["max_new_tokens"] = max_new
        with genesis.no_grad():
            out = self.model.generate(input_ids, eos_token_id=self.eos_ids, streamer=streamer,
                                      generator=generator, **settings)
        new = [t for t in out[0, len(ids):].tolist() if t not in self.eos_ids]
        reply = self.tokenizer.decode(new, skip_special_tokens=True).strip()
        self.messages.append({"role": "assistant", "content": reply})
        return reply


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``genesis-chat``."""
    p = argparse.ArgumentParser(
        prog="genesis-chat", formatter_class=DefaultsHelpFormatter,
        description="Chat with a genesis causal LM in the terminal.",
        epilog="In the chat: type a message and press Enter; '/reset' forgets the conversation "
               "(the system prompt stays); '/exit', '/quit' or Ctrl-D quits.")
    p.add_argument("model_dir", help="model directory (config, weights, tokenizer with a chat "
                   "template)")
    p.add_argument("--system", default=None, help="system prompt")
    p.add_argument("--prompt", default=None,
                   help="answer this one message and exit (no interactive loop)")
    p.add_argument("--max-new-tokens", type=int, default=256,
                   help="longest reply in tokens (less when the context is nearly full)")
    p.add_argument("--greedy", action="store_true", help="always take the likeliest token")
    p.add_argument("--temperature", type=float, default=0.7, help="sampling temperature")
    p.add_argument("--top-k", type=int, default=50, help="sample among the k likeliest tokens")
    p.add_argument("--top-p", type=float, default=0.9,
                   help="sample among the likeliest tokens holding this probability")
    p.add_argument("--repetition-penalty", type=float, default=1.0,
                   help="divide the scores of tokens already present by this (1: off)")
    p.add_argument("--seed", type=int, default=None, help="seed the sampling")
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: the GPU if "
                   "there is one)")
    p.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                   help="weights dtype (auto: bfloat16 on the GPU, float32 on the CPU)")
    p.add_argument("--threads", type=int, default=None, help="CPU kernel threads")
    p.add_argument("--no-stream", dest="stream", action="store_false",
                   help="print each reply whole")
    return p


def check_args(args) -> list[str]:
    """What is wrong with the sampling flags of ``args`` (empty when nothing is).

    Args:
        args: parsed ``genesis-chat`` arguments.

    Returns:
        One message per bad flag, naming it and its value.
    """
    rules = [("--max-new-tokens", args.max_new_tokens, lambda v: v >= 1, "an integer >= 1"),
             ("--temperature", args.temperature, lambda v: v > 0 or args.greedy and v == 0,
              "a finite number > 0"),
             ("--top-k", args.top_k, lambda v: v >= 0, "an integer >= 0 (0: off)"),
             ("--top-p", args.top_p, lambda v: 0 < v <= 1, "a number in (0, 1]"),
             ("--repetition-penalty", args.repetition_penalty, lambda v: v > 0,
              "a finite number > 0"),
             ("--threads", args.threads, lambda v: v is None or v >= 1, "an integer >= 1")]
    return [f"{flag} must be {words}, got {value!r}" for flag, value, ok, words in rules
            if not (value is None or math.isfinite(value)) or not ok(value)]


def open_session(args) -> ChatSession:
    """Load the model directory named by ``args`` and start a session."""
    device = genesis.device(args.device or ("cuda" if genesis.cuda.is_available() else "cpu"))
    if device.type == "cpu" and args.threads:
        genesis.set_num_threads(args.threads)
    dtype = {"float32": genesis.float32, "bfloat16": genesis.bfloat16}.get(
        args.dtype, genesis.bfloat16 if device.type == "cuda" else genesis.float32)
    model_dir = Path(args.model_dir)
    tokenizer = load_tokenizer(model_dir, need_chat_template=True)
    model = load_model(model_dir, device, dtype=dtype)
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    sampling = {} if args.greedy else {
        "temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}
    return ChatSession(model, tokenizer, stop_token_ids(model_dir, tokenizer), args.system,
                       config.get("max_position_embeddings"), max_new_tokens=args.max_new_tokens,
                       do_sample=not args.greedy,
                       repetition_penalty=args.repetition_penalty, **sampling)


def main(argv=None) -> int:
    """Entry point of ``genesis-chat``; returns the exit status."""
    args = build_parser().parse_args(argv)
    problems = check_args(args)
    if problems:
        print("genesis-chat: error: " + "; ".join(problems), file=sys.stderr)
        return 2
    try:
        session = open_session(args)
    except (ModelDirError, OSError, ValueError) as exc:
        print(f"genesis-chat: error: {exc}", file=sys.stderr)
        return 2
    generator = None
    if args.seed is not None:
        generator = genesis.Generator(next(iter(session.model.parameters())).device)
        generator.manual_seed(args.seed)

    def answer(text: str) -> bool:
        streamer = TextPrinter(session.tokenizer) if args.stream else None
        try:
            reply = session.ask(text, streamer=streamer, generator=generator)
        except PromptTooLongError as exc:
            print(f"genesis-chat: error: {exc}", file=sys.stderr)
            return False
        if streamer is None:
            print(reply)
        return True

    if args.prompt is not None:
        return 0 if answer(args.prompt) else 2
    print(f"genesis-chat: {args.model_dir} ('/reset' forgets the conversation, '/exit' quits)")
    while True:
        try:
            text = input("\nyou> ").strip()
        except (EOFError, KeyboardInterrupt):
            print()
            return 0
        if text in ("/exit", "/quit"):
            return 0
        if text == "/reset":
            session.reset()
            print("(conversation reset)")
            continue
        if text:
            print("model> ", end="", flush=True)
            answer(text)


if __name__ == "__main__":
    sys.exit(main())
