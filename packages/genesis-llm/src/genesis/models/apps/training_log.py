"""A run's record: the JSON log and the loss-curve PNG."""

from __future__ import annotations

import json
from pathlib import Path

from genesis.atomic_write import atomic_write


def new_history() -> dict:
    """An empty log: per-step train loss and learning rate, eval loss at eval steps."""
    return {"step": [], "train_loss": [], "lr": [], "grad_norm": [],
            "eval_step": [], "eval_loss": []}


def write_json_log(path: Path, record: dict) -> None:
    """Write ``record`` as indented JSON, atomically (a reader never sees half a file)."""
    with atomic_write(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
        f.write("\n")


def plot_loss(history: dict, path: Path, title: str = "genesis-sft") -> Path:
    """Draw train (and eval) loss against the step into a PNG.

    Args:
        history: a log from ``new_history`` with at least one step.
        path: the PNG to write.
        title: the figure title.

    Returns:
        ``path``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(history["step"], history["train_loss"], label="train", linewidth=1)
    if history["eval_step"]:
        ax.plot(history["eval_step"], history["eval_loss"], "o-", label="eval")
    ax.set(xlabel="optimizer step", ylabel="cross-entropy per trained token",
           title=title)
    if min(history["train_loss"] + history["eval_loss"]) > 0:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_write(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return path
