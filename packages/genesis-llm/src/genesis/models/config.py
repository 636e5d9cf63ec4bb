"""Model configurations: one dataclass per Qwen family, read from a Hugging Face ``config.json``.

``Qwen2Config`` holds what every family shares (sizes, attention, RoPE, sliding window);
``Qwen3Config`` adds q/k RMSNorm and an explicit ``head_dim``; the MoE configs add the
router and expert sizes. ``config_from_dict`` picks the class from ``model_type`` and reads
both spellings transformers has used for RoPE: ``rope_theta`` + ``rope_scaling`` (4.x) and
``rope_parameters`` (5.x). ``to_dict`` writes both, so either version loads the result.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = ["Qwen2Config", "Qwen3Config", "Qwen2MoeConfig", "Qwen3MoeConfig",
           "config_from_dict", "load_config", "CONFIG_CLASSES"]

# Other spellings transformers uses for the same settings (per family or per version): read
# as the field, and written back under both names so every version finds its own.
_ALIASES = {"num_local_experts": "num_experts", "qkv_bias": "attention_bias",
            "torch_dtype": "dtype"}


# The dtype names a checkpoint's weights may have (genesis.dtypes.dtype_from_name reads them).
_FLOAT_DTYPE_NAMES = frozenset({"float16", "half", "bfloat16", "float32", "float", "float64",
                                "double"})


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_positive_int(config, name: str, value) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ValueError(f"{type(config).__name__}: {name} must be an integer >= 1, got "
                         f"{value!r}")


@dataclass
class Qwen2Config:
    """Qwen2 / Qwen2.5: grouped-query attention with q/k/v bias, SwiGLU MLP, RMSNorm, RoPE.

    Example::

        >>> cfg = Qwen2Config(vocab_size=100, hidden_size=32, intermediate_size=64,
        ...                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
        >>> cfg.head_size
        8
    """

    model_type: ClassVar[str] = "qwen2"
    architecture: ClassVar[str] = "Qwen2ForCausalLM"
    qk_norm: ClassVar[bool] = False  # RMSNorm on each query/key head (Qwen3)

    vocab_size: int = 151936
    hidden_size: int = 4096
    intermediate_size: int = 22016
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int = 32
    head_dim: int | None = None  # None: hidden_size // num_attention_heads
    hidden_act: str = "silu"
    max_position_embeddings: int = 32768
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # {"rope_type": "linear" | "dynamic" | "yarn" | ..., ...}
    tie_word_embeddings: bool = False
    attention_bias: bool = True
    use_sliding_window: bool = False
    sliding_window: int | None = None
    max_window_layers: int = 28
    layer_types: list[str] | None = None  # "full_attention" | "sliding_attention" per layer
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    dtype: str | None = None  # the checkpoint's dtype name, e.g. "bfloat16"
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # other keys, kept for saving

    # Fields that must be integers >= 1 (sizes and counts a division or a shape is made of).
    _POSITIVE: ClassVar[tuple[str, ...]] = (
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "max_position_embeddings")

    def __post_init__(self) -> None:
        for name in self._POSITIVE:
            _check_positive_int(self, name, getattr(self, name))
        if self.head_dim is not None:
            _check_positive_int(self, "head_dim", self.head_dim)
        for name in ("rms_norm_eps", "rope_theta"):
            value = getattr(self, name)
            if not (_is_number(value) and math.isfinite(value) and value > 0):
                raise ValueError(f"{type(self).__name__}: {name} must be a finite number > 0, "
                                 f"got {value!r}")
        if self.dtype is not None and not (isinstance(self.dtype, str)
                                           and self.dtype in _FLOAT_DTYPE_NAMES):
            raise ValueError(f"{type(self).__name__}: dtype must name a floating-point dtype "
                             f"({', '.join(sorted(_FLOAT_DTYPE_NAMES))}), got {self.dtype!r}")
        if self.use_sliding_window and self.sliding_window is not None:
            _check_positive_int(self, "sliding_window", self.sliding_window)
        if self.hidden_act != "silu":
            raise ValueError(f"{type(self).__name__}: hidden_act={self.hidden_act!r} is not "
                             "supported (Qwen models use 'silu')")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"{type(self).__name__}: num_attention_heads "
                             f"({self.num_attention_heads}) must be a multiple of "
                             f"num_key_value_heads ({self.num_key_value_heads})")
        if self.layer_types is None:
            # transformers' rule: sliding window on the layers from max_window_layers on.
            self.layer_types = [
                "sliding_attention" if self.use_sliding_window and self.sliding_window
                and i >= self.max_window_layers else "full_attention"
                for i in range(self.num_hidden_layers)]
        if len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(f"{type(self).__name__}: layer_types has {len(self.layer_types)} "
                             f"entries for {self.num_hidden_layers} layers")

    @property
    def head_size(self) -> int:
        """Per-head width of queries, keys and values."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    def window_of(self, layer: int) -> int | None:
        """The sliding-window length of ``layer``, or None where it attends to everything."""
        if self.layer_types[layer] == "sliding_attention":
            return self.sliding_window
        return None

    @classmethod
    def from_dict(cls, d: dict) -> Qwen2Config:
        """Build from a ``config.json`` dict; unknown keys go to ``extra``."""
        d = {_ALIASES.get(k, k): v for k, v in d.items()}
        rope = d.pop("rope_parameters", None)
        if rope is not None:  # transformers 5.x: everything RoPE in one dict
            rope = dict(rope)
            d["rope_theta"] = rope.pop("rope_theta", d.get("rope_theta", 10000.0))
            rope_type = rope.get("rope_type", rope.get("type", "default"))
            d["rope_scaling"] = None if rope_type == "default" else rope
        scaling = d.get("rope_scaling")
        if scaling is not None:
            scaling = dict(scaling)
            scaling["rope_type"] = scaling.pop("type", scaling.get("rope_type", "default"))
            d["rope_scaling"] = None if scaling["rope_type"] == "default" else scaling
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in d.items() if k in names}
        extra = {k: v for k, v in d.items() if k not in names and k != "model_type"}
        return cls(**known, extra=extra)

    def to_dict(self) -> dict:
        """A ``config.json`` dict that transformers (4.x and 5.x) loads as this model."""
        out = dict(self.extra)
        out.update({f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                    if f.name != "extra"})
        if out["head_dim"] is None:
            del out["head_dim"]
        if out["dtype"] is None:
            del out["dtype"]
        if self.rope_scaling is not None:
            out["rope_scaling"] = dict(self.rope_scaling)
        for alias, name in _ALIASES.items():
            if name in out:
                out[alias] = out[name]
        out["model_type"] = self.model_type
        out["architectures"] = [self.architecture]
        out["rope_parameters"] = {"rope_theta": self.rope_theta,
                                  **(self.rope_scaling or {"rope_type": "default"})}
        return out


@dataclass
class Qwen3Config(Qwen2Config):
    """Qwen3: Qwen2 without q/k/v bias, with RMSNorm on each query and key head and an
    explicit ``head_dim``."""

    model_type: ClassVar[str] = "qwen3"
    architecture: ClassVar[str] = "Qwen3ForCausalLM"
    qk_norm: ClassVar[bool] = True

    head_dim: int | None = 128
    attention_bias: bool = False


@dataclass
class _MoeFields:
    """Router and expert sizes shared by the mixture-of-experts families."""

    num_experts: int = 60
    num_experts_per_tok: int = 4
    moe_intermediate_size: int = 1408
    norm_topk_prob: bool = False  # renormalise the top-k routing weights to sum to 1
    decoder_sparse_step: int = 1  # every n-th layer is sparse
    mlp_only_layers: list[int] = field(default_factory=list)
    router_aux_loss_coef: float = 0.001
    output_router_logits: bool = False  # add the load-balancing loss to the loss

    def _check_moe(self) -> None:
        for name in ("moe_intermediate_size", "decoder_sparse_step"):
            _check_positive_int(self, name, getattr(self, name))
        n, k = self.num_experts, self.num_experts_per_tok
        if not (isinstance(n, int) and not isinstance(n, bool) and n >= 0):
            raise ValueError(f"{type(self).__name__}: num_experts must be an integer >= 0, got "
                             f"{n!r}")
        if n:
            _check_positive_int(self, "num_experts_per_tok", k)
            if k > n:
                raise ValueError(f"{type(self).__name__}: num_experts_per_tok ({k}) exceeds "
                                 f"num_experts ({n})")

    def is_sparse(self, layer: int) -> bool:
        """Whether ``layer`` has a mixture-of-experts MLP (else a dense one)."""
        return (layer not in self.mlp_only_layers and self.num_experts > 0
                and (layer + 1) % self.decoder_sparse_step == 0)


@dataclass
class Qwen2MoeConfig(Qwen2Config, _MoeFields):
    """Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B): routed experts plus one shared expert whose
    output is scaled by a sigmoid gate."""

    model_type: ClassVar[str] = "qwen2_moe"
    architecture: ClassVar[str] = "Qwen2MoeForCausalLM"
    shared_expert_intermediate_size: int = 5632

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_moe()
        _check_positive_int(self, "shared_expert_intermediate_size",
                            self.shared_expert_intermediate_size)


@dataclass
class Qwen3MoeConfig(Qwen3Config, _MoeFields):
    """Qwen3-MoE: Qwen3 attention, routed experts only (no shared expert)."""

    model_type: ClassVar[str] = "qwen3_moe"
    architecture: ClassVar[str] = "Qwen3MoeForCausalLM"
    num_experts: int = 128
    num_experts_per_tok: int = 8
    moe_intermediate_size: int = 768

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_moe()


CONFIG_CLASSES = {c.model_type: c for c in (Qwen2Config, Qwen3Config, Qwen2MoeConfig,
                                             Qwen3MoeConfig)}


def config_from_dict(d: dict) -> Qwen2Config:
    """The config dataclass for ``d["model_type"]``, built from ``d``.

    Args:
        d: a parsed ``config.json``.

    Returns:
        A ``Qwen2Config``, ``Qwen3Config``, ``Qwen2MoeConfig`` or ``Qwen3MoeConfig``.

    Raises:
        ValueError: ``model_type`` is missing or not a supported family.
    """
    if not isinstance(d, dict):
        raise ValueError(f"a config must be a JSON object, got a {type(d).__name__}")
    model_type = d.get("model_type")
    if model_type not in CONFIG_CLASSES:
        raise ValueError(f"model_type {model_type!r} is not supported; genesis.models knows "
                         f"{sorted(CONFIG_CLASSES)}")
    return CONFIG_CLASSES[model_type].from_dict(d)


def load_config(model_dir: str | os.PathLike) -> Qwen2Config:
    """Read ``model_dir/config.json``.

    Args:
        model_dir: a Hugging Face model directory.

    Returns:
        The config dataclass for its ``model_type``.

    Raises:
        FileNotFoundError: ``model_dir`` or its ``config.json`` does not exist.
        NotADirectoryError: ``model_dir`` is a file.
        ValueError: ``config.json`` is not UTF-8 JSON, not an object, or holds an invalid
            setting (the message names the file and the field).

    Example::

        >>> load_config("Qwen3-0.6B").num_hidden_layers
        28
    """
    if not os.path.isdir(model_dir):
        if os.path.exists(model_dir):
            raise NotADirectoryError(f"{os.fspath(model_dir)!r} is a file, not a model "
                                     "directory (config.json + model.safetensors)")
        raise FileNotFoundError(f"model directory {os.fspath(model_dir)!r} does not exist")
    path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{os.fspath(model_dir)!r} has no config.json: expected a "
                                "Hugging Face model directory (config.json + model.safetensors)")
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ValueError(f"{path}: not valid JSON ({type(e).__name__}: {e})") from None
    try:
        return config_from_dict(d)
    except (TypeError, ValueError) as e:  # TypeError: a field of the wrong kind
        raise ValueError(f"{path}: {e}") from None
