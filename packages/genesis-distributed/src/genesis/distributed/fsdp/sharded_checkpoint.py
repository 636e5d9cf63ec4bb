"""Sharded checkpoints of a ``fully_shard``'ed model (and its optimizer), any world size.

``save_sharded_checkpoint`` has every rank write its own rows (see ``shard_files``), so no
rank ever holds a whole tensor; ``load_sharded_checkpoint`` reads back the rows this rank
owns under the *current* world size, whatever world saved them; and
``consolidate_sharded_checkpoint`` turns the directory into a Hugging Face model directory
(``config.json`` + ``model.safetensors``) for ``from_pretrained``, with no process group; and
``verify_sharded_checkpoint`` tells a whole checkpoint from one a killed save left (for a
resume that must pick the newest whole one), reading only the index and the files' headers.

Keys in the files: ``model/<state dict name>`` and ``optim/<parameter name>/<state key>``;
the optimizer's step counters and groups, the model config and the caller's ``extra``
travel in ``index.json``.
"""

from __future__ import annotations

import json
import os

import torch

import genesis
from genesis.distributed.fsdp.shard_files import (
    FORMAT,
    INDEX,
    VERSION,
    IncompleteCheckpointError,
    ShardReader,
    new_tag,
    rank_file,
    read_index,
    remove_unlisted,
    to_torch,
    write_json,
    write_tensors,
)
from genesis.distributed.fsdp.sharded_tensor import ShardedTensor
from genesis.distributed.group import resolve


def _named_state(model, optimizer) -> dict:
    """``{key: tensor}`` to save; optimizer state chunks become ``ShardedTensor``s."""
    state = {f"model/{k}": v for k, v in model.state_dict().items()}
    if optimizer is not None:
        names = {id(p): n for n, p in model.named_parameters()}
        for p, pstate in optimizer.state.items():
            for key, value in pstate.items():
                if not isinstance(value, genesis.Tensor):
                    continue
                if isinstance(p, ShardedTensor) and tuple(value.shape) == tuple(p.shape):
                    value = ShardedTensor.wrap_chunk(value, p.layout, p.shard_rank,
                                                     p.shard_group)
                state[f"optim/{names[id(p)]}/{key}"] = value
    return state


def _optimizer_meta(model, optimizer) -> dict | None:
    if optimizer is None:
        return None
    names = {id(p): n for n, p in model.named_parameters()}
    groups = []
    for group in optimizer.param_groups:
        packed = {k: (float(v) if isinstance(v, genesis.Tensor) else v)
                  for k, v in group.items() if k != "params"}
        packed["params"] = [names[id(p)] for p in group["params"]]
        groups.append(packed)
    scalars = {names[id(p)]: {k: v for k, v in s.items() if not isinstance(v, genesis.Tensor)}
               for p, s in optimizer.state.items()}
    return {"param_groups": groups, "scalars": scalars}


def save_sharded_checkpoint(directory: str | os.PathLike, model, optimizer=None, *,
                            extra: dict | None = None, config: dict | None = None,
                            group=None) -> None:
    """Save a sharded model (and optimizer) to ``directory``: one file a rank + an index.

    Every rank of the group must call it. Tensors that are not sharded (buffers, scalars)
    are written once, by the group's first rank.

    Args:
        directory: created if needed.
        model: the ``fully_shard``'ed model.
        optimizer: its optimizer, whose state is saved sharded like the parameters.
        extra: JSON-serialisable values to keep (step, data position, ...).
        config: the model's Hugging Face ``config.json`` contents, for consolidation.
        group: the process group the model is sharded over (default: the world).

    Example:
        >>> save_sharded_checkpoint("ckpt/step-100", model, opt, extra={"step": 100})
    """
    g = resolve(group)
    directory = os.fspath(directory)
    rank, world = g.rank(), g.size()
    try:
        json.dumps({"extra": extra, "config": config})
    except TypeError as exc:
        raise TypeError(f"save_sharded_checkpoint: extra and config must be JSON values: {exc}"
                        ) from exc
    state = _named_state(model, optimizer)
    # every rank writes under the names rank 0 picked: new ones if the current index uses
    # the plain ones, so the checkpoint already there stays whole until the new index is in
    tag = g.exchange_objects(new_tag(directory, world) if rank == 0 else None,
                             "save_sharded_checkpoint (file names)")[0]
    files = [rank_file(r, world, tag) for r in range(world)]
    mine, entries = {}, {}
    for key, t in state.items():
        if isinstance(t, ShardedTensor):
            layout = t.layout
            first, stop = layout.owned_rows(rank)
            if stop > first:
                mine[key] = to_torch(t.to_local()).reshape(stop - first, *layout.row_shape)
            pieces = [{"file": files[r], "rows": list(layout.owned_rows(r))}
                      for r in range(world)]
            shape = layout.global_shape
        else:
            shape = tuple(t.shape)
            if rank == 0:
                mine[key] = to_torch(t).reshape(shape[0] if shape else 1, *shape[1:])
            pieces = [{"file": files[0], "rows": [0, shape[0] if shape else 1]}]
        entries[key] = {"shape": list(shape), "dtype": str(t.dtype).removeprefix("genesis."),
                        "pieces": [p for p in pieces if p["rows"][1] > p["rows"][0]]}
    error = None
    try:
        os.makedirs(directory, exist_ok=True)
        write_tensors(os.path.join(directory, files[rank]), mine)
    except Exception as exc:  # the other ranks must hear of it rather than write an index
        error = f"{type(exc).__name__}: {exc}"
    errors = g.exchange_objects(error, "save_sharded_checkpoint")
    failed = [(g.ranks[r], e) for r, e in enumerate(errors) if e is not None]
    if failed:
        raise RuntimeError(f"save_sharded_checkpoint: rank(s) could not write to {directory}: "
                           + "; ".join(f"rank {r}: {e}" for r, e in failed))
    if rank == 0:
        index = {"format": FORMAT, "version": VERSION, "world_size": world,
                 "files": files, "tensors": entries,
                 "optimizer": _optimizer_meta(model, optimizer), "extra": extra,
                 "config": config}
        write_json(os.path.join(directory, INDEX), index)  # the switch to the new files
        remove_unlisted(directory, files)
    g.exchange_objects(None, "save_sharded_checkpoint (index written)")


def _read_into(reader: ShardReader, key: str, target) -> None:
    """Copy the saved values of ``key`` into ``target`` (a shard: its rows only)."""
    entry = reader.index["tensors"].get(key)
    if entry is None:
        raise KeyError(f"the sharded checkpoint in {reader.directory!r} has no {key!r}")
    if isinstance(target, ShardedTensor):
        layout = target.layout
        if list(layout.global_shape) != entry["shape"]:
            raise ValueError(f"{key!r}: the checkpoint's shape is {entry['shape']}, the model's "
                             f"{list(layout.global_shape)}")
        first, stop = layout.owned_rows(target.shard_rank)
        rows = reader.rows(key, first, stop)
        chunk = torch.zeros((layout.chunk_rows, *layout.row_shape), dtype=rows.dtype)
        chunk[:stop - first] = rows
        values = chunk.reshape(layout.local_shape)
    else:
        if list(target.shape) != entry["shape"]:
            raise ValueError(f"{key!r}: the checkpoint's shape is {entry['shape']}, the model's "
                             f"{list(target.shape)}")
        rows = entry["shape"][0] if entry["shape"] else 1
        values = reader.rows(key, 0, rows).reshape(entry["shape"])
    with genesis.no_grad():
        target.copy_(genesis.from_dlpack(values).to(target.device, target.dtype))


def load_sharded_checkpoint(directory: str | os.PathLike, model, optimizer=None, *,
                            group=None):
    """Load a checkpoint of ``save_sharded_checkpoint`` (saved by any world size) into a
    ``fully_shard``'ed ``model`` (and ``optimizer``): each rank reads only its rows.

    Args:
        directory: the checkpoint directory.
        model: the sharded model, built and sharded as the saved one.
        optimizer: its optimizer (made over ``model.parameters()``), restored too.
        group: the process group the model is sharded over (default: the world).

    Returns:
        the ``extra`` that was saved (None if none).

    Raises:
        FileNotFoundError: the index or a rank file is missing (named).
        ValueError: a file is corrupt, or shapes/dtypes/names do not match (named).
    """
    resolve(group)
    directory = os.fspath(directory)
    index = read_index(directory)
    reader = ShardReader(directory, index)
    for key, t in _named_state(model, None).items():
        _read_into(reader, key, t)
    if optimizer is not None:
        _load_optimizer(reader, model, optimizer)
    return index.get("extra")


def _load_optimizer(reader: ShardReader, model, optimizer) -> None:
    meta = reader.index.get("optimizer")
    if meta is None:
        raise ValueError(f"the sharded checkpoint in {reader.directory!r} has no optimizer "
                         "state")
    params = dict(model.named_parameters())
    position = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            position[id(p)] = len(position)
    saved_groups = [dict(g) for g in meta["param_groups"]]
    state = {}
    for g in saved_groups:
        missing = [n for n in g["params"] if n not in params]
        if missing:
            raise ValueError(f"optimizer state in {reader.directory!r} names parameters the "
                             f"model lacks: {missing}")
        g["params"] = [position[id(params[n])] for n in g["params"]]
    prefix = "optim/"
    for key in reader.index["tensors"]:
        if not key.startswith(prefix):
            continue
        name, _, state_key = key[len(prefix):].rpartition("/")
        p = params[name]
        entry_shape = reader.index["tensors"][key]["shape"]
        if isinstance(p, ShardedTensor) and entry_shape == list(p.layout.global_shape):
            target = ShardedTensor.wrap_chunk(
                genesis.zeros(p.shape, dtype=p.dtype, device=p.device), p.layout,
                p.shard_rank, p.shard_group)
        else:
            dtype = getattr(genesis, reader.index["tensors"][key]["dtype"])
            target = genesis.zeros(entry_shape, dtype=dtype, device=p.device)
        _read_into(reader, key, target)
        state.setdefault(position[id(p)], {})[state_key] = genesis.Tensor.detach(target)
    for name, scalars in meta["scalars"].items():
        state.setdefault(position[id(params[name])], {}).update(scalars)
    optimizer.load_state_dict({"state": state, "param_groups": saved_groups})


def verify_sharded_checkpoint(directory: str | os.PathLike) -> dict:
    """Check that ``directory`` holds a whole sharded checkpoint, without loading it.

    The index must be there and valid, and every file it lists present, with a valid
    safetensors header holding each of its pieces in the index's shape and dtype (the
    tensors' bytes are not read). Needs no process group.

    Args:
        directory: a directory written by ``save_sharded_checkpoint``.

    Returns:
        The checked index (a dict; its ``"extra"`` is what the save was given).

    Raises:
        IncompleteCheckpointError: the directory is not whole (the message names what is
            missing or broken); its ``interrupted`` is True when it is what a save stopped
            before its index leaves, False when a finished checkpoint has lost a file.
        ValueError: the index is not of this format or version (another program's, or a
            newer genesis's): it may be whole, but cannot be read here.

    Example:
        >>> verify_sharded_checkpoint("ckpt/step-100")["extra"]
        {'step': 100}
    """
    directory = os.fspath(directory)
    try:
        index = read_index(directory)
    except FileNotFoundError as exc:
        raise IncompleteCheckpointError(str(exc), interrupted=True) from None
    reader = ShardReader(directory, index)
    for key, entry in index["tensors"].items():
        for piece in entry.get("pieces", []):
            try:
                reader.check_piece(key, piece)
            except (FileNotFoundError, ValueError) as exc:
                raise IncompleteCheckpointError(str(exc), interrupted=False) from exc
    return index


def consolidate_sharded_checkpoint(directory: str | os.PathLike,
                                   output_dir: str | os.PathLike, dtype=None) -> None:
    """Write the model of a sharded checkpoint as a Hugging Face model directory
    (``model.safetensors``, and ``config.json`` when the checkpoint kept a config), which
    ``from_pretrained`` (genesis's or transformers') reads. Needs no process group.

    Args:
        directory: the sharded checkpoint.
        output_dir: the model directory to write (created if needed).
        dtype: cast floating tensors to this genesis dtype (default: as saved).

    Raises:
        FileExistsError: ``output_dir`` holds a sharded model (``model.safetensors.index.json``),
            which loaders would go on reading instead of the new ``model.safetensors``:
            nothing is written (consolidate into another directory, or save the model over
            it with ``save_pretrained``, which switches layouts safely).

    Example:
        >>> consolidate_sharded_checkpoint("ckpt/step-100", "my-model")
        >>> AutoModelForCausalLM.from_pretrained("my-model")
    """
    directory, output_dir = os.fspath(directory), os.fspath(output_dir)
    hf_index = os.path.join(output_dir, "model.safetensors.index.json")
    if os.path.exists(hf_index):
        raise FileExistsError(f"consolidate_sharded_checkpoint: {output_dir!r} holds a sharded "
                              f"model ({hf_index}), which from_pretrained would keep reading "
                              "instead of the consolidated model.safetensors; consolidate into "
                              "another directory")
    index = read_index(directory)
    reader = ShardReader(directory, index)
    tensors = {}
    for key, entry in index["tensors"].items():
        if not key.startswith("model/"):
            continue
        rows = entry["shape"][0] if entry["shape"] else 1
        value = reader.rows(key, 0, rows).reshape(entry["shape"])
        if dtype is not None and value.is_floating_point():
            value = value.to(getattr(torch, str(dtype).removeprefix("genesis.")))
        tensors[key[len("model/"):]] = value
    os.makedirs(output_dir, exist_ok=True)
    write_tensors(os.path.join(output_dir, "model.safetensors"), tensors, {"format": "pt"})
    if index.get("config") is not None:
        write_json(os.path.join(output_dir, "config.json"), index["config"])
