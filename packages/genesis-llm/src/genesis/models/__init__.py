"""``genesis.models``: Qwen2/2.5, Qwen3 and Qwen-MoE language models on genesis.nn, loaded
from and saved to Hugging Face checkpoints, with batched generation.

Example::

    >>> from genesis.models import AutoModelForCausalLM
    >>> model = AutoModelForCausalLM.from_pretrained("path/to/Qwen2.5-0.5B-Instruct")
    >>> out = model.generate(genesis.tensor([[9707, 11]]), max_new_tokens=16)
"""

from genesis.models.auto import AutoModelForCausalLM
from genesis.models.config import (
    Qwen2Config,
    Qwen2MoeConfig,
    Qwen3Config,
    Qwen3MoeConfig,
    config_from_dict,
    load_config,
)
from genesis.models.loss import causal_lm_loss
from genesis.models.qwen import CausalLMOutput, QwenForCausalLM, QwenModel

__all__ = ["AutoModelForCausalLM", "QwenForCausalLM", "QwenModel", "CausalLMOutput",
           "Qwen2Config", "Qwen3Config", "Qwen2MoeConfig", "Qwen3MoeConfig",
           "config_from_dict", "load_config", "causal_lm_loss"]
