"""``genesis-sft --fsdp``: fine-tuning with fully sharded data parallel.

The model is sharded with ``genesis.distributed.fsdp.fully_shard`` (each decoder layer,
then the whole model), so each rank holds ``1/world`` of the weights, gradients and AdamW
state. The training loop is the usual one; what changes is where state lives:

- checkpoints are sharded directories, ``OUT/checkpoints/step-NNNNNNN.sharded/`` (one
  safetensors file a rank and ``index.json``, see ``save_sharded_checkpoint``), written by
  every rank; the schedule, RNG state, log and settings travel in the index, so a resume
  repeats the uninterrupted run exactly;
- evaluation and the final ``save_pretrained`` gather the whole model on every rank first
  (``gather``), so forwards need no traffic and rank 0 writes a normal model directory.

genesis-distributed is an optional dependency of genesis-llm: this module imports it only
when a run asks for ``--fsdp``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import genesis
from genesis.models.apps import checkpoint as ckpt

SHARDED_SUFFIX = ".sharded"


def _fsdp():
    import genesis.distributed.fsdp as fsdp  # (optional dependency: see the docstring)

    return fsdp


def shard_model(model):
    """Shard ``model``'s decoder layers, then the whole model; returns ``model``."""
    fsdp = _fsdp()
    for layer in model.model.layers:
        fsdp.fully_shard(layer)
    fsdp.fully_shard(model)
    return model


def gather(model) -> None:
    """All-gather every sharded module's parameters and keep them (a collective)."""
    fsdp = _fsdp()
    for module in model.modules():
        if isinstance(module, fsdp.FSDPModule):
            module.unshard()


def release(model) -> None:
    """Undo ``gather``: back to the shards."""
    fsdp = _fsdp()
    for module in model.modules():
        if isinstance(module, fsdp.FSDPModule):
            module.reshard()


def checkpoint_dir(out: Path, step: int) -> Path:
    """Where the sharded checkpoint after global step ``step`` lives."""
    return out / ckpt.CHECKPOINT_DIR / f"step-{step:07d}{SHARDED_SUFFIX}"


def save_checkpoint(out: Path, step: int, model, optimizer, scheduler, history: dict,
                    settings: dict, keep: int, is_main: bool) -> Path:
    """Every rank writes its shard of the run's state after ``step``; rank 0 then drops all
    but the newest ``keep`` checkpoints. Arguments as ``checkpoint.save_checkpoint``."""
    path = checkpoint_dir(out, step)
    extra = {"step": step, "scheduler": scheduler.state_dict(),
             "rng": genesis.get_rng_state().tolist(), "history": history,
             "settings": settings}
    config = model.config.to_dict()
    config["dtype"] = str(model.dtype).removeprefix("genesis.")
    _fsdp().save_sharded_checkpoint(path, model, optimizer, extra=extra, config=config)
    if is_main:
        for _, old in ckpt.list_checkpoints(out)[:-max(1, keep)]:
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    return path


def load_checkpoint(path: Path, model, optimizer, scheduler, device) -> tuple[int, dict, dict]:
    """Restore a run's state from the sharded checkpoint ``path`` (any rank count may have
    written it; each rank reads its own rows). Returns ``(step, history, settings)``."""
    if not Path(path).name.endswith(SHARDED_SUFFIX):
        raise ValueError(f"{path} was written by a run without --fsdp; resume it without "
                         "--fsdp (or start this run again)")
    extra = _fsdp().load_sharded_checkpoint(path, model, optimizer)
    keys = ("step", "scheduler", "rng", "history", "settings")
    missing = [k for k in keys if not isinstance(extra, dict) or k not in extra]
    if missing:
        raise ValueError(f"{path}: not a genesis-sft checkpoint (its index lacks "
                         f"{', '.join(missing)})")
    scheduler.load_state_dict(extra["scheduler"])
    genesis.set_rng_state(genesis.tensor(extra["rng"], dtype=genesis.uint8))
    history = {k: list(v) for k, v in extra["history"].items()}
    return int(extra["step"]), history, dict(extra["settings"])
