"""Data-parallel training with genesis.distributed, launched by torchrun.

    torchrun --nproc_per_node=2 examples/ddp_train.py                 # 2 CPU processes (gloo)
    torchrun --nproc_per_node=2 examples/ddp_train.py --device cuda   # 2 GPUs (nccl)
    python examples/ddp_train.py                                      # one process, no torchrun

Every process builds the same model; DistributedDataParallel copies rank 0's weights to the
others and averages the gradients during backward, so each optimizer step is the same on
every rank. A DistributedSampler gives each rank its own slice of every epoch. Rank 0 prints
the loss and writes the checkpoint; every rank could load it back. The data is a synthetic
regression problem (a random teacher network plus noise): nothing is downloaded.
"""

from __future__ import annotations

import argparse
import os
import time

import genesis
import genesis.distributed as dist
import genesis.nn as nn
from genesis.optim import AdamW
from genesis.utils.data import DataLoader, DistributedSampler, TensorDataset


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Train an MLP with DistributedDataParallel.")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=64, help="per process")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (nccl)")
    p.add_argument("--checkpoint", default=None, help="file to save the final state into")
    p.add_argument("--accumulate", type=int, default=1,
                   help="micro-batches per optimizer step (no_sync for all but the last)")
    return p.parse_args(argv)


def make_data(samples: int) -> TensorDataset:
    """y = teacher(x) + noise, the same on every rank (a fixed seed)."""
    gen = genesis.Generator().manual_seed(1234)
    x = genesis.randn(samples, 16, generator=gen)
    w1 = genesis.randn(16, 32, generator=gen) / 4
    w2 = genesis.randn(32, 1, generator=gen) / 4
    y = (x @ w1).tanh() @ w2 + 0.01 * genesis.randn(samples, 1, generator=gen)
    return TensorDataset(x, y)


def main(argv=None) -> float:
    args = parse_args(argv)
    if "RANK" not in os.environ:  # a plain `python` run: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT",
                                                                              "29533"))
    backend = "nccl" if args.device == "cuda" else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = f"cuda:{os.environ['LOCAL_RANK']}" if args.device == "cuda" else "cpu"

    data = make_data(args.samples)
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    genesis.manual_seed(rank)  # different init per rank on purpose: DDP broadcasts rank 0's
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(),
                          nn.Linear(64, 1)).to(device)
    model = dist.DistributedDataParallel(model)
    opt = AdamW(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()

    loss_value = float("nan")
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        start, total, steps = time.perf_counter(), genesis.zeros(1, device=device), 0
        for step, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            last_micro = (step + 1) % args.accumulate == 0
            if last_micro:
                loss = loss_fn(model(x), y) / args.accumulate
                loss.backward()  # gradients averaged over ranks here
                opt.step()
                opt.zero_grad()
            else:
                with model.no_sync():  # accumulate locally, no communication
                    loss = loss_fn(model(x), y) / args.accumulate
                    loss.backward()
            total += loss.detach() * args.accumulate
            steps += 1
        dist.all_reduce(total, op=dist.ReduceOp.AVG)  # the mean loss over all ranks
        loss_value = total.item() / max(steps, 1)
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs}  loss {loss_value:.5f}  "
                  f"({steps} steps x {world} ranks, {time.perf_counter() - start:.2f} s)",
                  flush=True)

    if args.checkpoint:
        dist.save_checkpoint({"model": model.module.state_dict(), "epochs": args.epochs},
                             args.checkpoint)
        state = dist.load_checkpoint(args.checkpoint)  # what a resuming run would do
        if rank == 0:
            print(f"checkpoint {args.checkpoint}: {len(state['model'])} tensors", flush=True)
    dist.destroy_process_group()
    return loss_value


if __name__ == "__main__":
    main()
