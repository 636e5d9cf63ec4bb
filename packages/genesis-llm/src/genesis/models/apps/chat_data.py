"""Reading chat data: JSON Lines, one conversation a line.

Each line is an object ``{"messages": [{"role": ..., "content": ...}, ...]}`` with roles
``system``, ``user`` and ``assistant`` (``tool`` too, passed through to the chat template).
Blank lines are skipped. Every malformed line is reported, with its line number, in one
error, so a bad file is fixed in one pass instead of one line per run.
"""

from __future__ import annotations

import json
import os

from genesis.atomic_write import atomic_write

ROLES = ("system", "user", "assistant", "tool")
_MAX_REPORTED = 20  # lines named in one error; the rest are counted


class ChatDataError(ValueError):
    """A chat JSONL file has malformed lines; ``problems`` lists ``(line_number, reason)``."""

    def __init__(self, path: str, problems: list[tuple[int, str]]):
        self.path = path
        self.problems = problems
        shown = "\n".join(f"  line {n}: {why}" for n, why in problems[:_MAX_REPORTED])
        more = len(problems) - _MAX_REPORTED
        tail = f"\n  ... and {more} more" if more > 0 else ""
        super().__init__(f"{path}: {len(problems)} malformed line(s):\n{shown}{tail}")


def check_conversation(obj) -> str | None:
    """Why ``obj`` is not a valid conversation record, or None when it is.

    Args:
        obj: a decoded JSON value.

    Returns:
        A short reason naming the offending field, or None.
    """
    if not isinstance(obj, dict):
        return f"expected a JSON object, got {type(obj).__name__}"
    messages = obj.get("messages")
    if not isinstance(messages, list) or not messages:
        return 'expected a non-empty list under "messages"'
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"messages[{i}] is a {type(message).__name__}, expected an object"
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            return f"messages[{i}].role is {role!r}, expected one of {', '.join(ROLES)}"
        if not isinstance(content, str):
            return f"messages[{i}].content is {type(content).__name__}, expected a string"
    if not any(m["role"] == "assistant" for m in messages):
        return "no assistant message (nothing to learn from)"
    return None


def read_chat_jsonl(path: str | os.PathLike) -> list[list[dict]]:
    """Read every conversation of a chat JSONL file.

    Args:
        path: the ``.jsonl`` file.

    Returns:
        The conversations, each a list of ``{"role", "content"}`` messages, in file order.

    Raises:
        FileNotFoundError: no such file.
        ChatDataError: some lines are not UTF-8, not valid JSON or not valid conversations;
            the error names each such line by number.

    Example:
        >>> convs = read_chat_jsonl("train.jsonl")
        >>> convs[0][-1]["role"]
        'assistant'
    """
    path = os.fspath(path)
    conversations, problems = [], []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:  # a BOM may open the file
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                problems.append((number, f"not UTF-8 text (byte {raw[exc.start]:#04x} at "
                                         f"column {exc.start + 1})"))
                continue
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append((number, f"invalid JSON ({exc.msg} at column {exc.colno})"))
                continue
            reason = check_conversation(obj)
            if reason is not None:
                problems.append((number, reason))
                continue
            conversations.append(
                [{"role": m["role"], "content": m["content"]} for m in obj["messages"]])
    if problems:
        raise ChatDataError(path, problems)
    if not conversations:
        raise ChatDataError(path, [(0, "the file has no conversations")])
    return conversations


def write_chat_jsonl(path: str | os.PathLike, conversations: list[list[dict]]) -> None:
    """Write conversations as chat JSONL (the format ``read_chat_jsonl`` reads).

    Args:
        path: the output file (replaced atomically).
        conversations: lists of ``{"role", "content"}`` messages.
    """
    with atomic_write(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for messages in conversations:
            f.write(json.dumps({"messages": messages}, ensure_ascii=False) + "\n")
