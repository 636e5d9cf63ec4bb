"""Bodies of the desync and rank-death tests (``tests/distributed/test_desync.py``), run on
local Gloo processes by ``dist_harness.run_ranks``. Each returns plain Python values: the
error each rank saw, and whether the group still worked afterwards."""

from __future__ import annotations

import os
import time


def _set_level(level: str | None) -> None:
    from genesis.distributed.agreement import DEBUG_ENV

    if level is None:
        os.environ.pop(DEBUG_ENV, None)
    else:
        os.environ[DEBUG_ENV] = level


def _still_works(device: str = "cpu") -> list:
    """An all_reduce after the error: the ranks are still paired up correctly."""
    import genesis
    import genesis.distributed as dist

    t = genesis.full((2,), float(dist.get_rank() + 1), device=device)
    dist.all_reduce(t)
    return t.tolist()


def mismatched_calls(rank: int, n: int, kinds: list, level: str | None,
                     device: str = "cpu") -> dict:
    """``{kind: mismatched_call(...)}`` for each of ``kinds``, one after the other in the
    same world: after each mismatch the group must still work."""
    return {kind: mismatched_call(rank, n, kind, level, device) for kind in kinds}


def mismatched_call(rank: int, n: int, kind: str, level: str | None,
                    device: str = "cpu") -> dict:
    """Rank 0 and the others make calls that differ by ``kind`` (on tensors of ``device``);
    returns the error (or None) and an all_reduce done afterwards."""
    import genesis
    import genesis.distributed as dist

    _set_level(level)
    first = rank == 0

    def ones(*shape, dtype=None):
        return genesis.ones(*shape, dtype=dtype, device=device)

    def zeros(*shape):
        return genesis.zeros(*shape, device=device)

    calls = {
        # the case: an empty tensor on one rank only
        "empty": lambda: dist.all_reduce(zeros(0) if first else ones(4)),
        "size": lambda: dist.all_reduce(ones(3 if first else 5)),
        "dtype": lambda: dist.all_reduce(ones(4, dtype=genesis.float32 if first
                                              else genesis.float64)),
        "op": lambda: dist.all_reduce(ones(4), op=dist.ReduceOp.SUM if first
                                      else dist.ReduceOp.MAX),
        "collective": lambda: (dist.all_reduce(ones(4)) if first
                               else dist.broadcast(ones(4), src=0)),
        "root": lambda: dist.broadcast(ones(4), src=0 if first else 1),
        "shape": lambda: dist.all_reduce(ones(2, 3) if first else ones(3, 2)),
        "gather": lambda: dist.all_gather_into_tensor(zeros(n * (2 if first else 3)),
                                                      ones(2 if first else 3)),
        "barrier": lambda: dist.barrier() if first else dist.all_reduce(ones(1)),
        "all_empty": lambda: dist.all_reduce(zeros(0)),
    }
    error = None
    try:
        calls[kind]()
    except dist.CollectiveMismatchError as exc:
        error = str(exc)
    return {"error": error, "after": _still_works(device)}


def all_to_all_with_an_empty_rank(rank: int, n: int) -> dict:
    """Rank 0 sends and receives nothing; the last rank sends itself 3 rows. Rank 0 must
    still take part, or the all_reduce after it pairs with the wrong call."""
    import genesis
    import genesis.distributed as dist

    last = rank == n - 1
    splits = [0] * (n - 1) + [3] if last else [0] * n
    out = genesis.zeros(3 if last else 0)
    dist.all_to_all_single(out, genesis.full((3 if last else 0,), 7.0),
                           output_split_sizes=splits, input_split_sizes=splits)
    return {"out": out.tolist(), "after": _still_works()}


def dies_mid_collective(rank: int, n: int, level: str | None) -> dict:
    """The last rank dies while the others wait inside an all_reduce; they must fail fast
    with the collective named, not hang until the timeout or abort."""
    import genesis
    import genesis.distributed as dist

    _set_level(level)
    t = genesis.ones(1 << 16)
    dist.all_reduce(t)
    dist.barrier()
    if rank == n - 1:
        time.sleep(0.5)  # the others are inside their all_reduce by now
        os._exit(3)
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        return {"error": None}
    except dist.DistBackendError as exc:
        return {"error": str(exc), "seconds": time.monotonic() - start}
    finally:
        dist.destroy_process_group()
