"""Saving and restoring a fine-tuning run exactly.

A checkpoint is one ``genesis.save`` file, ``OUT/checkpoints/step-NNNNNNN.safetensors``,
holding everything the next step depends on: the weights (float32 master copies, bit for
bit), the optimizer's moments, the schedule, the global step, the RNG state, the log so far
and the settings that fix the data order. The rows of any step are a function of the seed
and the step number (``sft_data.step_rows``), so nothing about the data is stored: a
resumed run repeats the uninterrupted one's losses exactly. (With ``--fsdp`` a checkpoint is
a directory, ``step-NNNNNNN.sharded``: ``sft_fsdp``.)

A run killed while saving leaves no damage a resume trips on. A single-file checkpoint is
whole whenever it exists (``genesis.save`` is atomic; the killed writer's temporary is
removed by the next save into the folder, ``genesis.atomic_write``). A sharded one is a
directory its ranks fill, so a kill can leave it *torn* (rank files and no index, or part of
an index): ``scan_checkpoints`` tells those apart, a resume continues from the newest whole
checkpoint and names each torn one it skips, and ``remove_torn`` deletes them once the run
has been restored (``prune_checkpoints`` too, after each save), unless a temporary there
belongs to a writer that may still be at work (``genesis.atomic_write.live_temporaries``).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import genesis
from genesis.atomic_write import live_temporaries, remove_stale_temporaries
from genesis.models.apps import sft_fsdp
from genesis.safetensors_file import CheckpointError

CHECKPOINT_DIR = "checkpoints"
_NAME = re.compile(r"^step-(\d+)\.(?:safetensors|sharded)$")  # (.sharded: sft_fsdp's)


@dataclass(frozen=True)
class Unusable:
    """A checkpoint a resume cannot continue from.

    Attributes:
        step: the global step in its name.
        path: the checkpoint (a ``.sharded`` directory).
        reason: what is missing or broken, naming the file.
        torn: what a save killed before its index leaves (never a whole checkpoint:
            ``remove_torn`` deletes it); False for a finished checkpoint that lost a file,
            which is left for the user to look at.
    """

    step: int
    path: Path
    reason: str
    torn: bool


def checkpoint_path(out: Path, step: int, sharded: bool = False) -> Path:
    """Where the checkpoint after global step ``step`` lives (``sharded``: ``--fsdp``'s
    directory).

    Example:
        >>> checkpoint_path(Path("runs/sft"), 12, sharded=True).name
        'step-0000012.sharded'
    """
    suffix = sft_fsdp.SHARDED_SUFFIX if sharded else ".safetensors"
    return out / CHECKPOINT_DIR / f"step-{step:07d}{suffix}"


def scan_checkpoints(out: Path) -> tuple[list[tuple[int, Path]], list[Unusable]]:
    """The checkpoints under ``out``: the whole ones and the unusable ones.

    A sharded checkpoint is whole when its index is there and every file it lists is
    present with a valid header (``genesis.distributed.fsdp.verify_sharded_checkpoint``).

    Args:
        out: the run's output folder.

    Returns:
        ``(whole, unusable)``: ``(step, path)`` of every whole checkpoint, oldest first, and
        an ``Unusable`` for every other one.

    Raises:
        ValueError: a sharded checkpoint's index is of another format or version (it may be
            whole, but this genesis cannot tell): move it away to resume.

    Example:
        >>> whole, unusable = scan_checkpoints(Path("runs/sft"))
        >>> [(u.path.name, u.torn) for u in unusable]
        [('step-0000300.sharded', True)]
    """
    folder = out / CHECKPOINT_DIR
    if not folder.is_dir():
        return [], []
    whole, unusable = [], []
    for step, path in sorted((int(m.group(1)), folder / name) for name in os.listdir(folder)
                             if (m := _NAME.match(name))):
        problem = sft_fsdp.incomplete(path) if path.suffix == sft_fsdp.SHARDED_SUFFIX \
            else None
        if problem is None:
            whole.append((step, path))
        else:
            unusable.append(Unusable(step, path, *problem))
    return whole, unusable


def list_checkpoints(out: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every whole checkpoint under ``out``, oldest first (see
    ``scan_checkpoints``: a torn sharded checkpoint is not listed).

    Example:
        >>> [step for step, _ in list_checkpoints(Path("runs/sft"))]
        [100, 200]
    """
    return scan_checkpoints(out)[0]


def remove_torn(unusable: list[Unusable]) -> list[Path]:
    """Delete the torn checkpoints among ``unusable`` (those of ``scan_checkpoints``).

    A directory holding a temporary whose writer may still be at work (a live process of
    this host, or another host's) is kept; killed writers' temporaries go first, as
    ``genesis.atomic_write`` clears them. Checkpoints that are not torn are never touched;
    one that cannot be deleted (permissions) is left, to be skipped again.

    Args:
        unusable: from ``scan_checkpoints``.

    Returns:
        The directories deleted.

    Example:
        >>> remove_torn(scan_checkpoints(Path("runs/sft"))[1])
        [PosixPath('runs/sft/checkpoints/step-0000300.sharded')]
    """
    removed = []
    for bad in unusable:
        if not bad.torn or not bad.path.is_dir():
            continue
        remove_stale_temporaries(bad.path)
        if live_temporaries(bad.path):
            continue
        try:
            shutil.rmtree(bad.path)
        except OSError:  # (a cleanup that fails must not stop the run: it stays skipped)
            continue
        removed.append(bad.path)
    return removed


def prune_checkpoints(out: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` whole checkpoints, and the torn ones (after a save:
    the one just written is whole).

    Args:
        out: the run's output folder.
        keep: whole checkpoints to keep (at least 1).

    Returns:
        The paths deleted.

    Example:
        >>> prune_checkpoints(Path("runs/sft"), keep=2)
        [PosixPath('runs/sft/checkpoints/step-0000100.safetensors')]
    """
    whole, unusable = scan_checkpoints(out)
    removed = []
    for _, old in whole[:-max(1, keep)]:
        shutil.rmtree(old) if old.is_dir() else old.unlink()
        removed.append(old)
    return removed + remove_torn(unusable)


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
    prune_checkpoints(out, keep)
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
    if path.is_dir():
        raise CheckpointError(f"{path} was written by a run with --fsdp (a sharded checkpoint "
                              "directory); resume it with --fsdp")
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
