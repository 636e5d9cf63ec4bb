"""``genesis.profiler.profile``: which ops ran, how often, for how long, and what memory did.

A profile is a ``genesis.dispatch.DispatchMode``: while it is active every op call (and
every graph node's backward run) passes through it and is timed; with no mode active that
costs the dispatcher one list check per op, so profiling is free when off.
``record_function`` adds named user ranges; times of ops inside a range count towards its
total but not its self time, as in torch.

Device time is optional (``sync_device=True``): after each op the observer synchronises the
device and charges the op the time until the queue drained. That serialises the GPU with the
host, so the totals describe each op alone, not an overlapped run.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass

from genesis.atomic_write import atomic_write
from genesis.backends import registry
from genesis.dispatch import DispatchMode

__all__ = ["profile", "record_function", "FunctionEvent", "FunctionEventAvg", "EventList"]

_active: list[profile] = []  # profilers currently collecting (record_function reports here)


@dataclass
class FunctionEvent:
    """One op call or user range: name, host interval (ns), optional device time (ns)."""

    name: str
    start_ns: int
    end_ns: int
    device_ns: int = 0
    self_ns: int = 0  # filled in after collection: duration minus nested events
    is_user_range: bool = False

    @property
    def cpu_time_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class FunctionEventAvg:
    """Aggregated statistics of every event with one name (a row of ``key_averages``).

    Times are in microseconds, as torch reports them.
    """

    key: str
    count: int = 0
    cpu_time_total: float = 0.0
    self_cpu_time_total: float = 0.0
    device_time_total: float = 0.0
    cpu_time_min: float = float("inf")
    cpu_time_max: float = 0.0
    is_user_range: bool = False

    @property
    def cpu_time(self) -> float:
        """Average host time per call (us)."""
        return self.cpu_time_total / self.count if self.count else 0.0

    @property
    def self_cpu_time(self) -> float:
        return self.self_cpu_time_total / self.count if self.count else 0.0

    @property
    def device_time(self) -> float:
        return self.device_time_total / self.count if self.count else 0.0

    # torch spells device time "cuda_time"; keep both spellings
    cuda_time_total = property(lambda self: self.device_time_total)
    cuda_time = property(lambda self: self.device_time)

    def add(self, ev: FunctionEvent) -> None:
        t = ev.cpu_time_ns / 1e3
        self.count += 1
        self.cpu_time_total += t
        self.self_cpu_time_total += ev.self_ns / 1e3
        self.device_time_total += ev.device_ns / 1e3
        self.cpu_time_min = min(self.cpu_time_min, t)
        self.cpu_time_max = max(self.cpu_time_max, t)
        self.is_user_range = ev.is_user_range


_SORT_KEYS = {
    "cpu_time_total": lambda r: r.cpu_time_total,
    "self_cpu_time_total": lambda r: r.self_cpu_time_total,
    "cpu_time": lambda r: r.cpu_time,
    "cpu_time_avg": lambda r: r.cpu_time,
    "self_cpu_time": lambda r: r.self_cpu_time,
    "device_time_total": lambda r: r.device_time_total,
    "cuda_time_total": lambda r: r.device_time_total,
    "self_cuda_time_total": lambda r: r.device_time_total,
    "self_device_time_total": lambda r: r.device_time_total,
    "device_time": lambda r: r.device_time,
    "cuda_time": lambda r: r.device_time,
    "count": lambda r: r.count,
}


def _fmt_us(us: float) -> str:
    """torch's time format: ``812.000us``, ``1.234ms``, ``2.500s``."""
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def _fmt_pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.2f}%" if whole > 0 else "0.00%"


class EventList(list):
    """Rows of ``FunctionEventAvg`` (or ``FunctionEvent``) with a printable ``table``."""

    def __init__(self, rows=(), *, self_cpu_total_us: float = 0.0, has_device: bool = False,
                 memory: dict | None = None) -> None:
        super().__init__(rows)
        self.self_cpu_total_us = self_cpu_total_us
        self.has_device = has_device
        self.memory = memory or {}

    def table(self, sort_by: str | None = None, row_limit: int = 100,
              max_name_column_width: int = 55, header: str | None = None) -> str:
        """A text table like torch's ``key_averages().table()``.

        Args:
            sort_by: a column key (``'cpu_time_total'``, ``'self_cpu_time_total'``,
                ``'cpu_time'``, ``'device_time_total'``/``'cuda_time_total'``, ``'count'``);
                sorted descending. ``None`` keeps first-seen order.
            row_limit: at most this many rows (``-1``: all).
            max_name_column_width: names longer than this are cut with ``...``.
            header: an optional title line.

        Returns:
            The table as a string (rows, then the total self CPU time and a memory summary).
        """
        rows = [r for r in self if isinstance(r, FunctionEventAvg)]
        if sort_by is not None:
            if sort_by not in _SORT_KEYS:
                raise ValueError(f"table(sort_by={sort_by!r}): unknown key; choose one of "
                                 f"{', '.join(sorted(_SORT_KEYS))}")
            rows.sort(key=_SORT_KEYS[sort_by], reverse=True)
        if row_limit is not None and row_limit >= 0:
            rows = rows[:row_limit]
        total = self.self_cpu_total_us
        name_w = max([len("Name")] + [min(len(r.key), max_name_column_width) for r in rows])
        cols = ["Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
        if self.has_device:
            cols += ["Device total", "Device time avg"]
        cols += ["# of Calls"]
        widths = [max(len(c), 12) for c in cols]
        sep = "-" * name_w + "  " + "  ".join("-" * w for w in widths)
        lines = []
        if header:
            lines.append(header)
        lines += [sep, "Name".ljust(name_w) + "  " +
                  "  ".join(c.rjust(w) for c, w in zip(cols, widths)), sep]
        for r in rows:
            name = r.key if len(r.key) <= max_name_column_width else \
                r.key[:max_name_column_width - 3] + "..."
            vals = [_fmt_pct(r.self_cpu_time_total, total), _fmt_us(r.self_cpu_time_total),
                    _fmt_pct(r.cpu_time_total, total), _fmt_us(r.cpu_time_total),
                    _fmt_us(r.cpu_time)]
            if self.has_device:
                vals += [_fmt_us(r.device_time_total), _fmt_us(r.device_time)]
            vals.append(str(r.count))
            lines.append(name.ljust(name_w) + "  " +
                         "  ".join(v.rjust(w) for v, w in zip(vals, widths)))
        lines.append(sep)
        lines.append(f"Self CPU time total: {_fmt_us(total)}")
        if self.has_device:
            dev_total = sum(r.device_time_total for r in self
                            if isinstance(r, FunctionEventAvg) and not r.is_user_range)
            lines.append(f"Self device time total: {_fmt_us(dev_total)}")
        lines += _memory_lines(self.memory)
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.table()


def _memory_lines(memory: dict) -> list[str]:
    """The memory summary: one block per device with numeric statistics, start -> end."""
    lines = []
    for dev, (before, after) in memory.items():
        keys = [k for k in after if isinstance(after[k], (int, float))]
        if not keys:
            continue
        lines.append(f"Memory summary ({dev}):")
        width = max(len(k) for k in keys)
        for k in keys:
            b, a = before.get(k, 0), after[k]
            unit = _fmt_bytes if "bytes" in k else str
            lines.append(f"  {k.ljust(width)}  {unit(b):>12} -> {unit(a):>12}  "
                         f"(delta {unit(a - b) if unit is str else _fmt_bytes(a - b, True)})")
    return lines


def _fmt_bytes(n, signed: bool = False) -> str:
    sign = "-" if n < 0 else ("+" if signed else "")
    n = abs(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{sign}{n:.0f}{unit}" if unit == "B" else f"{sign}{n:.2f}{unit}"
        n /= 1024
    return f"{sign}{n}"


def _device_memory_stats() -> dict:
    """``{device_name: stats}`` for every loaded non-CPU backend's devices."""
    out = {}
    for backend in registry.loaded_backends():
        if backend.name == "cpu":
            continue
        try:
            count = backend.device_count()
            for i in range(count):
                out[f"{backend.name}:{i}"] = dict(backend.memory_stats(i) or {})
        except Exception:  # a backend without statistics contributes nothing
            continue
    return out


def _device_synchronizer():
    """A zero-arg callable that waits for every loaded accelerator, or None without one."""
    backends = [b for b in registry.loaded_backends() if b.name != "cpu"]
    if not backends:
        return None

    def sync() -> None:
        for b in backends:
            b.synchronize(None)
    return sync


class profile:  # noqa: N801 - torch's name
    """Context manager that records every op run inside it.

    Args:
        enabled: record at all (``False`` makes the context a no-op).
        profile_memory: take a memory summary (the backends' ``memory_stats``) at entry and
            exit.
        sync_device: measure device time by synchronising after every op (only when an
            accelerator backend is loaded; slows the run down).
        record_shapes, with_stack, activities: accepted for torch compatibility.

    Example:
        >>> with genesis.profiler.profile() as prof:
        ...     y = (genesis.randn(64, 64) @ genesis.randn(64, 64)).relu().sum()
        ...     y.backward()
        >>> print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))
    """

    def __init__(self, enabled: bool = True, *, profile_memory: bool = True,
                 sync_device: bool = False, record_shapes: bool = False,
                 with_stack: bool = False, activities=None, use_device=None) -> None:
        self.enabled = enabled
        self.profile_memory = profile_memory
        self.sync_device = sync_device or use_device is not None
        self._events: list[FunctionEvent] = []
        self._memory: dict = {}
        self._sync = None
        self._t0 = self._t1 = 0

    # -- collection
    def _observe(self, name: str, start: int, end: int) -> None:
        device_ns = 0
        if self._sync is not None:
            self._sync()
            device_ns = time.perf_counter_ns() - start
        self._events.append(FunctionEvent(name, start, end, device_ns))

    def _timed(self, name: str, run):
        start = time.perf_counter_ns()
        out = run()
        self._observe(name, start, time.perf_counter_ns())
        return out

    def __enter__(self) -> profile:
        if not self.enabled:
            return self
        self._events = []
        self._sync = _device_synchronizer() if self.sync_device else None
        if self.profile_memory:
            self._mem_before = _device_memory_stats()
        _active.append(self)
        self._t0 = time.perf_counter_ns()
        self._mode = _ProfilerMode(self)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if not self.enabled:
            return
        self._mode.__exit__()
        if self._sync is not None:
            self._sync()
        self._t1 = time.perf_counter_ns()
        _active.remove(self)
        if self.profile_memory:
            after = _device_memory_stats()
            self._memory = {d: (self._mem_before.get(d, {}), s) for d, s in after.items()}
        _compute_self_times(self._events)

    # -- results
    def events(self) -> EventList:
        """Every recorded event in start order."""
        return EventList(sorted(self._events, key=lambda e: e.start_ns),
                         self_cpu_total_us=self._self_total_us(),
                         has_device=self._sync is not None, memory=self._memory)

    def _self_total_us(self) -> float:
        return sum(e.self_ns for e in self._events) / 1e3

    def key_averages(self) -> EventList:
        """Events grouped by name: counts, total/self/avg host times, device times."""
        groups: dict[str, FunctionEventAvg] = {}
        for ev in sorted(self._events, key=lambda e: e.start_ns):
            row = groups.get(ev.name)
            if row is None:
                row = groups[ev.name] = FunctionEventAvg(ev.name)
            row.add(ev)
        return EventList(groups.values(), self_cpu_total_us=self._self_total_us(),
                         has_device=self._sync is not None, memory=self._memory)

    def table(self, sort_by: str | None = None, row_limit: int = 100, **kwargs) -> str:
        """Shorthand for ``key_averages().table(...)``."""
        return self.key_averages().table(sort_by=sort_by, row_limit=row_limit, **kwargs)

    def memory_summary(self) -> dict:
        """``{device: (stats_at_entry, stats_at_exit)}`` from the backends' ``memory_stats``."""
        return dict(self._memory)

    @property
    def total_time_us(self) -> float:
        """Wall time of the profiled block (us)."""
        return (self._t1 - self._t0) / 1e3

    def export_chrome_trace(self, path: str | os.PathLike) -> None:
        """Write the events as a Chrome trace (open in chrome://tracing or Perfetto).

        The file is replaced atomically (``genesis.atomic_write``): a failed or killed export
        leaves the previous trace at ``path`` as it was.

        Args:
            path: the JSON file to write; its directory must exist.

        Example:
            >>> prof.export_chrome_trace("trace.json")
        """
        trace = [{"name": e.name, "ph": "X", "ts": (e.start_ns - self._t0) / 1e3,
                  "dur": e.cpu_time_ns / 1e3, "pid": 0, "tid": 0,
                  "cat": "user_annotation" if e.is_user_range else "cpu_op"}
                 for e in self._events]
        with atomic_write(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": trace}, f)


class _ProfilerMode(DispatchMode):
    """Times every op call and graph-node backward for its ``profile``: an op's own inner
    ops are part of its time; the ops of a backward formula are events of their own."""

    def __init__(self, prof: profile) -> None:
        self.prof = prof

    def __genesis_dispatch__(self, op, args, kwargs):
        return self.prof._timed(op.name, lambda: op(*args, **kwargs))

    def __genesis_backward__(self, node, run):
        return self.prof._timed(node.name(), run)


def _compute_self_times(events: list[FunctionEvent]) -> None:
    """Self time = duration minus the durations of directly nested events."""
    events.sort(key=lambda e: (e.start_ns, -e.end_ns))
    stack: list[FunctionEvent] = []
    child_ns: dict[int, int] = defaultdict(int)
    for ev in events:
        while stack and stack[-1].end_ns <= ev.start_ns:
            stack.pop()
        if stack and ev.end_ns <= stack[-1].end_ns:
            child_ns[id(stack[-1])] += ev.cpu_time_ns
        stack.append(ev)
    for ev in events:
        ev.self_ns = max(0, ev.cpu_time_ns - child_ns[id(ev)])


class record_function:  # noqa: N801 - torch's name
    """Label a block of code; it shows as its own row in the profiler table.

    Example:
        >>> with genesis.profiler.profile() as prof:
        ...     with genesis.profiler.record_function("forward"):
        ...         y = model(x)
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._start = 0

    def __enter__(self) -> record_function:
        self._start = time.perf_counter_ns()
        return self

    def __exit__(self, *exc) -> None:
        end = time.perf_counter_ns()
        for prof in _active:
            prof._events.append(FunctionEvent(self.name, self._start, end, is_user_range=True))

