"""A fake CUDA driver for the caching allocator's logic tests (no GPU needed)."""

from __future__ import annotations

MiB = 1 << 20


class FakeOOM(RuntimeError):
    pass


class FakeEvent:
    def __init__(self):
        self.stream = None
        self.done = True
        self.order = 0  # when it was last recorded (events on one stream complete in order)


class FakeOps:
    """A bump allocator over ``capacity`` bytes with controllable events."""

    def __init__(self, capacity: int = 1 << 34):
        self.capacity = capacity
        self.used = 0
        self.next_ptr = 1 << 32
        self.live: dict[int, int] = {}
        self.mallocs = 0
        self.frees = 0
        self.events: list[FakeEvent] = []
        self.synced: list[FakeEvent] = []
        self.device_syncs = 0
        self.queries = 0  # event_query calls (each one a driver call on the GPU)
        self._records = 0

    def malloc(self, nbytes):
        if self.used + nbytes > self.capacity:
            return None
        ptr = self.next_ptr
        self.next_ptr += nbytes + (2 * MiB)  # gaps: segments are never adjacent
        self.used += nbytes
        self.live[ptr] = nbytes
        self.mallocs += 1
        return ptr

    def free(self, ptr):
        self.used -= self.live.pop(ptr)
        self.frees += 1

    def mem_info(self):
        return self.capacity - self.used, self.capacity

    def event_create(self):
        ev = FakeEvent()
        self.events.append(ev)
        return ev

    def event_record(self, event, stream):
        self._records += 1
        event.stream, event.order = stream, self._records
        event.done = False  # the test completes it with finish(stream)

    def event_query(self, event):
        self.queries += 1
        return event.done

    def event_synchronize(self, event):
        event.done = True
        self.synced.append(event)

    def synchronize(self):
        self.device_syncs += 1
        for ev in self.events:
            ev.done = True

    def finish(self, stream, count=None):
        """Complete the work queued on ``stream``: all of it, or (``count``) the events
        recorded there first, oldest first, as a stream runs."""
        waiting = sorted((ev for ev in self.events if ev.stream == stream and not ev.done),
                         key=lambda ev: ev.order)
        for ev in waiting if count is None else waiting[:count]:
            ev.done = True
