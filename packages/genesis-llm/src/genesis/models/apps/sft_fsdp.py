"""``genesis-sft --fsdp``: fine-tuning with fully sharded data parallel.

The model is sharded with ``genesis.distributed.fsdp.fully_shard`` (each decoder layer,
then the whole model), so each rank holds ``1/world`` of the weights, gradients and AdamW
state. The training loop is the usual one; what changes is where state lives:

- checkpoints are sharded directories, ``OUT/checkpoints/step-NNNNNNN.sharded/`` (one
  safetensors file a rank and ``index.json``, see ``save_sharded_checkpoint``), written by
  every rank; the schedule, RNG state, log and settings travel in the index, so a resume
  repeats the uninterrupted run exactly; one a killed save left unfinished is told apart
  (``incomplete``) and skipped by a resume (``checkpoint.scan_checkpoints``);
- evaluation and the final ``save_pretrained`` gather the whole model on every rank first
  (``gather``), so forwards need no traffic and rank 0 writes a normal model directory.

genesis-distributed is an optional dependency of genesis-llm: this module imports it only
when a run asks for ``--fsdp``.
"""

from __future__ import annotations

from pathlib import Path

import genesis

SHARDED_SUFFIX = ".sharded"


def _fsdp():
    try:
        import genesis.distributed.fsdp as fsdp  # (optional dependency: see the docstring)
    except ImportError as exc:
        raise ImportError(f"genesis-sft --fsdp and its checkpoints (*{SHARDED_SUFFIX} "
                          f"directories) need genesis-distributed: {exc}") from exc
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


def save_checkpoint(path: Path, step: int, model, optimizer, scheduler, history: dict,
                    settings: dict) -> Path:
    """Every rank writes its shard of the run's state after ``step`` to the directory
    ``path`` (``checkpoint.checkpoint_path(out, step, sharded=True)``); returns ``path``.
    Other arguments as ``checkpoint.save_checkpoint``'s (a collective: every rank calls it).

    Example:
        >>> save_checkpoint(ckpt.checkpoint_path(out, 100, sharded=True), 100, model, opt,
        ...                 sched, history, settings)
    """
    extra = {"step": step, "scheduler": scheduler.state_dict(),
             "rng": genesis.get_rng_state().tolist(), "history": history,
             "settings": settings}
    config = model.config.to_dict()
    config["dtype"] = str(model.dtype).removeprefix("genesis.")
    _fsdp().save_sharded_checkpoint(path, model, optimizer, extra=extra, config=config)
    return path


def incomplete(path: Path) -> tuple[str, bool] | None:
    """Why the sharded checkpoint ``path`` cannot be resumed from, or None if it is whole.

    Returns:
        ``(reason, interrupted)``: ``interrupted`` is True for what a save killed before
        its index leaves (never a checkpoint: safe to delete), False for a finished one
        that lost a file (kept for the user to look at).

    Raises:
        ValueError: ``path`` holds an index of another format or version (not ours to judge).

    Example:
        >>> incomplete(Path("runs/sft/checkpoints/step-0000300.sharded"))
        ("'.../step-0000300.sharded' is not a sharded checkpoint: it has no index.json ...", True)
    """
    fsdp = _fsdp()
    try:
        fsdp.verify_sharded_checkpoint(path)
    except fsdp.IncompleteCheckpointError as exc:
        return str(exc), exc.interrupted
    return None


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
