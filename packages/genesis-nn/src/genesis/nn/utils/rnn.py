"""Variable-length sequences for recurrent layers: ``PackedSequence`` and torch's helpers
that pad, pack and unpack batches of sequences of different lengths.

A packed batch stores only real steps, time-major: step ``t`` holds one row for each of the
``batch_sizes[t]`` sequences still running, longest sequences first. ``sorted_indices`` says
which original batch entry each sorted position holds (``None`` when the batch was already
sorted); ``unsorted_indices`` is its inverse. ``batch_sizes`` stays on the CPU, as in torch.
Packing and unpacking are one ``index_select`` each (row positions worked out on the host
from the lengths), so gradients flow back to the padded inputs at linear cost.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

import genesis
from genesis import Tensor

__all__ = ["PackedSequence", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence",
           "pack_sequence", "unpad_sequence", "unpack_sequence", "invert_permutation"]


class _PackedFields(NamedTuple):
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None
    unsorted_indices: Tensor | None


class PackedSequence(_PackedFields):
    """A batch of variable-length sequences packed time-major (what RNN layers accept).

    Made by ``pack_padded_sequence`` or ``pack_sequence``, not by hand.

    Args:
        data: ``(sum(lengths), *)``, the steps of every sequence, time-major.
        batch_sizes: 1-d int64 CPU tensor, the number of sequences running at each step.
        sorted_indices: original batch index of each sorted position, or ``None``.
        unsorted_indices: the inverse permutation (computed when omitted).

    Example::

        >>> from genesis.nn.utils.rnn import pack_sequence
        >>> p = pack_sequence([genesis.ones(3, 2), genesis.ones(1, 2)])
        >>> p.batch_sizes.tolist()
        [2, 1, 1]
    """

    def __new__(cls, data: Tensor, batch_sizes: Tensor | None = None,
                sorted_indices: Tensor | None = None, unsorted_indices: Tensor | None = None):
        if batch_sizes is None:
            raise ValueError("PackedSequence needs batch_sizes; build one with "
                             "pack_padded_sequence or pack_sequence")
        if unsorted_indices is None and sorted_indices is not None:
            unsorted_indices = invert_permutation(sorted_indices)
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs) -> PackedSequence:
        """The same sequence with ``data`` (and the indices' device) moved/cast like
        ``Tensor.to``; ``batch_sizes`` stays on the CPU.

        Args:
            *args, **kwargs: as ``Tensor.to``.

        Returns:
            A ``PackedSequence`` (``self`` when nothing changes).
        """
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        sorted_indices, unsorted_indices = (
            None if t is None else t.to(data.device)
            for t in (self.sorted_indices, self.unsorted_indices))
        return type(self)(data, self.batch_sizes, sorted_indices, unsorted_indices)

    def cpu(self) -> PackedSequence:
        """``self.to("cpu")``.

        Returns:
            A ``PackedSequence`` on the CPU.
        """
        return self.to("cpu")

    def cuda(self, device=None) -> PackedSequence:
        """``self.to(device or "cuda")``.

        Args:
            device: a CUDA device (default: the current one).

        Returns:
            A ``PackedSequence`` on that device.
        """
        return self.to(device if device is not None else "cuda")

    @property
    def is_cuda(self) -> bool:
        """Whether ``data`` is on a CUDA device."""
        return self.data.is_cuda


def invert_permutation(permutation: Tensor | None) -> Tensor | None:
    """The inverse of a permutation tensor (``None`` stays ``None``).

    Args:
        permutation: a 1-d int64 tensor holding ``0 .. n-1`` in some order.

    Returns:
        ``inv`` with ``inv[permutation[i]] = i``, on ``permutation``'s device.
    """
    if permutation is None:
        return None
    positions = genesis.arange(permutation.shape[0], device=permutation.device)
    # inv[permutation[i]] = i, on the permutation's device (no host round trip)
    return genesis.zeros_like(permutation).scatter(0, permutation, positions)


def _lengths_list(lengths) -> list[int]:
    if isinstance(lengths, Tensor):
        if lengths.ndim != 1:
            raise ValueError(f"lengths must be a 1-d tensor or a list, got shape "
                             f"{list(lengths.shape)}")
        return [int(v) for v in lengths.cpu().tolist()]
    return [int(v) for v in lengths]


def pack_padded_sequence(input: Tensor, lengths, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded batch of sequences (the padding is dropped).

    Args:
        input: ``(T, B, *)`` (``(B, T, *)`` if ``batch_first``), padded.
        lengths: each sequence's length, a list or a 1-d CPU int64 tensor.
        batch_first: the batch is dim 0 of ``input``.
        enforce_sorted: require ``lengths`` in decreasing order; with ``False`` the batch is
            sorted here and the permutation kept in the result.

    Returns:
        A ``PackedSequence``.

    Example::

        >>> from genesis.nn.utils.rnn import pack_padded_sequence
        >>> pack_padded_sequence(genesis.zeros(4, 2, 3), [2, 4],
        ...                      enforce_sorted=False).batch_sizes.tolist()
        [2, 2, 1, 1]
    """
    sizes = _lengths_list(lengths)
    if input.ndim < 2:
        raise ValueError(f"pack_padded_sequence: input must have at least 2 dims (time and "
                         f"batch), got shape {list(input.shape)}")
    batch_dim = 0 if batch_first else 1
    if len(sizes) != input.shape[batch_dim]:
        raise ValueError(f"Expected `len(lengths)` to be equal to batch_size, but got "
                         f"{len(sizes)} (batch_size={input.shape[batch_dim]})")
    if any(n <= 0 for n in sizes):
        raise RuntimeError("Length of all samples has to be greater than 0, but found an "
                           f"element in 'lengths' that is <= 0: {sizes}")
    sorted_indices = None
    if enforce_sorted:
        if any(a < b for a, b in zip(sizes, sizes[1:])):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when "
                               "`enforce_sorted` is True. You can pass `enforce_sorted=False` "
                               f"to pack_padded_sequence and/or pack_sequence; got {sizes}")
    else:
        order = np.argsort(-np.asarray(sizes), kind="stable")
        sizes = [sizes[i] for i in order]
        sorted_indices = genesis.tensor(order.astype(np.int64), device=input.device)
        input = input.index_select(batch_dim, sorted_indices)
    if batch_first:
        input = input.transpose(0, 1)                              # (T, B, *)
    if sizes[0] > input.shape[0]:
        raise ValueError(f"pack_padded_sequence: a length of {sizes[0]} is longer than the "
                         f"input's {input.shape[0]} time steps")
    batch_sizes = np.array([sum(1 for n in sizes if n > t) for t in range(sizes[0])])
    steps, batch = input.shape[0], input.shape[1]
    # one gather of the real rows of the (T*B, *) padded batch (step t: rows t*B .. t*B+B_t)
    cols = np.arange(batch)[None]
    rows = (np.arange(len(batch_sizes))[:, None] * batch + cols)[cols < batch_sizes[:, None]]
    flat = input.reshape(steps * batch, *input.shape[2:])          # (T*B, *)
    data = flat.index_select(0, genesis.tensor(rows, device=input.device))  # (sum B_t, *)
    return PackedSequence(data, genesis.tensor(batch_sizes, dtype=genesis.int64),
                          sorted_indices, None)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False,
                        padding_value: float = 0.0, total_length: int | None = None
                        ) -> tuple[Tensor, Tensor]:
    """Undo ``pack_padded_sequence``: a padded batch in the original order, and the lengths.

    Args:
        sequence: a ``PackedSequence``.
        batch_first: return ``(B, T, *)`` instead of ``(T, B, *)``.
        padding_value: the value of the padding.
        total_length: pad to this many steps (at least the longest length).

    Returns:
        ``(padded, lengths)``; ``lengths`` is a CPU int64 tensor in the original batch order.
    """
    sizes = [int(b) for b in sequence.batch_sizes.tolist()]
    data, batch = sequence.data, sizes[0]
    steps = len(sizes)
    if total_length is not None:
        if total_length < steps:
            raise ValueError("Expected total_length to be at least the length of the longest "
                             f"sequence in input, but got total_length={total_length} and max "
                             f"sequence length being {steps}")
        steps = total_length
    # one gather from the packed rows plus a padding row (index len(data)) into (T*B, *)
    counts = np.zeros(steps, dtype=np.int64)
    counts[:len(sizes)] = sizes                                    # B_t, 0 past the end
    starts = np.cumsum(counts) - counts                            # first row of step t
    cols = np.arange(batch)[None]
    rows = np.where(cols < counts[:, None], starts[:, None] + cols, data.shape[0])  # (T, B)
    pad_row = genesis.full((1, *data.shape[1:]), padding_value, dtype=data.dtype,
                           device=data.device)
    source = genesis.cat([data, pad_row], 0)                       # (sum B_t + 1, *)
    index = genesis.tensor(rows.reshape(-1).astype(np.int64), device=data.device)
    padded = source.index_select(0, index).reshape(steps, batch, *data.shape[1:])  # (T, B, *)
    lengths = np.array([sum(1 for b in sizes if b > i) for i in range(batch)], dtype=np.int64)
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(1, sequence.unsorted_indices)
        lengths = lengths[np.asarray(sequence.unsorted_indices.cpu().numpy())]
    if batch_first:
        padded = padded.transpose(0, 1)                            # (B, T, *)
    return padded, genesis.tensor(lengths)


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack sequences of different lengths into one padded batch.

    Args:
        sequences: tensors ``(L_i, *)`` with the same trailing dims.
        batch_first: return ``(B, T, *)`` instead of ``(T, B, *)``.
        padding_value: the value of the padding.
        padding_side: ``"right"`` (after each sequence) or ``"left"``.

    Returns:
        ``(T, B, *)`` (or ``(B, T, *)``), ``T`` the longest length.

    Example::

        >>> from genesis.nn.utils.rnn import pad_sequence
        >>> pad_sequence([genesis.ones(3), genesis.ones(1)], batch_first=True).tolist()
        [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
    """
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    sequences = list(sequences)
    if not sequences:
        raise RuntimeError("pad_sequence: received an empty list of sequences")
    tail = tuple(sequences[0].shape[1:])
    for i, s in enumerate(sequences):
        if tuple(s.shape[1:]) != tail:
            raise RuntimeError(f"pad_sequence: sequence {i} has shape {list(s.shape)}, but "
                               f"sequence 0 has trailing dims {list(tail)}")
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        missing = longest - s.shape[0]
        if missing:
            fill = genesis.full((missing, *tail), padding_value, dtype=s.dtype,
                                device=s.device)
            s = genesis.cat([s, fill] if padding_side == "right" else [fill, s], 0)
        padded.append(s)                                           # (T, *)
    return genesis.stack(padded, 0 if batch_first else 1)


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of sequences of different lengths.

    Args:
        sequences: tensors ``(L_i, *)``, longest first unless ``enforce_sorted=False``.
        enforce_sorted: require decreasing lengths (else sort, keeping the permutation).

    Returns:
        A ``PackedSequence``.
    """
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths,
                                enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences: Tensor, lengths, batch_first: bool = False
                   ) -> list[Tensor]:
    """Split a padded batch back into its sequences.

    Args:
        padded_sequences: ``(T, B, *)`` (or ``(B, T, *)`` if ``batch_first``).
        lengths: each sequence's length.
        batch_first: the batch is dim 0.

    Returns:
        A list of ``(L_i, *)`` tensors.
    """
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)        # (B, T, *)
    return [padded_sequences[i].narrow(0, 0, n) for i, n in enumerate(_lengths_list(lengths))]


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    """Split a ``PackedSequence`` back into its sequences (original order).

    Args:
        packed_sequences: a ``PackedSequence``.

    Returns:
        A list of ``(L_i, *)`` tensors.
    """
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
