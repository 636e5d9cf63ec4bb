"""Opening a model directory (weights, config, tokenizer) with errors that say what is wrong."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from genesis.atomic_write import atomic_write

_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
_TOKENIZER = ("tokenizer.json", "tokenizer_config.json")


class ModelDirError(ValueError):
    """A model directory is missing or lacks a file the app needs."""


def check_model_dir(path: str | os.PathLike, need_chat_template: bool = False) -> Path:
    """Check that ``path`` holds a loadable model and tokenizer; say what is missing.

    Args:
        path: the directory (as written by ``save_pretrained``).
        need_chat_template: also require a chat template in the tokenizer config.

    Returns:
        The directory as a ``Path``.

    Raises:
        ModelDirError: naming the missing or malformed file.
    """
    p = Path(path)
    if not p.exists():
        raise ModelDirError(f"model directory {p} does not exist")
    if not p.is_dir():
        raise ModelDirError(f"{p} is a file, expected a model directory (config.json, "
                            "model.safetensors, tokenizer files)")
    config = p / "config.json"
    if not config.is_file():
        raise ModelDirError(f"{p} has no config.json: not a model directory")
    if not isinstance(_read_json(config), dict):
        raise ModelDirError(f"{config} must hold a JSON object (the model's settings)")
    if not any((p / w).is_file() for w in _WEIGHTS):
        raise ModelDirError(f"{p} has no weights ({' or '.join(_WEIGHTS)})")
    if not any((p / t).is_file() for t in _TOKENIZER):
        raise ModelDirError(f"{p} has no tokenizer ({' or '.join(_TOKENIZER)}); save one "
                            "there with tokenizer.save_pretrained")
    if need_chat_template and not _has_chat_template(p):
        raise ModelDirError(f"the tokenizer in {p} has no chat template "
                            "(tokenizer_config.json 'chat_template' or chat_template.jinja)")
    return p


def _has_chat_template(p: Path) -> bool:
    if (p / "chat_template.jinja").is_file() or (p / "chat_template.json").is_file():
        return True
    cfg = p / "tokenizer_config.json"
    if not cfg.is_file():
        return False
    settings = _read_json(cfg)
    return isinstance(settings, dict) and bool(settings.get("chat_template"))


def _read_json(path: Path):
    """The JSON value of a file, or a ``ModelDirError`` naming the file and the problem."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ModelDirError(f"{path} is not UTF-8 text ({exc.reason} at byte "
                            f"{exc.start})") from None
    except (ValueError, RecursionError) as exc:
        raise ModelDirError(f"{path} is not valid JSON: {exc}") from None


def load_tokenizer(path: str | os.PathLike, need_chat_template: bool = False):
    """The ``transformers`` tokenizer of a model directory (checked first).

    Args:
        path: the model directory.
        need_chat_template: require a chat template.

    Returns:
        A ``transformers`` tokenizer.
    """
    from transformers import AutoTokenizer

    p = check_model_dir(path, need_chat_template)
    return AutoTokenizer.from_pretrained(str(p))


def save_tokenizer(tokenizer, path: str | os.PathLike) -> None:
    """``tokenizer.save_pretrained(path)``, with every file replaced atomically.

    The files are written to a scratch folder first, then each one that differs from what
    ``path`` holds replaces it through ``genesis.atomic_write`` (an unchanged file is not
    rewritten), so a kill never leaves a torn tokenizer file.

    Args:
        tokenizer: a ``transformers`` tokenizer.
        path: the model directory (created if needed).

    Example:
        >>> save_tokenizer(tokenizer, "runs/sft")
    """
    target = Path(path)
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="genesis-tokenizer-") as scratch:
        tokenizer.save_pretrained(scratch)
        for written in sorted(Path(scratch).iterdir()):
            data = written.read_bytes()
            dest = target / written.name
            if dest.is_file() and dest.read_bytes() == data:
                continue
            with atomic_write(dest) as tmp:
                Path(tmp).write_bytes(data)


def load_model(path: str | os.PathLike, device, dtype=None):
    """The genesis causal LM of a model directory, on ``device``.

    Args:
        path: the model directory.
        device: a genesis device.
        dtype: parameter dtype (default: the checkpoint's).

    Returns:
        The model, in eval mode.
    """
    from genesis.models import AutoModelForCausalLM

    p = check_model_dir(path)
    model = AutoModelForCausalLM.from_pretrained(str(p), dtype=dtype, device=device)
    model.eval()
    return model
