"""Train a small CNN on scikit-learn's bundled 8x8 digits with Genesis.

    python examples/digits.py                  # train (seconds to a minute on a laptop CPU)
    python examples/digits.py --resume         # continue from the last checkpoint
    python examples/digits.py --epochs 2 --out /tmp/digits   # a quick run elsewhere

Everything a real training script needs, small enough to read in one sitting: a Dataset and
DataLoader, a Conv2d/ReLU/MaxPool2d/Linear model, AdamW with a warmup+cosine schedule,
checkpoints (genesis.save / genesis.load: model, optimizer, scheduler, RNG, history) with
``--resume``, a tqdm progress bar, the test accuracy, and a loss/accuracy plot (PNG).
The digits ship with scikit-learn: nothing is downloaded. Runs on the GPU when there is one.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

import genesis
import genesis.nn as nn
import genesis.nn.functional as F
from genesis.atomic_write import atomic_write
from genesis.optim import AdamW
from genesis.optim.lr_scheduler import get_cosine_schedule_with_warmup
from genesis.utils.data import DataLoader, TensorDataset, random_split


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Train a small CNN on the 8x8 digits dataset.")
    p.add_argument("--epochs", type=int, default=20, help="total epochs to train (default 20)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--weight-decay", type=float, default=1e-2)
    p.add_argument("--warmup-epochs", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("runs/digits"),
                   help="folder for the checkpoint and the plot (default runs/digits)")
    p.add_argument("--resume", action="store_true",
                   help="continue from OUT/checkpoint.safetensors if it exists")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads for the kernels (default 1: this model's ops are tiny, "
                        "and more threads only add synchronisation, badly so on a busy machine)")
    p.add_argument("--no-plot", action="store_true", help="skip writing the PNG")
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    return p.parse_args(argv)


# ----------------------------------------------------------------------------- data
def load_digits_dataset(seed: int):
    """(train, test) datasets of (1, 8, 8) float images scaled to [0, 1] and int64 labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]   # (1797, 1, 8, 8)
    labels = digits.target.astype(np.int64)                        # (1797,)
    full = TensorDataset(genesis.tensor(images), genesis.tensor(labels))
    split = genesis.Generator().manual_seed(seed)  # same split on every run and resume
    return random_split(full, [0.8, 0.2], generator=split)


# ---------------------------------------------------------------------------- model
class DigitsCNN(nn.Module):
    """(N, 1, 8, 8) -> (N, 10): two conv blocks, then a small classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(64 * 2 * 2, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))   # (N, 32, 4, 4)
        x = self.pool(F.relu(self.conv2(x)))   # (N, 64, 2, 2)
        x = x.reshape(x.shape[0], -1)          # (N, 256)
        return self.fc2(F.relu(self.fc1(x)))   # (N, 10)


# ------------------------------------------------------------------------- training
def evaluate(model, loader, device) -> tuple[float, float]:
    """(mean loss, accuracy) over a loader, without building a graph."""
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    with genesis.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            total_loss += F.cross_entropy(logits, y, reduction="sum").item()
            correct += int((logits.argmax(dim=1) == y).sum().item())
            count += y.shape[0]
    model.train()
    return total_loss / count, correct / count


def save_checkpoint(path: Path, model, opt, sched, epoch: int, history: dict,
                    shuffle_gen) -> None:
    genesis.save({
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "epoch": epoch,
        "history": history,
        "shuffle_rng": shuffle_gen.get_state(),
    }, str(path))


def plot(history: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = list(range(1, len(history["train_loss"]) + 1))
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(epochs, history["train_loss"], label="train")
    ax_loss.plot(epochs, history["test_loss"], label="test")
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy loss", title="Loss")
    ax_loss.legend()
    ax_acc.plot(epochs, [100 * a for a in history["test_acc"]], color="tab:green")
    ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="Test accuracy")
    ax_acc.grid(alpha=0.3)
    fig.suptitle("Genesis: small CNN on 8x8 digits")
    fig.tight_layout()
    with atomic_write(path) as tmp:  # (a failed or killed write keeps the previous plot)
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)


def main(argv=None) -> float:
    args = parse_args(argv)
    device = genesis.device(args.device or ("cuda" if genesis.cuda.is_available() else "cpu"))
    if device.type == "cpu" and args.threads > 0:
        genesis.set_num_threads(args.threads)
    genesis.manual_seed(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    ckpt_path = args.out / "checkpoint.safetensors"

    train_set, test_set = load_digits_dataset(args.seed)
    shuffle_gen = genesis.Generator().manual_seed(args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True,
                              generator=shuffle_gen)
    test_loader = DataLoader(test_set, batch_size=256)

    model = DigitsCNN().to(device)
    opt = AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    steps_per_epoch = len(train_loader)
    total_steps = args.epochs * steps_per_epoch
    sched = get_cosine_schedule_with_warmup(
        opt, warmup_steps=min(total_steps, int(args.warmup_epochs * steps_per_epoch)),
        total_steps=total_steps)

    start_epoch = 0
    history: dict = {"train_loss": [], "test_loss": [], "test_acc": []}
    if args.resume and ckpt_path.exists():
        state = genesis.load(str(ckpt_path), map_location=str(device))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        shuffle_gen.set_state(state["shuffle_rng"])
        history = {k: list(v) for k, v in state["history"].items()}
        start_epoch = int(state["epoch"])
        print(f"resumed from {ckpt_path} at epoch {start_epoch}")
    elif args.resume:
        print(f"no checkpoint at {ckpt_path}; starting from scratch")

    print(f"training on {device}: {len(train_set)} train / {len(test_set)} test images, "
          f"{sum(p.numel() for p in model.parameters())} parameters")
    t0 = time.perf_counter()
    progress = None
    if not args.no_progress and start_epoch < args.epochs:
        from tqdm import tqdm

        progress = tqdm(total=(args.epochs - start_epoch) * steps_per_epoch, unit="step",
                        dynamic_ncols=True, file=sys.stdout)
    for epoch in range(start_epoch, args.epochs):
        running, seen = 0.0, 0
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            running += loss.item() * y.shape[0]
            seen += y.shape[0]
            if progress is not None:
                progress.update(1)
                progress.set_postfix(epoch=epoch + 1, loss=f"{running / seen:.4f}",
                                     refresh=False)
        test_loss, test_acc = evaluate(model, test_loader, device)
        history["train_loss"].append(running / seen)
        history["test_loss"].append(test_loss)
        history["test_acc"].append(test_acc)
        if progress is not None:
            progress.set_postfix(epoch=epoch + 1, loss=f"{running / seen:.4f}",
                                 test_acc=f"{100 * test_acc:.1f}%")
        save_checkpoint(ckpt_path, model, opt, sched, epoch + 1, history, shuffle_gen)
    if progress is not None:
        progress.close()

    _, acc = evaluate(model, test_loader, device)
    print(f"test accuracy: {100 * acc:.2f}% after {args.epochs} epochs "
          f"({time.perf_counter() - t0:.1f}s of training)")
    print(f"checkpoint: {ckpt_path}")
    if not args.no_plot and history["train_loss"]:
        png = args.out / "digits.png"
        plot(history, png)
        print(f"plot: {png}")
    return acc


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    main()
