"""Rows to train on: whole conversations packed into rows, plain text cut into blocks.

Packing puts several short conversations in one row of at most ``seq_len`` tokens so a batch
is mostly real tokens rather than padding. A conversation is never split across rows (each
keeps its beginning and its context). Tokens in a row attend to the earlier conversations of
the same row, as in the usual packed SFT; each conversation starts with the template's own
markers, so the model learns to treat them as separate.

Rows are filled best-fit decreasing: the longest example first, each into the fullest row
it still fits in, which wastes little space and takes O(n log n).
"""

from __future__ import annotations

import bisect

from genesis.models.apps.chat_tokens import IGNORE_INDEX, Example


def pack_examples(examples: list[Example], seq_len: int) -> list[Example]:
    """Pack tokenised conversations into rows of at most ``seq_len`` tokens.

    Args:
        examples: tokenised conversations, each at most ``seq_len`` long.
        seq_len: the row length.

    Returns:
        The rows (each the concatenation of whole examples); their order is a function of
        the input alone.

    Example:
        >>> rows = pack_examples([Example([1, 2], [1, 2]), Example([3], [3])], seq_len=4)
        >>> rows[0].input_ids
        [1, 2, 3]
    """
    order = sorted(range(len(examples)), key=lambda i: -len(examples[i].input_ids))
    rows: list[list[int]] = []       # example indices per row
    free: list[tuple[int, int]] = []  # (space left, row index), sorted
    for i in order:
        n = len(examples[i].input_ids)
        if n > seq_len:
            raise ValueError(f"example {i} has {n} tokens, more than seq_len={seq_len}; "
                             "truncate or skip it first (fit_to_length)")
        at = bisect.bisect_left(free, (n, -1))
        if at < len(free):
            space, r = free.pop(at)
        else:
            space, r = seq_len, len(rows)
            rows.append([])
        rows[r].append(i)
        if space - n > 0:
            bisect.insort(free, (space - n, r))
    packed = []
    for members in rows:
        ids, labels = [], []
        for i in members:
            ids += examples[i].input_ids
            labels += examples[i].labels
        packed.append(Example(ids, labels))
    return packed


def pack_token_stream(documents: list[list[int]], seq_len: int, eos_id: int) -> list[Example]:
    """Plain-text pretraining rows: documents joined by ``eos_id``, cut into blocks.

    Args:
        documents: token ids of each document.
        seq_len: the block length.
        eos_id: the separator appended after each document.

    Returns:
        Blocks of exactly ``seq_len`` tokens labelled with themselves (the model shifts),
        then the remainder as a shorter block if it has at least two tokens.
    """
    stream: list[int] = []
    for doc in documents:
        stream += doc
        stream.append(eos_id)
    blocks = [stream[s:s + seq_len] for s in range(0, len(stream), seq_len)]
    return [Example(b, list(b)) for b in blocks if len(b) >= 2]


def pad_batch(rows: list[Example], pad_id: int, width: int | None = None,
              batch_size: int | None = None) -> tuple[list[list[int]], list[list[int]],
                                                       list[list[int]]]:
    """Right-pad rows to one width (and, with ``batch_size``, add whole rows of padding).

    A fixed ``(batch_size, width)`` gives every batch of a run the same shape, so a
    compiled model (``genesis-sft --compile``) traces one graph for every step, the last
    partial batch included. Padding changes no loss: its labels are ``IGNORE_INDEX``, and a
    padded position is a key no real token attends to (it comes after every real token of
    its row, and the attention is causal). A row added by ``batch_size`` is padding
    throughout; its mask is 1 so that its tokens attend to each other (a row whose every key
    were masked would make NaN attention weights, whose gradient would be NaN too, even
    multiplied by zero).

    Args:
        rows: the rows of one batch.
        pad_id: the token id put in the padding.
        width: the length to pad to (default: the longest row's).
        batch_size: the number of rows to return (default: ``len(rows)``).

    Returns:
        ``(input_ids, attention_mask, labels)`` as nested lists of equal lengths; padding
        has label ``IGNORE_INDEX`` and, in real rows, mask 0.

    Raises:
        ValueError: a row is longer than ``width``, or there are more rows than
            ``batch_size``.

    Example:
        >>> ids, mask, labels = pad_batch([Example([1, 2], [1, 2])], 0, width=4, batch_size=2)
        >>> ids, mask
        ([[1, 2, 0, 0], [0, 0, 0, 0]], [[1, 1, 0, 0], [1, 1, 1, 1]])
    """
    longest = max(len(r.input_ids) for r in rows)
    width = longest if width is None else width
    batch_size = len(rows) if batch_size is None else batch_size
    if longest > width or len(rows) > batch_size:
        raise ValueError(f"pad_batch: {len(rows)} rows of up to {longest} tokens do not fit "
                         f"a batch of {batch_size} rows of {width} tokens")
    ids, mask, labels = [], [], []
    for r in rows:
        pad = width - len(r.input_ids)
        ids.append(r.input_ids + [pad_id] * pad)
        mask.append([1] * len(r.input_ids) + [0] * pad)
        labels.append(r.labels + [IGNORE_INDEX] * pad)
    for _ in range(batch_size - len(rows)):
        ids.append([pad_id] * width)
        mask.append([1] * width)
        labels.append([IGNORE_INDEX] * width)
    return ids, mask, labels
