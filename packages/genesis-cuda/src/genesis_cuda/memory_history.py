"""Allocation history: where the memory alive at the peak was allocated.

``record_memory_history()`` makes one device's caching allocator write down every
allocation (its address, size and the Python stack that asked for it) and every free;
``memory_history_report()`` replays that record, finds the moment the allocated total was
highest, and groups the blocks alive then by the stack that allocated them. It answers
"what is this peak made of?", the question ``max_memory_allocated`` cannot (torch's
counterpart is ``torch.cuda.memory._record_memory_history`` with its snapshot viewer).

Recording wraps the allocator's ``malloc`` and ``free`` on the instance; stopping removes
the wrappers, so the allocator's own hot paths are untouched when nothing records. Blocks
already alive when recording starts are part of the record, with no stack.

Example:
    >>> genesis.cuda.record_memory_history()
    >>> train_step()
    >>> print(genesis.cuda.memory_history_report(top=10))
    >>> genesis.cuda.record_memory_history(enabled=False)
"""

from __future__ import annotations

import sys

from genesis_cuda.allocator import format_bytes

__all__ = ["AllocationHistory", "format_report"]

_UNKNOWN = ()  # the stack of a block allocated before recording started


class AllocationHistory:
    """The record of one allocator's allocations and frees since ``start`` (or ``clear``).

    Args:
        alloc: the ``CachingAllocator`` to record.
        max_frames: Python frames kept per allocation, innermost first.

    Attributes:
        initial: address -> (size, stack) of the blocks alive when the record began.
        events: ``(address, size, stack)`` for an allocation, ``(address, -size, None)``
            for a free, in order.
    """

    def __init__(self, alloc, max_frames: int = 12):
        if max_frames < 1:
            raise ValueError(f"record_memory_history: max_frames must be >= 1, got {max_frames}")
        self.alloc = alloc
        self.max_frames = max_frames
        self._live: dict[int, tuple] = {}  # address -> (size, stack), kept up to date
        self._stacks: dict[tuple, tuple] = {}  # one tuple object per distinct stack
        self.initial: dict[int, tuple] = {}
        self.events: list[tuple] = []

    # ----------------------------------------------------------- recording
    def start(self) -> None:
        """Wrap the allocator's ``malloc`` and ``free``; the blocks alive now are the
        record's initial state."""
        alloc = self.alloc
        held = {id(c) for by_size in alloc._held.values() for cs in by_size.values() for c in cs}
        for head in alloc.pools.segments.values():
            chunk = head
            while chunk is not None:  # owned by a Storage: allocated and not held for reuse
                if chunk.allocated and id(chunk) not in held:
                    self._live[chunk.ptr] = (chunk.size, _UNKNOWN)
                chunk = chunk.next
        self.clear()
        malloc, free = alloc.malloc, alloc.free

        def recording_malloc(nbytes, stream=None):
            storage = malloc(nbytes, stream)
            stack = self._stack()
            self._live[storage.ptr] = (storage.size, stack)
            self.events.append((storage.ptr, storage.size, stack))
            return storage

        def recording_free(chunk):
            # (a free deferred while the allocator is busy comes back through here: the
            # address is no longer live then, and is not recorded twice)
            entry = self._live.pop(chunk.ptr, None)
            if entry is not None:
                self.events.append((chunk.ptr, -entry[0], None))
            free(chunk)

        alloc.malloc, alloc.free = recording_malloc, recording_free

    def stop(self) -> None:
        """Remove the wrappers: the allocator's own methods serve again."""
        for name in ("malloc", "free"):
            self.alloc.__dict__.pop(name, None)

    def clear(self) -> None:
        """Start the record afresh from the blocks alive now (as ``reset_peak_memory_stats``
        restarts the peak)."""
        self.initial = dict(self._live)
        self.events = []

    def _stack(self) -> tuple:
        """The caller's frames outside this module, innermost first, as (file, line, name)."""
        frame, frames = sys._getframe(2), []
        while frame is not None and len(frames) < self.max_frames:
            code = frame.f_code
            frames.append((code.co_filename, frame.f_lineno, code.co_name))
            frame = frame.f_back
        stack = tuple(frames)
        return self._stacks.setdefault(stack, stack)

    # ------------------------------------------------------------ replay
    def peak(self) -> tuple[int, dict]:
        """The highest allocated total in the record, and address -> (size, stack) of the
        blocks alive at that moment (the first time it was reached)."""
        total = sum(size for size, _ in self.initial.values())
        best, best_at = total, 0
        for i, (_ptr, size, _stack) in enumerate(self.events):
            total += size
            if total > best:
                best, best_at = total, i + 1
        live = dict(self.initial)
        for ptr, size, stack in self.events[:best_at]:
            if size > 0:
                live[ptr] = (size, stack)
            else:
                live.pop(ptr, None)
        return best, live

    def live(self) -> dict:
        """address -> (size, stack) of the blocks alive now."""
        return dict(self._live)


def by_stack(blocks: dict) -> list[tuple[int, int, tuple]]:
    """``(bytes, count, stack)`` per distinct allocating stack, largest first."""
    groups: dict[tuple, list] = {}
    for size, stack in blocks.values():
        g = groups.setdefault(stack, [0, 0])
        g[0] += size
        g[1] += 1
    return sorted(((b, n, s) for s, (b, n) in groups.items()), key=lambda g: -g[0])


def format_report(history: AllocationHistory, top: int = 15, frames: int = 6,
                  at: str = "peak") -> str:
    """The ``top`` allocating stacks of the blocks alive at the record's peak (``at="peak"``)
    or now (``at="now"``), each with its bytes, block count and ``frames`` innermost frames."""
    if at == "peak":
        total, blocks = history.peak()
        title = f"peak of the record: {format_bytes(total)} allocated"
    elif at == "now":
        blocks = history.live()
        total = sum(size for size, _ in blocks.values())
        title = f"alive now: {format_bytes(total)} allocated"
    else:
        raise ValueError(f"memory_history_report: at must be 'peak' or 'now', got {at!r}")
    groups = by_stack(blocks)
    lines = [f"{title} in {len(blocks)} blocks, {len(groups)} allocating stacks"]
    for nbytes, count, stack in groups[:top]:
        lines.append(f"{format_bytes(nbytes):>12}  {count:6d} blocks  "
                     f"({100 * nbytes / max(total, 1):.1f}%)")
        if not stack:
            lines.append("    (allocated before recording started)")
        for filename, line, name in stack[:frames]:
            lines.append(f"    {_short(filename)}:{line} {name}")
    rest = groups[top:]
    if rest:
        lines.append(f"{format_bytes(sum(g[0] for g in rest)):>12}  in {len(rest)} more stacks")
    return "\n".join(lines)


def _short(filename: str) -> str:
    """A path from its package folder on (``genesis/...``, ``genesis_cuda/...``, the tool)."""
    for marker in ("/site-packages/", "/src/"):
        if marker in filename:
            return filename.rsplit(marker, 1)[1]
    return filename
