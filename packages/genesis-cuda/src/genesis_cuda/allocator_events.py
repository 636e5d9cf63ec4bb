"""Cross-stream frees waiting for their events, kept per stream in the order recorded.

A chunk used on other streams is freed with one event recorded on each of them
(``CachingAllocator._record_events``); it may be reused once they have all completed.
Events recorded on one stream complete in the order they were recorded (the stream runs its
work in order), so each stream's waiting frees form a queue whose oldest entry is the only
one worth asking about: when it has not completed, none behind it has. Checking every
waiting free therefore costs one driver query per stream with frees waiting, plus one per
free that has completed, however many are in flight (FSDP and DDP keep a collective's
buffers waiting on their communication stream all through a step).

The allocator is the only user; it holds one ``PendingFrees`` per device.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable


class PendingFrees:
    """The ``(event, chunk)`` pairs still waiting, per stream, oldest first.

    ``count`` is the number of pairs waiting (a chunk used on two streams counts twice).

    Example:
        >>> waiting = PendingFrees()
        >>> waiting.add(comm_stream, event, chunk)
        >>> waiting.collect(ops.event_query, release)  # release(event, chunk) once done
    """

    __slots__ = ("by_stream", "count")

    def __init__(self) -> None:
        self.by_stream: dict[int, deque] = {}
        self.count = 0

    def add(self, stream: int, event, chunk) -> None:
        """Queue ``chunk``'s ``event``, just recorded on ``stream``."""
        queue = self.by_stream.get(stream)
        if queue is None:
            queue = self.by_stream[stream] = deque()
        queue.append((event, chunk))
        self.count += 1

    def collect(self, query: Callable[[object], bool],
                done: Callable[[object, object], None]) -> None:
        """Call ``done(event, chunk)`` for every waiting pair whose event has completed,
        asking ``query(event)`` about each stream's oldest events only, until one has not.

        Args:
            query: the driver's event query (True once the event has completed).
            done: takes a completed pair (returns the event to a pool, maybe the chunk).

        The caller defers frees meanwhile (the allocator's ``_busy``): none is added while
        the queues are walked.
        """
        for queue in self.by_stream.values():
            # a pair leaves its queue only after its query said done (a query that raises
            # leaves everything in place)
            while queue and query(queue[0][0]):
                event, chunk = queue.popleft()
                self.count -= 1
                done(event, chunk)

    def drain(self, synchronize: Callable[[object], None],
              done: Callable[[object, object], None]) -> None:
        """Wait for every waiting pair, then call ``done(event, chunk)`` on each.

        Waiting for a stream's newest event waits for all of that stream's events, so this
        makes one ``synchronize(event)`` call per stream with frees waiting.
        """
        # taken out first: a free made meanwhile (the garbage collector) queues afresh
        streams, self.by_stream, self.count = self.by_stream, {}, 0
        for queue in streams.values():
            if queue:
                synchronize(queue[-1][0])
        for queue in streams.values():
            for event, chunk in queue:
                done(event, chunk)
