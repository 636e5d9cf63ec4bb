"""Hugging Face checkpoints: ``from_pretrained`` and ``save_pretrained``.

A model directory holds ``config.json`` and either ``model.safetensors`` or shards listed in
``model.safetensors.index.json``. Loading first reads every shard's header through
genesis-core's validated safetensors reader and checks names and shapes against the model (and
the index), so a wrong checkpoint fails at once with one error naming every missing,
unexpected and mis-shaped tensor; then it copies tensor by tensor onto the device. The index
may only name files inside the directory (relative paths without ``..``).

Saving never destroys the previous version before the new one is complete. Every file is
written atomically (``genesis.atomic_write``); new shards get names the current index does not
use; one rename (of ``model.safetensors`` or of the index, or the removal of an index that
``model.safetensors`` replaces) switches the directory to the new weights, and only then are
the old layout's files removed. ``config.json`` is rewritten (atomically, right after the
weights) only when its content changes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets

import genesis
from genesis.atomic_write import atomic_write, remove_durably
from genesis.dtypes import dtype_from_name
from genesis.models.config import load_config
from genesis.models.safetensors_io import load_tensor, read_header, save_tensors
from genesis.nn import init
from genesis.safetensors_file import CheckpointError, is_inside

__all__ = ["CheckpointMixin", "checkpoint_files", "read_index"]

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# Non-parameter tensors older checkpoints carry (RoPE tables): skipped, as transformers does.
_IGNORED = re.compile(r"rotary_emb\.inv_freq$")
_SHARD = re.compile(r"model-\d{5}-of-\d{5}(-[0-9a-f]{8})?\.safetensors")  # save_pretrained's


def read_index(model_dir: str | os.PathLike) -> dict[str, str] | None:
    """The shard index's ``weight_map`` (tensor name -> file path), or None without an index.

    Args:
        model_dir: the model directory.

    Returns:
        Each tensor's shard as a path inside ``model_dir``.

    Raises:
        CheckpointError: the index is not JSON, has no ``weight_map`` of names to files, or
            names a file outside ``model_dir`` (an absolute path or one with ``..``).
    """
    path = os.path.join(model_dir, INDEX_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({type(exc).__name__}: {exc})") from None
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{path}: expected a JSON object whose \"weight_map\" maps each "
                              "tensor name to its shard file")
    files = {}
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not is_inside(shard):
            raise CheckpointError(f"{path}: tensor {name!r} names the shard file {shard!r}, "
                                  "which is not a file inside the checkpoint directory (shard "
                                  "paths must be relative, without '..')")
        files[name] = os.path.join(model_dir, shard)
    return files


def checkpoint_files(model_dir: str | os.PathLike) -> list[str]:
    """The safetensors files of ``model_dir`` (one, or the shards of its index).

    Args:
        model_dir: the model directory.

    Returns:
        The file paths, sorted.

    Raises:
        FileNotFoundError: the directory has neither ``model.safetensors`` nor an index.
        CheckpointError: the index is malformed or names a file outside the directory.
    """
    index = read_index(model_dir)
    if index is not None:
        return sorted(set(index.values()))
    single = os.path.join(model_dir, SINGLE_FILE)
    if os.path.isfile(single):
        return [single]
    raise FileNotFoundError(f"{os.fspath(model_dir)!r} has no {SINGLE_FILE} or {INDEX_FILE} "
                            "(only safetensors checkpoints are supported)")


def _parse_size(size: int | str) -> int:
    """``"5GB"`` / ``"500MB"`` / bytes -> bytes."""
    if isinstance(size, int):
        return size
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]i?B)\s*", size, re.IGNORECASE)
    if not match:
        raise ValueError(f"max_shard_size {size!r}: expected bytes or e.g. '5GB'")
    unit = match.group(2).upper()
    scale = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20,
             "GIB": 2**30}[unit]
    return int(float(match.group(1)) * scale)


@contextlib.contextmanager
def _skip_init():
    """Make ``genesis.nn.init``'s in-place initialisers no-ops while a model is built whose
    every parameter the checkpoint is about to overwrite (transformers' ``no_init_weights``).
    Random init is most of the time a load takes otherwise: 13 of 15 s for a 0.5B model on
    one CPU thread."""
    names = [n for n in vars(init) if n.endswith("_") and not n.startswith("_")]
    saved = {n: getattr(init, n) for n in names}
    try:
        for n in names:
            setattr(init, n, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for n, fn in saved.items():
            setattr(init, n, fn)


class CheckpointMixin:
    """``from_pretrained`` / ``save_pretrained`` for a model whose ``state_dict`` keys are
    the checkpoint's tensor names (needs ``self.config``)."""

    def _expected_tensors(self) -> dict:
        """``{name: parameter}`` a checkpoint must provide (a tied head is not stored)."""
        expected = dict(self.state_dict())
        if self.config.tie_word_embeddings:
            expected.pop("lm_head.weight", None)
        return expected

    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, dtype=None, device=None):
        """Load a model from a Hugging Face directory (config.json + safetensors).

        Args:
            model_dir: the directory.
            dtype: parameter dtype (default: the config's ``dtype``, else float32).
            device: where to put the parameters (default CPU); each tensor goes straight
                there from the memory-mapped file.

        Raises:
            FileNotFoundError: no directory, no config.json or no safetensors files.
            NotADirectoryError: ``model_dir`` is a file.
            ValueError: ``config.json`` is malformed (the file and field are named), or
                tensors are missing, unexpected or of the wrong shape (all named).
            CheckpointError: (a ``ValueError``) a malformed index or safetensors file, named.

        Example::

            >>> model = AutoModelForCausalLM.from_pretrained("Qwen2.5-0.5B-Instruct",
            ...                                              dtype=genesis.bfloat16)
        """
        config = load_config(model_dir)
        if dtype is None:
            dtype = dtype_from_name(config.dtype) if config.dtype else genesis.float32
        files = checkpoint_files(model_dir)
        with _skip_init():  # load_checkpoint checks that every parameter gets a value
            model = cls(config, device=device, dtype=dtype)
        model.load_checkpoint(files, read_index(model_dir))
        return model

    def load_checkpoint(self, files: list[str], index: dict[str, str] | None = None) -> None:
        """Copy the tensors of ``files`` into the parameters, after checking them all.

        Args:
            files: the safetensors files.
            index: tensor name -> file, from the shard index (``read_index``); each tensor
                must be in the file the index names.

        Raises:
            CheckpointError: a file is malformed, a tensor is in two files, or a file does not
                hold what the index says.
            ValueError: tensors missing, unexpected or of the wrong shape (all named).
        """
        expected = self._expected_tensors()
        headers, where, errors = [], {}, []
        for path in files:
            header = read_header(path)
            headers.append((path, header))
            for name, entry in header.tensors.items():
                if _IGNORED.search(name):
                    continue
                if name == "lm_head.weight" and self.config.tie_word_embeddings:
                    continue  # a tied head: the embedding is the weight
                if name in where:
                    raise CheckpointError(f"tensor {name!r} is in two files: {where[name]} "
                                          f"and {path}")
                if index is not None and index.get(name) != path:
                    listed = f"puts it in {index[name]}" if name in index else "does not list it"
                    raise CheckpointError(f"{path} holds tensor {name!r}, but the index "
                                          f"({INDEX_FILE}) {listed}")
                where[name] = path
                if name in expected and entry.shape != tuple(expected[name].shape):
                    errors.append(f"  {name}: checkpoint {list(entry.shape)}, model "
                                  f"{list(expected[name].shape)}")
        if index is not None:
            absent = sorted(n for n in set(index) - set(where) if n in expected)
            if absent:
                raise CheckpointError(f"the index ({INDEX_FILE}) lists tensors its shards do "
                                      f"not hold: " + ", ".join(
                                          f"{n} (in {index[n]})" for n in absent[:10]))
        missing = sorted(set(expected) - set(where))
        unexpected = sorted(set(where) - set(expected))
        if missing or unexpected or errors:
            lines = [f"checkpoint does not match {type(self).__name__} "
                     f"({self.config.model_type}):"]
            if missing:
                lines.append(f" missing tensors ({len(missing)}): {', '.join(missing)}")
            if unexpected:
                lines.append(f" unexpected tensors ({len(unexpected)}): {', '.join(unexpected)}")
            if errors:
                lines.append(f" mis-shaped tensors ({len(errors)}):")
                lines.extend(errors)
            raise ValueError("\n".join(lines))
        with genesis.no_grad():
            for path, header in headers:
                for name in header.tensors:
                    if where.get(name) != path:
                        continue
                    param = expected[name]
                    param.copy_(load_tensor(path, header, name, param.device, param.dtype))

    def save_pretrained(self, save_dir: str | os.PathLike,
                        max_shard_size: int | str = "5GB") -> None:
        """Write ``config.json`` and the weights as safetensors, in shards past
        ``max_shard_size`` (with ``model.safetensors.index.json``), as transformers does.

        A crash or kill at any point leaves the directory loadable: the previous weights stay
        in place until the new ones are complete (see the module docstring).

        Args:
            save_dir: the directory (created if needed).
            max_shard_size: bytes per shard at most (a bigger single tensor gets its own
                shard), e.g. ``"2GB"``.

        Example::

            >>> model.save_pretrained("runs/finetuned", max_shard_size="2GB")
        """
        limit = _parse_size(max_shard_size)
        os.makedirs(save_dir, exist_ok=True)
        config = self.config.to_dict()
        config["dtype"] = str(self.dtype).removeprefix("genesis.")
        shards, size = [{}], 0
        for name, t in self._expected_tensors().items():
            nbytes = t.numel() * t.element_size()
            if shards[-1] and size + nbytes > limit:
                shards.append({})
                size = 0
            shards[-1][name] = t
            size += nbytes
        metadata = {"format": "pt"}
        index_path, single_path = (os.path.join(save_dir, n) for n in (INDEX_FILE, SINGLE_FILE))
        try:
            old = set(read_index(save_dir).values()) if os.path.isfile(index_path) else set()
        except CheckpointError:
            old = set()  # a broken index: nothing loads through it, nothing to keep
        # shards no index names: left by a save killed before its switch
        old |= {os.path.join(save_dir, n) for n in os.listdir(save_dir) if _SHARD.fullmatch(n)}
        if len(shards) == 1:
            save_tensors(shards[0], single_path, metadata)  # the switch, without an index
            _write_json_if_changed(os.path.join(save_dir, "config.json"), config)
            remove_durably(index_path)  # the switch where an index was read first
            for stale in old - {single_path}:
                remove_durably(stale)
            return
        names = [f"model-{i:05d}-of-{len(shards):05d}.safetensors"
                 for i in range(1, len(shards) + 1)]
        if old & {os.path.join(save_dir, n) for n in names}:  # keep the old shards intact
            tag = secrets.token_hex(4)
            names = [n.replace(".safetensors", f"-{tag}.safetensors") for n in names]
        weight_map, total = {}, 0
        for name, shard in zip(names, shards):
            save_tensors(shard, os.path.join(save_dir, name), metadata)
            for key, t in shard.items():
                weight_map[key] = name
                total += t.numel() * t.element_size()
        _write_json_if_changed(index_path, {"metadata": {"total_size": total},
                                            "weight_map": weight_map})  # the switch
        _write_json_if_changed(os.path.join(save_dir, "config.json"), config)
        new = {os.path.join(save_dir, n) for n in names}
        for stale in (old | {single_path}) - new:
            remove_durably(stale)


def _write_json_if_changed(path: str, obj) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically, unless the file already holds
    exactly that text (a re-save of an unchanged config rewrites nothing)."""
    text = json.dumps(obj, indent=2, sort_keys=True)
    with contextlib.suppress(OSError, UnicodeDecodeError):
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    with atomic_write(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
