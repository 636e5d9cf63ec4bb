"""Bodies of the multi-process tests in tests/distributed (run by dist_harness.run_ranks).

They live here, not in the test files, because spawned processes must import them by name.
"""

from __future__ import annotations


def smoke(rank, n):
    import genesis
    import genesis.distributed as dist

    t = genesis.ones(3) * (rank + 1)
    dist.all_reduce(t)
    return t.tolist()
