"""Saving and restoring a fine-tuning run exactly.

A checkpoint is one ``genesis.save`` file, ``OUT/checkpoints/step-NNNNNNN.safetensors``,
holding everything the next step depends on: the weights (float32 master copies, bit for
bit), the optimizer's moments, the schedule, the global step, the RNG state, the log so far
and the settings that fix the data order. The rows of any step are a function of the seed
and the step number (``sft_data.step_rows``), so nothing about the data is stored: a
resumed run repeats the uninterrupted one's losses exactly.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import genesis
from genesis.safetensors_file import CheckpointError

CHECKPOINT_DIR = "checkpoints"
_NAME = re.compile(r"^step-(\d+)\.(?:safetensors|sharded)$")  # (.sharded: sft_fsdp's)


def checkpoint_path(out: Path, step: int) -> Path:
    """Where the checkpoint after global step ``step`` lives."""
    return out / CHECKPOINT_DIR / f"step-{step:07d}.safetensors"


def list_checkpoints(out: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every complete checkpoint under ``out``, oldest first.

    A sharded checkpoint (a ``step-N.sharded`` directory, ``--fsdp``) is complete once its
    ``index.json`` is written, last; a run killed while saving one leaves a directory
    without it, which is not listed, so ``--resume`` continues from the newest whole one.
    (A single-file checkpoint is whole whenever it exists: ``genesis.save`` is atomic.)
    """
    folder = out / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), folder / name) for name in os.listdir(folder)
             if (m := _NAME.match(name))]
    return sorted((step, path) for step, path in found
                  if not path.is_dir() or (path / "index.json").is_file())


def save_checkpoint(out: Path, step: int, model, optimizer, scheduler, history: dict,
                    settings: dict, keep: int) -> Path:
    """Write the run's state after ``step`` and drop all but the newest ``keep`` checkpoints.

    Args:
        out: the run's output folder.
        step: global optimizer steps done.
        model: the (unwrapped) model.
        optimizer, scheduler: their ``state_dict`` is stored.
        history: the log so far (lists of numbers).
        settings: the settings a resume must match (see ``check_settings``).
        keep: checkpoints to keep (at least 1).

    Returns:
        The path written.
    """
    path = checkpoint_path(out, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    genesis.save({
        "step": step,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": genesis.get_rng_state(),
        "history": history,
        "settings": settings,
    }, str(path))
    for _, old in list_checkpoints(out)[:-max(1, keep)]:
        old.unlink()
    return path


def load_checkpoint(path: Path, model, optimizer, scheduler, device) -> tuple[int, dict, dict]:
    """Restore a run's state from ``path`` into model, optimizer and scheduler.

    Args:
        path: a file from ``save_checkpoint``.
        model, optimizer, scheduler: built as for a fresh run; their states are replaced.
        device: where the model lives.

    Returns:
        ``(step, history, settings)``.

    Raises:
        CheckpointError: the file is malformed, or is not a genesis-sft checkpoint of this
            model (the message names the file and what does not fit).
    """
    state = genesis.load(str(path), map_location=str(device))
    kinds = {"step": int, "model": dict, "optimizer": dict, "scheduler": dict,
             "rng": genesis.Tensor, "history": dict, "settings": dict}
    wrong = [k for k, kind in kinds.items()
             if not isinstance(state, dict) or not isinstance(state.get(k), kind)]
    if wrong:
        raise CheckpointError(f"{path}: not a genesis-sft checkpoint (no valid "
                              f"{', '.join(wrong)}); resume only from the checkpoints/ a "
                              "genesis-sft run wrote")
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        genesis.set_rng_state(state["rng"])
        history = {k: list(v) for k, v in state["history"].items()}
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise CheckpointError(f"{path}: the checkpoint does not fit this run's model or "
                              f"optimizer ({type(exc).__name__}: {exc})") from None
    return int(state["step"]), history, dict(state["settings"])


def check_settings(saved: dict, current: dict) -> None:
    """Refuse to resume with settings that change the data order or the schedule.

    Raises:
        ValueError: naming each setting whose value differs, with both values.
    """
    diffs = [f"{k}: checkpoint {saved.get(k)!r}, now {current.get(k)!r}"
             for k in sorted(set(saved) | set(current)) if saved.get(k) != current.get(k)]
    if diffs:
        raise ValueError("cannot resume: these settings differ from the checkpoint's "
                         "(a resumed run must repeat the same steps):\n  " + "\n  ".join(diffs))
