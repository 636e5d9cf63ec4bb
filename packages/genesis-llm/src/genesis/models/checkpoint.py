"""Hugging Face checkpoints: ``from_pretrained`` and ``save_pretrained``.

A model directory holds ``config.json`` and either ``model.safetensors`` or shards
``model-0000i-of-0000n.safetensors`` listed in ``model.safetensors.index.json``. Loading
first reads every shard's header and checks names and shapes against the model, so a
wrong checkpoint fails at once with one error naming every missing, unexpected and
mis-shaped tensor; then it copies tensor by tensor onto the device.
"""

from __future__ import annotations

import contextlib
import json
import os
import re

import genesis
from genesis.models.config import load_config
from genesis.models.safetensors_io import load_tensor, read_header, save_tensors
from genesis.nn import init

__all__ = ["CheckpointMixin", "checkpoint_files"]

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# Non-parameter tensors older checkpoints carry (RoPE tables): skipped, as transformers does.
_IGNORED = re.compile(r"rotary_emb\.inv_freq$")


def checkpoint_files(model_dir: str | os.PathLike) -> list[str]:
    """The safetensors files of ``model_dir`` (one, or the shards of its index)."""
    single = os.path.join(model_dir, SINGLE_FILE)
    index = os.path.join(model_dir, INDEX_FILE)
    if os.path.isfile(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        return [os.path.join(model_dir, name) for name in sorted(set(weight_map.values()))]
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
            ValueError: tensors missing, unexpected or of the wrong shape (all named).

        Example::

            >>> model = AutoModelForCausalLM.from_pretrained("Qwen2.5-0.5B-Instruct",
            ...                                              dtype=genesis.bfloat16)
        """
        config = load_config(model_dir)
        if dtype is None:
            dtype = getattr(genesis, config.dtype) if config.dtype else genesis.float32
        files = checkpoint_files(model_dir)
        with _skip_init():  # load_checkpoint checks that every parameter gets a value
            model = cls(config, device=device, dtype=dtype)
        model.load_checkpoint(files)
        return model

    def load_checkpoint(self, files: list[str]) -> None:
        """Copy the tensors of ``files`` into the parameters, after checking them all."""
        expected = self._expected_tensors()
        headers, where, errors = [], {}, []
        for path in files:
            header, start = read_header(path)
            headers.append((path, header, start))
            for name, info in header.items():
                if _IGNORED.search(name):
                    continue
                if name == "lm_head.weight" and self.config.tie_word_embeddings:
                    continue  # a tied head: the embedding is the weight
                where[name] = path
                if name in expected and tuple(info["shape"]) != tuple(expected[name].shape):
                    errors.append(f"  {name}: checkpoint {list(info['shape'])}, model "
                                  f"{list(expected[name].shape)}")
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
            for path, header, start in headers:
                for name, info in header.items():
                    if where.get(name) != path:
                        continue
                    param = expected[name]
                    param.copy_(load_tensor(path, info, start, param.device, param.dtype))

    def save_pretrained(self, save_dir: str | os.PathLike,
                        max_shard_size: int | str = "5GB") -> None:
        """Write ``config.json`` and the weights as safetensors, in shards past
        ``max_shard_size`` (with ``model.safetensors.index.json``), as transformers does.

        Args:
            save_dir: the directory (created if needed).
            max_shard_size: bytes per shard at most (a bigger single tensor gets its own
                shard), e.g. ``"2GB"``.
        """
        limit = _parse_size(max_shard_size)
        os.makedirs(save_dir, exist_ok=True)
        config = self.config.to_dict()
        config["dtype"] = str(self.dtype).removeprefix("genesis.")
        with open(os.path.join(save_dir, "config.json"), "w") as f:
            json.dump(config, f, indent=2, sort_keys=True)
        shards, size = [{}], 0
        for name, t in self._expected_tensors().items():
            nbytes = t.numel() * t.element_size()
            if shards[-1] and size + nbytes > limit:
                shards.append({})
                size = 0
            shards[-1][name] = t
            size += nbytes
        for stale in (SINGLE_FILE, INDEX_FILE):  # never leave an old layout beside the new one
            if os.path.exists(os.path.join(save_dir, stale)):
                os.remove(os.path.join(save_dir, stale))
        metadata = {"format": "pt"}
        if len(shards) == 1:
            save_tensors(shards[0], os.path.join(save_dir, SINGLE_FILE), metadata)
            return
        weight_map, total = {}, 0
        for i, shard in enumerate(shards, 1):
            name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
            save_tensors(shard, os.path.join(save_dir, name), metadata)
            for key, t in shard.items():
                weight_map[key] = name
                total += t.numel() * t.element_size()
        with open(os.path.join(save_dir, INDEX_FILE), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f,
                      indent=2, sort_keys=True)
