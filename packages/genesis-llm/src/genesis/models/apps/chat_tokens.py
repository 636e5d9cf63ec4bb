"""A conversation -> token ids and labels, with the loss on assistant tokens only.

The text comes from the tokenizer's own chat template, so training sees exactly what chat
will feed the model. To find which characters an assistant wrote, each assistant turn ``i``
is located by rendering the conversation twice more:

    before = template(messages[:i], add_generation_prompt=True)   # ends where the reply starts
    upto   = template(messages[:i + 1])                           # ends after the reply's end mark

so the reply span is ``upto[len(before):]``: the content and the template's end-of-turn
marker (the model must learn to stop). This works for any template whose renderings of a
conversation's prefixes are prefixes of its full rendering, and says so when one is not.
The whole text is then tokenised once (a fast tokenizer's character offsets map tokens to
spans), so token boundaries are those of the full text.
"""

from __future__ import annotations

from dataclasses import dataclass

IGNORE_INDEX = -100  # label of a token the loss skips (torch's cross_entropy default)
OVERFLOW_CHOICES = ("truncate", "skip")


@dataclass
class Example:
    """One tokenised conversation: ``labels[i]`` is ``input_ids[i]`` or ``IGNORE_INDEX``."""

    input_ids: list[int]
    labels: list[int]


def _render(tokenizer, messages: list[dict], add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def assistant_spans(tokenizer, messages: list[dict]) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character spans of its assistant replies.

    Args:
        tokenizer: a ``transformers`` tokenizer with a chat template.
        messages: ``{"role", "content"}`` dicts.

    Returns:
        ``(text, spans)``: ``text[a:b]`` for each ``(a, b)`` in ``spans`` is one reply with
        its end-of-turn marker.

    Raises:
        ValueError: the template renders a prefix of the conversation as something that is
            not a prefix of the whole (the reply spans cannot be found from the text).
    """
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(f"{type(tokenizer).__name__} has no chat_template: add one to "
                         "tokenizer_config.json (genesis-sft trains through the chat template)")
    text = _render(tokenizer, messages, add_generation_prompt=False)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = _render(tokenizer, messages[:i], add_generation_prompt=True) if i else ""
        upto = _render(tokenizer, messages[: i + 1], add_generation_prompt=False)
        if not (upto.startswith(before) and text.startswith(upto)):
            raise ValueError(
                f"the chat template does not render message {i} as a continuation of the "
                "messages before it, so the assistant tokens cannot be located; use a template "
                "whose renderings of a conversation's prefixes are prefixes of the whole")
        spans.append((len(before), len(upto)))
    return text, spans


def tokenize_conversation(tokenizer, messages: list[dict]) -> Example:
    """Token ids of a conversation, labelled on its assistant replies only.

    Args:
        tokenizer: a fast ``transformers`` tokenizer with a chat template.
        messages: ``{"role", "content"}`` dicts.

    Returns:
        An ``Example``; labels are ``IGNORE_INDEX`` outside the assistant replies (labels
        are not shifted: the model shifts them).

    Example:
        >>> ex = tokenize_conversation(tok, [{"role": "user", "content": "1+1?"},
        ...                                  {"role": "assistant", "content": "2"}])
        >>> tok.decode([t for t in ex.labels if t != IGNORE_INDEX])
        '2<|im_end|>\\n'
    """
    text, spans = assistant_spans(tokenizer, messages)
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"{type(tokenizer).__name__} is a slow tokenizer; assistant masks need "
                         "a fast one (tokenizer.json) for its character offsets")
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    labels = [IGNORE_INDEX] * len(ids)
    span_index = 0
    for t, (start, end) in enumerate(offsets):
        while span_index < len(spans) and start >= spans[span_index][1]:
            span_index += 1
        if span_index == len(spans):
            break
        if end > start and start >= spans[span_index][0]:
            labels[t] = ids[t]
    return Example(list(ids), labels)


def fit_to_length(example: Example, max_length: int, overflow: str) -> Example | None:
    """Apply the user's choice for a conversation longer than ``max_length`` tokens.

    Args:
        example: a tokenised conversation.
        max_length: the context length of the run.
        overflow: ``"truncate"`` (keep the first ``max_length`` tokens) or ``"skip"``.

    Returns:
        The example (cut if truncated), or None when it is skipped or when truncation left
        no assistant token to learn from.
    """
    if overflow not in OVERFLOW_CHOICES:
        raise ValueError(f"overflow must be one of {OVERFLOW_CHOICES}, got {overflow!r}")
    if len(example.input_ids) <= max_length:
        return example
    if overflow == "skip":
        return None
    cut = Example(example.input_ids[:max_length], example.labels[:max_length])
    return cut if any(t != IGNORE_INDEX for t in cut.labels) else None
