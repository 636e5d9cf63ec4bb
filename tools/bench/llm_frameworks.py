"""The frameworks ``tools/bench/llm.py`` runs the same Qwen model under: transformers on
torch (``Torch``) and genesis (``Genesis``, eager or through ``model.compile()``), behind one
small interface (load a checkpoint, a training step's pieces, generate, memory figures).

Example:
    >>> fw = Genesis("cuda", compiled=True)
"""

from __future__ import annotations

import sys
import warnings

import numpy as np


def dtype_kwarg(dtype) -> dict:
    """transformers' model-dtype argument: ``dtype`` from 4.56, ``torch_dtype`` before."""
    import transformers

    major, minor = (int(p) for p in transformers.__version__.split(".")[:2])
    return {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": dtype}


class _Framework:
    """Device bookkeeping shared by both frameworks: ``lib.cuda`` has the same names in torch
    and genesis. Subclasses set ``lib`` and ``device``."""

    def sync(self) -> None:
        if self.device == "cuda":
            self.lib.cuda.synchronize()

    def reset_peak(self) -> None:
        if self.device == "cuda":
            self.lib.cuda.reset_peak_memory_stats()

    def peak_gib(self) -> float | None:
        return self.lib.cuda.max_memory_allocated() / 2**30 if self.device == "cuda" else None

    def free(self) -> None:
        if self.device == "cuda":
            self.lib.cuda.empty_cache()


class Torch(_Framework):
    """transformers + torch eager."""

    name = "transformers"

    def __init__(self, device: str) -> None:
        import torch

        self.lib, self.device = torch, device

    def load(self, path: str, dtype: str):
        import transformers

        model = transformers.AutoModelForCausalLM.from_pretrained(
            path, attn_implementation="sdpa", **dtype_kwarg(getattr(self.lib, dtype)))
        return model.to(self.device)

    def tokens(self, array: np.ndarray):
        return self.lib.from_numpy(array).to(self.device)

    def optimizer(self, model, lr: float):
        return self.lib.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1,
                                    fused=self.device == "cuda")

    def autocast(self, enabled: bool):
        return self.lib.autocast(self.device, dtype=self.lib.bfloat16, enabled=enabled)

    def generate(self, model, ids, new_tokens: int):
        with self.lib.no_grad():
            return model.generate(ids, attention_mask=self.lib.ones_like(ids),
                                  max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                  do_sample=False, pad_token_id=0)

    def prefill(self, model, ids):
        with self.lib.no_grad():  # as generate's prefill: fill the cache, last logits only
            hidden = model.model(ids, use_cache=True).last_hidden_state
            return model.lm_head(hidden[:, -1])


class Genesis(_Framework):
    """genesis.models, eager or (``compiled``) after ``model.compile()``."""

    def __init__(self, device: str, compiled: bool = False) -> None:
        import genesis
        import genesis.optim  # noqa: F401 - genesis-nn adds it as a sub-package

        self.lib, self.device, self.compiled = genesis, device, compiled
        self.name = "genesis-compile" if compiled else "genesis"
        self.compile_fallback = False  # genesis.compile warned (set by generate)
        self.traced_steps = 0  # decode steps run in Python by compiled generate calls

    def load(self, path: str, dtype: str):
        from genesis.models import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(self.lib, dtype),
                                                     device=self.device)
        if self.compiled:
            model.compile()
            step = model.decode_step  # count the steps that run in Python (traced ones)

            def counted(*a, **kw):
                self.traced_steps += 1
                return step(*a, **kw)

            model.decode_step = counted
        return model

    def tokens(self, array: np.ndarray):
        return self.lib.from_numpy(array).to(self.device)

    def optimizer(self, model, lr: float):
        return self.lib.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1, fused=True)

    def autocast(self, enabled: bool):
        return self.lib.autocast(self.device, dtype=self.lib.bfloat16, enabled=enabled)

    def generate(self, model, ids, new_tokens: int):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = model.generate(ids, max_new_tokens=new_tokens, eos_token_id=None)
        for w in caught:
            if str(w.message).startswith("genesis.compile"):  # a refused capture, a retrace
                self.compile_fallback = True
            print(f"  warning: {w.message}", file=sys.stderr, flush=True)
        return out

    def prefill(self, model, ids):
        from genesis.models.attention import KVCache

        b, p = ids.shape
        with self.lib.no_grad():
            cache = KVCache(model.config, b, p, model.dtype, self.device)
            positions = self.lib.arange(p, device=self.device).unsqueeze(0).expand(b, p)
            return model.prefill(ids, positions, None, cache)
