"""Supervised fine-tuning: the training loop behind ``genesis-sft``.

One optimizer step takes ``batch_size x grad_accum`` rows on each rank. Its loss is the mean
over every labelled token of the step (all micro-batches, all ranks): each micro-batch's mean
loss is weighted by its share of the step's labelled tokens before ``backward``, so
accumulation and data parallelism give the gradient of one big batch. Then the gradients are
clipped to ``max_grad_norm``, AdamW steps, and the warmup + cosine schedule advances.

Files in ``out``: the final model and tokenizer (``save_pretrained``: ``genesis-chat out``
works), ``log.json``, ``loss.png`` and ``checkpoints/step-N.safetensors``. A run refuses a
non-empty ``out`` unless told ``overwrite`` (start again) or ``resume`` (continue from the
newest checkpoint there, repeating the uninterrupted run's steps exactly). With ``fsdp``
(``--fsdp``) the model is sharded over the ranks and its checkpoints are sharded directories,
``checkpoints/step-N.sharded/`` (``sft_fsdp``).

With ``compile`` (``--compile``: the default on CUDA without FSDP, off on the CPU unless asked
for) the model is trained through ``model.compile()`` (``genesis.compile``): its forward and
backward are traced once and replayed, on CUDA as fused kernels in a CUDA graph. Every batch
then has one shape, ``batch_size x seq_len`` (``packing.pad_batch``: the last partial batch
gets whole rows of padding, which the loss ignores), so one trace serves every step.
``compile`` changes nothing in the checkpoints: the compiled call lives beside the module's
parameters, whose ``state_dict`` keys stay the model's own.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import genesis
from genesis.models.apps import checkpoint as ckpt
from genesis.models.apps import sft_fsdp
from genesis.models.apps.chat_tokens import IGNORE_INDEX, OVERFLOW_CHOICES
from genesis.models.apps.model_dir import load_model, load_tokenizer, save_tokenizer
from genesis.models.apps.packing import pad_batch
from genesis.models.apps.runtime import PRECISIONS, setup_runtime
from genesis.models.apps.sft_data import (
    build_chat_rows,
    build_pretrain_rows,
    split_eval,
    step_rows,
    steps_per_epoch,
)
from genesis.models.apps.training_log import new_history, plot_loss, write_json_log
from genesis.nn.utils import clip_grad_norm_
from genesis.optim import AdamW
from genesis.optim.lr_scheduler import get_cosine_schedule_with_warmup

# Settings that fix which rows each step sees and its learning rate: a resume must match them.
_RESUME_SETTINGS = ("data", "pretrain", "seq_len", "overflow", "pack", "batch_size",
                    "grad_accum", "epochs", "max_steps", "lr", "min_lr_ratio", "weight_decay",
                    "warmup_steps", "max_grad_norm", "eval_fraction", "seed", "precision")


@dataclass
class SFTConfig:
    """Settings of a fine-tuning run (the flags of ``genesis-sft``)."""

    model: str
    data: list[str]
    out: str
    pretrain: bool = False          # data are plain text files (packed causal LM)
    seq_len: int = 1024
    overflow: str = "truncate"      # or "skip": longer conversations
    pack: bool = True
    batch_size: int = 8             # rows per micro-batch per rank
    grad_accum: int = 1             # micro-batches per optimizer step
    epochs: float = 1.0
    max_steps: int | None = None    # overrides epochs
    lr: float = 2e-5
    min_lr_ratio: float = 0.0       # the cosine's floor, as a fraction of lr
    weight_decay: float = 0.0
    warmup_steps: int = 0
    max_grad_norm: float = 1.0      # 0 turns clipping off
    eval_fraction: float = 0.05
    eval_every: int = 0             # 0: evaluate at checkpoints and at the end
    save_every: int = 0             # 0: no intermediate checkpoints
    keep_checkpoints: int = 2
    stop_after: int | None = None   # end this session after this global step (resume later)
    seed: int = 0
    device: str | None = None
    precision: str = "auto"         # "auto" (bf16 on GPU, fp32 on CPU), "bf16", "fp32"
    threads: int | None = None      # CPU kernel threads
    resume: bool = False
    overwrite: bool = False
    fsdp: bool = False              # shard the model over the ranks (sft_fsdp)
    compile: bool | None = None     # train through model.compile(); None: compiles_on()
    progress: bool = True
    plot: bool = True
    extra: dict = field(default_factory=dict)  # recorded in the log (e.g. by a demo)

    def __post_init__(self) -> None:
        problems = [f"--{name.replace('_', '-')} must be {rule}, got {getattr(self, name)!r}"
                    for name, rule in _setting_problems(self)]
        if self.compile and self.fsdp:
            problems.append("--compile does not work with --fsdp (FSDP gathers the weights "
                            "in forward hooks through NCCL calls, which genesis.compile "
                            "cannot trace); pass --no-compile")
        if self.resume and self.overwrite:
            problems.append("--resume and --overwrite exclude each other (continue the run in "
                            "--out, or start it again)")
        if problems:
            raise ValueError("invalid settings:\n  " + "\n  ".join(problems))

    def compiles_on(self, device_type: str) -> bool:
        """Whether a run on ``device_type`` trains through ``model.compile()``.

        ``compile`` when set; else on CUDA (its fixed-shape batches replay as one CUDA graph)
        without FSDP, and eager on the CPU, where tracing costs more than replaying saves.

        Args:
            device_type: the run's device type, ``"cuda"`` or ``"cpu"``.

        Returns:
            True to compile.

        Example:
            >>> SFTConfig(model="m", data=["d"], out="o").compiles_on("cuda")
            True
        """
        if self.compile is not None:
            return self.compile
        return device_type == "cuda" and not self.fsdp


# Integer settings and their least value (None allowed where the default is None).
_INT_MINIMUM = {"seq_len": 2, "batch_size": 1, "grad_accum": 1, "max_steps": 1,
                "warmup_steps": 0, "eval_every": 0, "save_every": 0, "keep_checkpoints": 1,
                "stop_after": 1, "seed": 0, "threads": 1}
# Number settings: the allowed range, as a test and as words.
_NUMBER_RANGE = {"epochs": (lambda v: v > 0, "> 0"), "lr": (lambda v: v >= 0, ">= 0"),
                 "min_lr_ratio": (lambda v: 0 <= v <= 1, "in [0, 1]"),
                 "weight_decay": (lambda v: v >= 0, ">= 0"),
                 "max_grad_norm": (lambda v: v >= 0, ">= 0"),
                 "eval_fraction": (lambda v: 0 <= v < 1, "in [0, 1)")}


def _setting_problems(cfg: SFTConfig) -> list[tuple[str, str]]:
    """``(field, what it must be)`` for each setting of ``cfg`` no run can use."""
    problems = []
    for name, least in _INT_MINIMUM.items():
        value = getattr(cfg, name)
        optional = SFTConfig.__dataclass_fields__[name].default is None
        if not (value is None and optional or _is_int(value) and value >= least):
            problems.append((name, f"an integer >= {least}"))
    for name, (allowed, words) in _NUMBER_RANGE.items():
        value = getattr(cfg, name)
        if not ((_is_int(value) or isinstance(value, float)) and math.isfinite(value)
                and allowed(value)):
            problems.append((name, f"a finite number {words}"))
    if cfg.overflow not in OVERFLOW_CHOICES:
        problems.append(("overflow", f"one of {', '.join(OVERFLOW_CHOICES)}"))
    if cfg.compile not in (None, True, False):
        problems.append(("compile", "True, False or None (on with CUDA)"))
    if cfg.precision not in PRECISIONS:
        problems.append(("precision", f"one of {', '.join(PRECISIONS)}"))
    return problems


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def prepare_out(out: Path, resume: bool, overwrite: bool
                ) -> tuple[Path | None, list[ckpt.Unusable]]:
    """Check ``out`` may be written; return the checkpoint to resume from, if any.

    Nothing is deleted here: with ``overwrite`` the old checkpoints are removed by ``train``
    only once every input has been read and checked, and torn checkpoints only once the run
    has been restored from a whole one.

    Returns:
        ``(checkpoint, unusable)``: the newest whole checkpoint (None for a fresh run) and,
        with ``resume``, the checkpoints that cannot be resumed from (``scan_checkpoints``).

    Raises:
        FileExistsError: ``out`` is not empty and neither ``resume`` nor ``overwrite`` is set,
            or ``resume`` is set but ``out`` holds other files and no whole checkpoint.
    """
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out} is a file, expected a directory")
    entries = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if resume:
        found, unusable = ckpt.scan_checkpoints(out)
        if found:
            return found[-1][1], unusable
        if entries:
            torn = "".join(f"; {bad.path.name} cannot be used: {bad.reason}" for bad in unusable)
            raise FileExistsError(f"--resume: {out} has no checkpoints to resume from (no "
                                  "whole checkpoints/step-*), but is not empty "
                                  f"({', '.join(entries[:5])}){torn}. Pass --overwrite "
                                  "instead to start the run again")
        return None, []
    if entries and not overwrite:
        raise FileExistsError(
            f"--out {out} is not empty ({', '.join(entries[:5])}"
            f"{', ...' if len(entries) > 5 else ''}); pass --overwrite to replace what "
            "genesis-sft writes there, or --resume to continue its run")
    return None, []


def _batch_tensors(rows, pad_id: int, device, shape: tuple[int, int] | None = None):
    """``(input_ids, attention_mask, labels)`` tensors of ``rows``: padded to the longest
    row, or to ``shape`` ``(batch_size, seq_len)`` for a compiled model."""
    batch_size, width = shape if shape is not None else (None, None)
    ids, mask, labels = pad_batch(rows, pad_id, width, batch_size)
    as_tensor = lambda x: genesis.tensor(x, dtype=genesis.int64, device=device)  # noqa: E731
    return as_tensor(ids), as_tensor(mask), as_tensor(labels)


def _labelled(rows) -> int:
    """Tokens the shifted loss counts (the first label of a row predicts nothing)."""
    return sum(sum(t != IGNORE_INDEX for t in r.labels[1:]) for r in rows)


def _micro_batches(rows: list, batch_size: int) -> list[list]:
    return [rows[i:i + batch_size] for i in range(0, len(rows), batch_size)]


def evaluate(model, rows, cfg: SFTConfig, runtime, pad_id: int,
             shape: tuple[int, int] | None = None) -> float:
    """Mean loss per labelled token over ``rows`` (this rank's share, summed over ranks);
    ``shape``: the fixed batch shape of a compiled model."""
    model.eval()
    runtime.gather(model)  # FSDP: ranks may run different numbers of batches
    total, count = 0.0, 0
    with genesis.no_grad():
        for batch in _micro_batches(runtime.shard(rows), cfg.batch_size):
            n = _labelled(batch)
            if n == 0:
                continue
            ids, mask, labels = _batch_tensors(batch, pad_id, runtime.device, shape)
            with runtime.autocast():
                loss = model(ids, attention_mask=mask, labels=labels).loss
            total += float(loss.item()) * n
            count += n
    runtime.release(model)
    model.train()
    count = runtime.sum(count)
    return runtime.sum(total) / count if count else float("nan")


def accumulate_gradients(trained, micro: list[list], step_tokens: float, runtime,
                         pad_id: int, shape: tuple[int, int] | None = None) -> float:
    """Forward and backward every micro-batch of one step; return their summed token loss.

    Each micro-batch's mean loss is weighted by its share of the step's ``step_tokens``
    labelled tokens (all ranks; DDP then averages over ranks, hence the ``world_size``), so
    the gradient is that of the mean over the whole step. Only the last micro-batch lets DDP
    all-reduce. ``shape``: the fixed batch shape of a compiled model.
    """
    loss_sum = 0.0
    for k, batch in enumerate(micro):
        n = _labelled(batch)
        if n == 0:  # nothing to learn here (every label masked): its loss would be 0/0
            continue
        ids, mask, labels = _batch_tensors(batch, pad_id, runtime.device, shape)
        with runtime.no_sync(trained, enabled=k < len(micro) - 1):
            with runtime.autocast():
                loss = trained(ids, attention_mask=mask, labels=labels).loss
            (loss * (n * runtime.world_size / step_tokens)).backward()
        loss_sum += float(loss.item()) * n
    return loss_sum


def _speed(timed: tuple[list, list], runtime) -> dict:
    """This session's speed: the first step's seconds (a compiled model traces and compiles
    there) and the input tokens per second of the later steps (all ranks; real tokens, not
    padding). Evaluation and checkpoints are not counted."""
    seconds, tokens = timed
    later = sum(seconds[1:])
    return {"first_step_seconds": seconds[0] if seconds else None,
            "tokens_per_second": runtime.sum(sum(tokens[1:])) / later if later else None}


def train(cfg: SFTConfig) -> dict:
    """Run (or resume) a fine-tuning run; return its log record.

    Args:
        cfg: the run's settings.

    Returns:
        The record written to ``OUT/log.json``: settings, data statistics, history, timings
        and output paths.

    Example:
        >>> train(SFTConfig(model="tiny", data=["train.jsonl"], out="runs/sft", lr=1e-3))
    """
    runtime = setup_runtime(cfg.device, cfg.precision, fsdp=cfg.fsdp)
    if runtime.device.type == "cpu" and cfg.threads:
        genesis.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    say = print if runtime.is_main else (lambda *a, **k: None)
    resume_from, unusable = prepare_out(out, cfg.resume, cfg.overwrite)

    tokenizer = load_tokenizer(cfg.model, need_chat_template=not cfg.pretrain)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None \
        else tokenizer.eos_token_id
    if cfg.pretrain:
        rows, stats = build_pretrain_rows(cfg.data, tokenizer, cfg.seq_len)
    else:
        if len(cfg.data) != 1:
            raise ValueError(f"chat fine-tuning takes one JSONL file, got {len(cfg.data)}")
        rows, stats = build_chat_rows(cfg.data[0], tokenizer, cfg.seq_len, cfg.overflow,
                                      cfg.pack)
    train_rows, eval_rows = split_eval(rows, cfg.eval_fraction, cfg.seed)
    rows_per_step = cfg.batch_size * cfg.grad_accum * runtime.world_size
    per_epoch = steps_per_epoch(len(train_rows), rows_per_step)
    total_steps = cfg.max_steps or max(1, math.ceil(cfg.epochs * per_epoch))

    genesis.manual_seed(cfg.seed)
    model = load_model(cfg.model, runtime.device, dtype=genesis.float32)
    model.train()
    compiled = cfg.compiles_on(runtime.device.type)
    shape = (cfg.batch_size, cfg.seq_len) if compiled else None  # one shape: one trace
    if compiled:
        model.compile()  # in place: state_dict keys, the optimizer and DDP see the module
    trained = runtime.wrap(model)
    optimizer = AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = get_cosine_schedule_with_warmup(
        optimizer, warmup_steps=min(cfg.warmup_steps, total_steps), total_steps=total_steps,
        min_lr_ratio=cfg.min_lr_ratio)
    settings = {k: getattr(cfg, k) for k in _RESUME_SETTINGS}
    settings["data"] = [str(Path(d).resolve()) for d in cfg.data]
    settings["world_size"] = runtime.world_size

    if cfg.overwrite and runtime.is_main and (out / ckpt.CHECKPOINT_DIR).is_dir():
        # only now, with the data and the model read: a fresh run must not resume old state
        shutil.rmtree(out / ckpt.CHECKPOINT_DIR)
    runtime.barrier()

    step, history = 0, new_history()
    if resume_from is not None:
        for bad in unusable:
            say(f"skipping checkpoint {bad.path}: {bad.reason}")
        load = sft_fsdp.load_checkpoint if cfg.fsdp else ckpt.load_checkpoint
        step, history, saved = load(resume_from, model, optimizer, scheduler, runtime.device)
        ckpt.check_settings(saved, settings)
        say(f"resumed from {resume_from} at step {step}")
        if runtime.is_main:  # (only now: the run is restored from a whole checkpoint)
            for path in ckpt.remove_torn(unusable):
                say(f"removed {path}, which a killed save left unfinished")
    out.mkdir(parents=True, exist_ok=True)
    say(f"genesis-sft on {runtime.device} ({runtime.world_size} process(es), "
        f"{'bf16 autocast' if runtime.autocast_dtype else 'float32'}"
        f"{', compiled' if compiled else ''}): "
        f"{len(train_rows)} train / {len(eval_rows)} eval rows of <= {cfg.seq_len} tokens, "
        f"{stats.trained_tokens} trained tokens; {total_steps} steps of {rows_per_step} rows")

    last_step = min(total_steps, cfg.stop_after or total_steps)
    progress = None
    if cfg.progress and runtime.is_main and step < last_step:
        from tqdm import tqdm

        progress = tqdm(total=last_step, initial=step, unit="step", dynamic_ncols=True,
                        file=sys.stdout)
    t0 = time.perf_counter()
    eval_every = cfg.eval_every or cfg.save_every
    timed = ([], [])  # per step of this session: seconds, input tokens (real, this rank's)
    while step < last_step:
        started = time.perf_counter()
        mine = runtime.shard([train_rows[i] for i in
                              step_rows(len(train_rows), rows_per_step, cfg.seed, step)])
        micro = _micro_batches(mine, cfg.batch_size)
        step_tokens = runtime.sum(sum(_labelled(b) for b in micro))
        step_loss = accumulate_gradients(trained, micro, step_tokens, runtime, pad_id, shape)
        grad_norm = float(clip_grad_norm_(model.parameters(), cfg.max_grad_norm).item()) \
            if cfg.max_grad_norm > 0 else float("nan")
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        step += 1
        step_loss = runtime.sum(step_loss) / step_tokens
        timed[0].append(time.perf_counter() - started)
        timed[1].append(sum(len(r.input_ids) for r in mine))
        for key, value in (("step", step), ("train_loss", step_loss), ("lr", lr),
                           ("grad_norm", grad_norm)):
            history[key].append(value)
        if progress is not None:
            progress.update(1)
            progress.set_postfix(loss=f"{step_loss:.4f}", lr=f"{lr:.2e}", refresh=False)
        if eval_rows and eval_every and step % eval_every == 0 and step < total_steps:
            history["eval_step"].append(step)
            history["eval_loss"].append(evaluate(model, eval_rows, cfg, runtime, pad_id,
                                                 shape))
        periodic = cfg.save_every and step % cfg.save_every == 0
        stopping_early = step == last_step < total_steps
        if periodic or stopping_early:
            if cfg.fsdp:
                sft_fsdp.save_checkpoint(ckpt.checkpoint_path(out, step, sharded=True), step,
                                         model, optimizer, scheduler, history, settings)
                if runtime.is_main:  # (every rank's files are written)
                    ckpt.prune_checkpoints(out, cfg.keep_checkpoints)
            elif runtime.is_main:
                ckpt.save_checkpoint(out, step, model, optimizer, scheduler, history, settings,
                                     cfg.keep_checkpoints)
            runtime.barrier()
    if progress is not None:
        progress.close()
    seconds = time.perf_counter() - t0

    finished = step >= total_steps
    if finished and eval_rows and (not history["eval_step"] or history["eval_step"][-1] != step):
        history["eval_step"].append(step)
        history["eval_loss"].append(evaluate(model, eval_rows, cfg, runtime, pad_id, shape))
    record = {
        "config": {k: v for k, v in dataclasses.asdict(cfg).items() if k != "extra"},
        "extra": cfg.extra,
        "data": dataclasses.asdict(stats) | {"train_rows": len(train_rows),
                                             "eval_rows": len(eval_rows)},
        "runtime": {"device": str(runtime.device), "world_size": runtime.world_size,
                    "precision": "bf16" if runtime.autocast_dtype else "fp32",
                    "compiled": compiled,
                    # traced graphs: a forward and a backward for training, a forward for
                    # evaluation; more would mean some batch was traced anew
                    "compiled_graphs": len(model._compiled_call.graphs()) if compiled else 0},
        "speed": _speed(timed, runtime),
        "steps": step, "total_steps": total_steps, "finished": finished,
        "session_seconds": seconds, "history": history,
        "log": str(out / "log.json"), "loss_curve": None, "model_dir": None,
    }
    if finished:
        runtime.gather(model)  # FSDP: rank 0 saves the whole model
    if runtime.is_main:
        if finished:
            model.save_pretrained(str(out))
            save_tokenizer(tokenizer, out)
            record["model_dir"] = str(out)
        if cfg.plot and history["step"]:
            record["loss_curve"] = str(plot_loss(history, out / "loss.png"))
        write_json_log(out / "log.json", record)
        last_eval = f", eval loss {history['eval_loss'][-1]:.4f}" if history["eval_loss"] else ""
        speed = record["speed"]["tokens_per_second"]
        speed = f", {speed:,.0f} tokens/s" if speed else ""
        say(f"{'done' if finished else 'stopped'} at step {step}/{total_steps} in "
            f"{seconds:.1f}s{speed}: train loss {history['train_loss'][-1]:.4f}{last_eval}"
            if history["train_loss"] else f"nothing to do: {step}/{total_steps} steps done")
    runtime.barrier()
    return record
