"""``genesis.profiler``: per-op counts and times, and a memory summary (torch.profiler's shape).

Example:
    >>> with genesis.profiler.profile() as prof:
    ...     loss = model(x).sum()
    ...     loss.backward()
    >>> print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))
"""

from genesis.profiler.profiler import (
    EventList,
    FunctionEvent,
    FunctionEventAvg,
    profile,
    record_function,
)

__all__ = ["EventList", "FunctionEvent", "FunctionEventAvg", "profile", "record_function"]
