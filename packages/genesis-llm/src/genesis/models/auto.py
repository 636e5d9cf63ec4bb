"""``AutoModelForCausalLM``: the right model for a directory's or config's ``model_type``."""

from __future__ import annotations

import os

from genesis.models.config import Qwen2Config
from genesis.models.qwen import QwenForCausalLM

__all__ = ["AutoModelForCausalLM"]


class AutoModelForCausalLM:
    """Entry points named as transformers': every supported family (``qwen2``, ``qwen3``,
    ``qwen2_moe``, ``qwen3_moe``) is a ``QwenForCausalLM`` configured by its config class."""

    def __init__(self) -> None:
        raise TypeError("use AutoModelForCausalLM.from_pretrained(dir) or .from_config(config)")

    @staticmethod
    def from_pretrained(model_dir: str | os.PathLike, dtype=None,
                        device=None) -> QwenForCausalLM:
        """Load a Hugging Face model directory; see ``QwenForCausalLM.from_pretrained``."""
        return QwenForCausalLM.from_pretrained(model_dir, dtype=dtype, device=device)

    @staticmethod
    def from_config(config: Qwen2Config, dtype=None, device=None) -> QwenForCausalLM:
        """A freshly initialised model for ``config``."""
        return QwenForCausalLM(config, device=device, dtype=dtype)
