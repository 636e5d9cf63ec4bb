"""``memory_summary``: the allocator's state as a printable table."""

from __future__ import annotations

from genesis_cuda.allocator import CachingAllocator, format_bytes


def summary(index: int, alloc: CachingAllocator | None, abbreviated: bool = False) -> str:
    """Format the statistics (and, unless ``abbreviated``, the segments) of one allocator."""
    width = 75
    lines = ["=" * width, f" genesis CUDA memory summary, device {index}".ljust(width), "-" * width]
    if alloc is None:
        lines += [" (device not used by genesis yet: nothing allocated)", "=" * width]
        return "\n".join(lines)
    s = alloc.stats()
    rows = [
        ("Allocated memory", format_bytes(s["allocated_bytes.all.current"]),
         format_bytes(s["allocated_bytes.all.peak"])),
        ("Reserved memory", format_bytes(s["reserved_bytes.all.current"]),
         format_bytes(s["reserved_bytes.all.peak"])),
        ("Cached, unused", format_bytes(s["inactive_split_bytes.all.current"]), ""),
        ("Segments", str(s["segment.all.current"]), ""),
    ]
    lines.append(f" {'Metric':<28}{'Current':>22}{'Peak':>22}")
    lines.append("-" * width)
    lines += [f" {name:<28}{cur:>22}{peak:>22}" for name, cur, peak in rows]
    lines.append("-" * width)
    counters = [
        ("Allocations", s["num_allocs"]), ("Frees", s["num_frees"]),
        ("Cache hits", s["num_cache_hits"]), ("Driver allocations", s["num_segment_allocs"]),
        ("Driver frees", s["num_segment_frees"]), ("Pending cross-stream frees",
                                                    s["num_pending_frees"]),
        ("Alloc retries (cache flushed)", s["num_alloc_retries"]),
        ("Out-of-memory errors", s["num_ooms"]),
    ]
    lines += [f" {name:<50}{value:>22}" for name, value in counters]
    if alloc.limit is not None:
        lines.append(f" {'Per-process limit':<50}{format_bytes(alloc.limit):>22}")
    if not abbreviated:
        lines.append("-" * width)
        lines.append(" Segments (address, pool, size: chunks as state:size)")
        for seg in alloc.snapshot():
            chunks = ", ".join(f"{c['state']}:{format_bytes(c['size'])}" for c in seg["chunks"])
            lines.append(f"  0x{seg['address']:x} {seg['pool']:<5} "
                         f"{format_bytes(seg['total_size']):>10}: {chunks}")
    lines.append("=" * width)
    return "\n".join(lines)
