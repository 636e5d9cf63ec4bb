"""``ReduceOp`` and the error raised when a collective fails or times out."""

from __future__ import annotations

import enum


class ReduceOp(enum.Enum):
    """How ``all_reduce``, ``reduce`` and ``reduce_scatter`` combine the ranks' values.

    ``AVG`` is the sum divided by the group size (done as SUM and a division on Gloo, which
    has no average of its own; integer tensors are divided with truncation, as NCCL does).
    """

    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"


class DistBackendError(RuntimeError):
    """A collective failed in its backend: a peer died, a timeout passed, NCCL reported an
    error. The message names the operation, the rank, the group and the timeout."""
