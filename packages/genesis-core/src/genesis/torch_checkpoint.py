"""Bring a ``torch.save`` checkpoint over: read it without arbitrary unpickling, write
safetensors that ``genesis.load`` (and any safetensors reader) opens.

genesis never unpickles (``genesis.load`` reads safetensors only), so a torch checkpoint is
converted once, here: ``torch.load(..., weights_only=True)`` reads it, which rebuilds only
tensors, containers and plain values and refuses every other class, so no code from the file
runs. The tensors are written as a flat dict: nested dicts (and lists) are flattened with dots
(``{"model": {"fc.weight": w}}`` becomes ``"model.fc.weight"``); values that are not tensors
(an epoch number, optimizer hyperparameters) are refused, naming each one, unless
``skip_non_tensors`` drops them (they are listed in the result). The write is atomic.

Command line (genesis-core's console script)::

    genesis-convert-torch model.pt model.safetensors [--skip-non-tensors]

Example:
    >>> from genesis.torch_checkpoint import convert_torch_checkpoint
    >>> convert_torch_checkpoint("resnet.pt", "resnet.safetensors").tensors[:2]
    ['conv1.weight', 'bn1.weight']
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import sys
from typing import NamedTuple

import torch

from genesis import serialization
from genesis.creation import from_dlpack

# torch dtypes that safetensors and genesis both have
_SUPPORTED = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.bfloat16, torch.float32, torch.float64}


class TorchCheckpointError(ValueError):
    """A file cannot be converted: not a torch checkpoint, needs arbitrary unpickling, or holds
    something safetensors cannot store (the message names the file and the entry)."""


class Conversion(NamedTuple):
    """What ``convert_torch_checkpoint`` wrote and left out.

    Attributes:
        tensors: the names of the tensors written, in the checkpoint's order.
        skipped: ``"name (type)"`` of each non-tensor value dropped (``skip_non_tensors``).
    """

    tensors: list[str]
    skipped: list[str]


def convert_torch_checkpoint(src: str | os.PathLike, dst: str | os.PathLike, *,
                             skip_non_tensors: bool = False) -> Conversion:
    """Convert the ``torch.save`` file ``src`` into the safetensors file ``dst``.

    Args:
        src: a file written by ``torch.save`` (a state dict, or nested dicts/lists of them).
        dst: the safetensors file to write (atomically; replaced if it exists).
        skip_non_tensors: drop values that are not tensors instead of refusing the file.

    Returns:
        A ``Conversion``: the tensor names written and the non-tensor values skipped.

    Raises:
        TorchCheckpointError: ``src`` is not a torch checkpoint, needs arbitrary objects
            unpickled, holds non-tensor values (without ``skip_non_tensors``), a tensor of
            a dtype safetensors lacks, or two entries flattening to one name.

    Example:
        >>> convert_torch_checkpoint("model.pt", "model.safetensors")
        >>> model.load_state_dict(genesis.load("model.safetensors"))
    """
    src, dst = os.fspath(src), os.fspath(dst)
    if not os.path.isfile(src):
        raise FileNotFoundError(f"{src}: no such file")
    if os.path.exists(dst) and os.path.samefile(src, dst):
        raise TorchCheckpointError(f"{src}: the output would overwrite the torch checkpoint; "
                                   "give another file name")
    obj = _torch_load(src)
    flat: dict[str, torch.Tensor] = {}
    skipped: list[str] = []
    _flatten(obj, "", flat, skipped, src)
    if skipped and not skip_non_tensors:
        shown = ", ".join(skipped[:8]) + (f" and {len(skipped) - 8} more" if len(skipped) > 8
                                           else "")
        raise TorchCheckpointError(
            f"{src}: holds values that are not tensors, which a safetensors file cannot "
            f"store: {shown}. Pass skip_non_tensors=True (--skip-non-tensors) to drop them, "
            "or save them separately")
    tensors = {name: _to_genesis(t, name, src) for name, t in flat.items()}
    serialization.save(tensors, dst)
    return Conversion(list(tensors), skipped)


def _looks_like_safetensors(path: str) -> bool:
    with open(path, "rb") as fh:
        head = fh.read(9)
    return len(head) == 9 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") > 1


def _torch_load(src: str):
    if _looks_like_safetensors(src):
        raise TorchCheckpointError(f"{src}: is a safetensors file already; genesis.load "
                                   "reads it as it is")
    try:
        return torch.load(src, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"[Uu]nsupported (?:global: )?GLOBAL (\S+)", str(exc))
        if "Weights only load failed" not in str(exc):
            raise TorchCheckpointError(f"{src}: not a torch.save checkpoint ({exc})") from None
        what = f" (it holds {found.group(1)})" if found else ""
        raise TorchCheckpointError(
            f"{src}: needs arbitrary Python objects unpickled{what}, which genesis never "
            "does: only tensors, containers and plain values can be converted. In torch, "
            "save the state dict instead (torch.save(model.state_dict(), path)) and "
            "convert that") from None
    except (RuntimeError, EOFError, KeyError, ValueError, IndexError,
            UnicodeDecodeError) as exc:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise TorchCheckpointError(f"{src}: not a torch.save checkpoint ({reason})") from None


def _flatten(obj, prefix: str, out: dict, skipped: list, src: str) -> None:
    """Tensors of ``obj`` into ``out`` under dotted names; other leaves into ``skipped``."""
    if isinstance(obj, torch.Tensor):
        name = prefix or "tensor"  # a checkpoint that is one bare tensor
        if name in out:
            raise TorchCheckpointError(f"{src}: two entries flatten to the name {name!r}")
        out[name] = obj
        return
    if isinstance(obj, dict):
        items = ((str(k), v) for k, v in obj.items())
    elif isinstance(obj, (list, tuple)):
        items = ((str(i), v) for i, v in enumerate(obj))
    else:
        skipped.append(f"{prefix or '<root>'} ({type(obj).__name__})")
        return
    for key, value in items:
        _flatten(value, f"{prefix}.{key}" if prefix else key, out, skipped, src)


def _to_genesis(t: torch.Tensor, name: str, src: str):
    if t.layout is not torch.strided or t.is_quantized:
        raise TorchCheckpointError(f"{src}: tensor {name!r} is {t.layout} "
                                   f"{'(quantized) ' if t.is_quantized else ''}; only dense "
                                   "tensors convert")
    if t.dtype not in _SUPPORTED:
        raise TorchCheckpointError(f"{src}: tensor {name!r} has dtype {t.dtype}, which "
                                   "genesis does not have; convert it in torch first "
                                   "(e.g. .float())")
    return from_dlpack(t.detach().contiguous())


def main(argv: list[str] | None = None) -> int:
    """``genesis-convert-torch IN OUT``: the command-line converter.

    Args:
        argv: the arguments (``sys.argv[1:]`` when None).

    Returns:
        The exit status: 0 on success, 1 when the file cannot be converted.
    """
    parser = argparse.ArgumentParser(
        prog="genesis-convert-torch",
        description="Convert a torch.save checkpoint into a safetensors file that "
                    "genesis.load reads. The checkpoint is read with "
                    "torch.load(weights_only=True): no arbitrary unpickling.")
    parser.add_argument("input", help="the torch.save file (.pt, .pth, .bin ...)")
    parser.add_argument("output", help="the safetensors file to write (atomically)")
    parser.add_argument("--skip-non-tensors", action="store_true",
                        help="drop non-tensor values (epoch, hyperparameters) instead of "
                             "refusing the file (default: refuse)")
    args = parser.parse_args(argv)
    try:
        done = convert_torch_checkpoint(args.input, args.output,
                                        skip_non_tensors=args.skip_non_tensors)
    except (TorchCheckpointError, OSError) as exc:
        print(f"genesis-convert-torch: error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(done.tensors)} tensors to {args.output}")
    if done.skipped:
        print(f"skipped {len(done.skipped)} non-tensor values: {', '.join(done.skipped)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
