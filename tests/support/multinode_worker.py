"""One rank of the two-node test (tests/distributed/test_multinode.py), run by torchrun.

It joins the world from torchrun's environment alone (``init_process_group("gloo")``), then
trains with DistributedDataParallel and with fully_shard beside one process on the whole
batch, and writes what it saw to ``<out>/rank<R>.json``.
"""

from __future__ import annotations

import copy
import json
import os
import sys

import torch

torch.set_num_threads(1)

import fsdp_workers  # noqa: E402 - (this directory is on sys.path: it holds the script)

import genesis  # noqa: E402
import genesis.distributed as dist  # noqa: E402
from genesis import nn  # noqa: E402


def ddp_losses(rank: int, world: int) -> tuple[list, list]:
    """DDP on this rank's rows beside one process on the whole batch (SGD, 3 steps)."""
    x, y = fsdp_workers.batch()
    reference = fsdp_workers.make_model()
    model = dist.DistributedDataParallel(copy.deepcopy(reference))
    rows = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
    curves = []
    for net, xs, ys in ((reference, x, y), (model, x[rows], y[rows])):
        opt = genesis.optim.SGD(net.parameters(), lr=0.1)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(xs), ys)
            loss.backward()
            opt.step()
            seen = loss.detach().clone()
            if net is model:
                dist.all_reduce(seen, op=dist.ReduceOp.AVG)
            losses.append(float(seen))
        curves.append(losses)
    return curves[0], curves[1]


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ref, ddp = ddp_losses(rank, world)
    fsdp = fsdp_workers.training(rank, world)
    report = {"rank": rank, "world": world, "node": int(os.environ["GROUP_RANK"]),
              "ddp": ddp, "ddp_ref": ref, "fsdp": fsdp["losses"],
              "fsdp_ref": fsdp["ref_losses"]}
    dist.destroy_process_group()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(sys.argv[1])
