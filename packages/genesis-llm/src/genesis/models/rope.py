"""Rotary position embeddings (RoPE) and the ``rope_scaling`` types Qwen configs use.

Query and key pairs ``(x_i, x_{i + D/2})`` are rotated by the angle ``position * inv_freq_i``
(the half-split convention; ``F.apply_rotary_emb`` applies the tables made here).
The scaling types change only ``inv_freq`` (and, for YaRN, scale cos/sin by an attention
factor):

- ``default``: ``inv_freq_i = theta ** (-2i / D)``.
- ``linear``: positions divided by ``factor`` (so ``inv_freq / factor``).
- ``dynamic`` (NTK-aware): past ``max_position_embeddings`` the base grows with the sequence
  length, ``theta * (factor * L / max_pos - (factor - 1)) ** (D / (D - 2))``.
- ``yarn``: each frequency blends the interpolated (``/ factor``) and original values by a
  linear ramp between the dims that turn ``beta_fast`` and ``beta_slow`` times over the
  original context; cos/sin are scaled by ``0.1 * ln(factor) + 1``.
- ``llama3``: low frequencies divided by ``factor``, high ones kept, a smooth blend between.

Frequencies are computed in float32 on the host, as transformers does, so the angles match.
"""

from __future__ import annotations

import math

import numpy as np

import genesis
import genesis.nn as nn
from genesis import Tensor

__all__ = ["RotaryEmbedding", "rope_frequencies"]


def _base_inv_freq(theta: float, dim: int) -> np.ndarray:
    exponents = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    return (np.float32(1.0) / np.power(np.float32(theta), exponents)).astype(np.float32)


def _yarn(theta: float, dim: int, s: dict, max_pos: int) -> tuple[np.ndarray, float]:
    original = s.get("original_max_position_embeddings") or max_pos
    factor = s.get("factor") or max_pos / original
    attention_factor = s.get("attention_factor")
    if attention_factor is None:
        def mscale(scale: float, m: float = 1.0) -> float:
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0
        if s.get("mscale") and s.get("mscale_all_dim"):
            attention_factor = mscale(factor, s["mscale"]) / mscale(factor, s["mscale_all_dim"])
        else:
            attention_factor = mscale(factor)
    beta_fast, beta_slow = s.get("beta_fast") or 32, s.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # avoid dividing by zero in the ramp
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    keep = (1 - ramp).astype(np.float32)  # 1: keep the original frequency, 0: interpolate
    pos_freqs = np.power(np.float32(theta),
                         np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim))
    extrapolated, interpolated = 1.0 / pos_freqs, 1.0 / (np.float32(factor) * pos_freqs)
    inv_freq = interpolated * (1 - keep) + extrapolated * keep
    return inv_freq.astype(np.float32), float(attention_factor)


def _llama3(inv_freq: np.ndarray, s: dict) -> np.ndarray:
    factor, low_ff, high_ff = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_len = s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > old_len / low_ff, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low_ff) / (high_ff - low_ff)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high_ff) & (wavelen <= old_len / low_ff)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def rope_frequencies(theta: float, dim: int, scaling: dict | None, max_position: int,
                     seq_len: int | None = None) -> tuple[np.ndarray, float]:
    """``(inv_freq (dim // 2,) float32, attention_factor)`` for one RoPE configuration.

    Args:
        theta: the base (``rope_theta``).
        dim: the rotated width (the head size).
        scaling: ``rope_scaling`` with ``rope_type`` (None: default RoPE).
        max_position: ``max_position_embeddings``.
        seq_len: current sequence length (only ``dynamic`` uses it).
    """
    rope_type = "default" if scaling is None else scaling.get("rope_type", "default")
    if rope_type == "default":
        return _base_inv_freq(theta, dim), 1.0
    if rope_type == "linear":
        return (_base_inv_freq(theta, dim) / np.float32(scaling["factor"])).astype(np.float32), 1.0
    if rope_type == "dynamic":
        length = max(seq_len or max_position, max_position)
        factor = scaling["factor"]
        base = theta * ((factor * length / max_position) - (factor - 1)) ** (dim / (dim - 2))
        return _base_inv_freq(base, dim), 1.0
    if rope_type == "yarn":
        return _yarn(theta, dim, scaling, max_position)
    if rope_type == "llama3":
        return _llama3(_base_inv_freq(theta, dim), scaling), 1.0
    raise ValueError(f"rope_scaling type {rope_type!r} is not supported (known: default, "
                     "linear, dynamic, yarn, llama3)")


class RotaryEmbedding(nn.Module):
    """cos/sin tables for the given positions.

    Args:
        dim: head size.
        theta: ``rope_theta``.
        scaling: ``rope_scaling`` (None: plain RoPE).
        max_position: ``max_position_embeddings``.

    Shape:
        forward: position_ids ``(B, S)`` int -> cos, sin ``(B, S, dim)`` in ``dtype``.
    """

    def __init__(self, dim: int, theta: float, scaling: dict | None, max_position: int,
                 device=None) -> None:
        super().__init__()
        self.dim, self.theta, self.scaling, self.max_position = dim, theta, scaling, max_position
        self.dynamic = scaling is not None and scaling.get("rope_type") == "dynamic"
        inv_freq, self.attention_factor = rope_frequencies(theta, dim, scaling, max_position)
        self.register_buffer("inv_freq", genesis.tensor(inv_freq, device=device),
                             persistent=False)
        self._cached_len = max_position  # dynamic RoPE: the length inv_freq was made for

    def _grow(self, position_ids: Tensor) -> None:
        """Dynamic RoPE, as transformers: recompute the frequencies once the sequence passes
        the longest seen so far; go back to the original ones for short sequences."""
        seq_len = int(position_ids.max().item()) + 1  # host sync: dynamic RoPE only
        if seq_len > self._cached_len or (seq_len < self.max_position < self._cached_len):
            inv_freq, _ = rope_frequencies(self.theta, self.dim, self.scaling,
                                           self.max_position, seq_len)
            self.inv_freq = genesis.tensor(inv_freq, device=self.inv_freq.device)
            self._cached_len = max(seq_len, self.max_position)

    def forward(self, position_ids: Tensor, dtype) -> tuple[Tensor, Tensor]:
        if self.dynamic:
            self._grow(position_ids)
        angles = position_ids.to(genesis.float32).unsqueeze(-1) * self.inv_freq  # (B, S, D/2)
        angles = genesis.cat([angles, angles], dim=-1)  # (B, S, D)
        cos, sin = angles.cos(), angles.sin()
        if self.attention_factor != 1.0:
            cos, sin = cos * self.attention_factor, sin * self.attention_factor
        return cos.to(dtype), sin.to(dtype)

