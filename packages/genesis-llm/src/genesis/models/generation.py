"""Text generation: a prefill over the prompt, then one decode step per new token.

The KV cache is preallocated for prompt + ``max_new_tokens`` slots. The decode step
(``decode_step``) has the same shapes every time: one token per row, attending over the
whole cache with a mask that hides padding and not-yet-written slots, and it takes its slot
and positions as tensors; that is what lets a CUDA graph capture it. Prompts in a batch are
left-padded; as transformers, a row's position ids count only its real tokens.

``decode_step`` of a dense model makes no host synchronisation of its own (its inputs are
tensors, its mask is computed on the device, ``kv_len`` is not used). What may still sync
inside it is outside this file: dynamic RoPE (``RotaryEmbedding._grow`` reads the longest
position), the mixture-of-experts block (one ``tolist`` of the per-expert counts), and the
index bound checks of core's ``ops/indexing.py`` (``_check_index_tensor`` reads the index's
min and max back: for the embedding lookup, and for the keys' and values' ``scatter_`` into
the cache in every layer). ``generate(use_cuda_graph=True)`` captures it as a CUDA graph
(``genesis.cuda.graph``) for dense models without dynamic RoPE; the generation loop around
it reads back only a streamer's tokens and, every ``_EOS_CHECK_EVERY`` steps (each step on
the CPU), whether every row has ended.
"""

from __future__ import annotations

import warnings

import genesis
from genesis import Tensor
from genesis.models.attention import KVCache
from genesis.models.sampling import apply_repetition_penalty, sample_token, warp_logits

__all__ = ["GenerationMixin"]

# With eos ids, whether every row has ended is read back from an accelerator every this
# many steps (every step with a streamer, which reads each token anyway): a read per step
# would make the host wait for each step's kernels, so it could not queue the next ones
# while the GPU runs. Tokens made past the stop are cut off, so the output is the same.
_EOS_CHECK_EVERY = 16


def _eos_check_every(device) -> int:
    """Steps between reads of the all-ended flag: 1 on the CPU, where a read costs nothing
    and extra steps would."""
    return 1 if device.type == "cpu" else _EOS_CHECK_EVERY


def _graph_api(device):
    """``genesis.cuda`` when it can capture CUDA graphs on ``device``, else None."""
    if device.type != "cuda":
        return None
    return genesis.cuda if hasattr(genesis.cuda, "graph") else None


class _GraphedDecode:
    """``decode_step`` replayed from a CUDA graph: the inputs are copied into static buffers,
    the graph (captured on the second call; the first runs eagerly and warms the kernels up)
    reruns every kernel on them, and the output lives in the graph's own static tensor.
    The KV cache and ``key_valid`` are captured by address, so they must not be replaced.
    A step that cannot be captured (a host read: ``GraphCaptureError``) warns and runs
    eagerly from then on."""

    def __init__(self, model, cuda) -> None:
        self.model, self.cuda = model, cuda
        self.graph = self.logits = self.inputs = None
        self.calls, self.failed = 0, False

    def __call__(self, tokens, position_ids, cache_position, key_valid, cache):
        self.calls += 1
        if self.calls == 1 or self.failed:
            return self.model.decode_step(tokens, position_ids, cache_position, key_valid, cache)
        if self.graph is None:
            self.inputs = (tokens.clone(), position_ids.clone(), cache_position.clone())
            self.graph = self.cuda.CUDAGraph()
            try:
                with self.cuda.graph(self.graph):
                    self.logits = self.model.decode_step(*self.inputs, key_valid, cache)
            except self.cuda.GraphCaptureError as exc:  # nothing ran: redo the step eagerly
                warnings.warn(f"generate: the decode step could not be captured as a CUDA "
                              f"graph; running it eagerly ({exc})", RuntimeWarning,
                              stacklevel=4)
                self.failed, self.graph = True, None
                return self.model.decode_step(tokens, position_ids, cache_position,
                                              key_valid, cache)
        else:
            for static, new in zip(self.inputs, (tokens, position_ids, cache_position)):
                static.copy_(new)
        self.graph.replay()
        return self.logits


def _eos_list(eos_token_id) -> list[int]:
    if eos_token_id is None:
        return []
    return [int(eos_token_id)] if isinstance(eos_token_id, int) else [int(e) for e in
                                                                       eos_token_id]


class GenerationMixin:
    """``generate`` for ``QwenForCausalLM`` (needs ``self.model``, ``self.config``,
    ``logits_for_last``)."""

    def prefill(self, input_ids: Tensor, position_ids: Tensor, prompt_valid: Tensor | None,
                cache: KVCache) -> Tensor:
        """Run the prompt ``(B, P)``, filling cache slots ``0 .. P-1``; ``(B, V)`` logits of
        the last prompt position. ``prompt_valid`` ``(B, P)`` marks padding (None: none,
        which lets full-attention layers use plain causal attention)."""
        p = input_ids.shape[1]
        slots = genesis.arange(p, device=input_ids.device)
        masks = self.model.masks(slots, prompt_valid)
        hidden, _ = self.model(input_ids, position_ids, masks, cache, slots, kv_len=p)
        return self.logits_for_last(hidden)

    def graphable(self) -> bool:
        """Whether ``decode_step`` is free of host synchronisation (so a CUDA graph can
        capture it): dense MLPs only and no dynamic RoPE."""
        return (not any(layer.sparse for layer in self.model.layers)
                and not self.model.rotary_emb.dynamic)

    def decode_step(self, tokens: Tensor, position_ids: Tensor, cache_position: Tensor,
                    key_valid: Tensor, cache: KVCache) -> Tensor:
        """One new token per row, at a fixed shape.

        Args:
            tokens: ``(B, 1)`` int64, the tokens just chosen.
            position_ids: ``(B, 1)`` their positions.
            cache_position: ``(1,)`` int64, the cache slot they go to.
            key_valid: ``(B, L)`` bool over all cache slots, False at padding.
            cache: the KV cache (``L`` slots).

        Returns:
            ``(B, V)`` logits for the following token.
        """
        masks = self.model.masks(cache_position, key_valid)
        hidden, _ = self.model(tokens, position_ids, masks, cache, cache_position)
        return self.logits_for_last(hidden)

    def generate(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                 max_new_tokens: int = 20, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None,
                 repetition_penalty: float = 1.0, eos_token_id: int | list[int] | None = -1,
                 pad_token_id: int | None = None, streamer=None, generator=None,
                 use_cuda_graph: bool = False) -> Tensor:
        """Continue each prompt by up to ``max_new_tokens`` tokens.

        Args:
            input_ids: ``(B, P)`` int64 prompts, left-padded when their lengths differ.
            attention_mask: ``(B, P)``, 0 at padding (None: no padding).
            max_new_tokens: tokens to add at most.
            do_sample: sample (else greedy: the most likely token).
            temperature, top_k, top_p: sampling filters (see ``warp_logits``).
            repetition_penalty: > 1 discourages tokens already in the sequence.
            eos_token_id: a row stops at any of these ids; default: the config's; None: never.
            pad_token_id: fills rows that have stopped (default: config's pad, else first eos,
                else 0).
            streamer: an object with ``put(tokens)`` and ``end()`` (e.g. transformers'
                ``TextStreamer``); gets the prompt, then each new ``(B,)`` token batch.
            generator: a ``genesis.Generator`` making sampling reproducible.
            use_cuda_graph: run the decode step as a captured CUDA graph (on a CUDA device
                with ``genesis.cuda.graph``, dense models without dynamic RoPE; otherwise
                ignored: the step runs eagerly).

        Returns:
            ``(B, P + n)`` int64: the prompts followed by the ``n <= max_new_tokens`` new
            tokens (``n`` stops early once every row has ended).

        Example::

            >>> out = model.generate(genesis.tensor([[1, 2, 3]]), max_new_tokens=5)
        """
        if input_ids.ndim != 2:
            raise ValueError(f"generate: input_ids must be (batch, seq), got "
                             f"{list(input_ids.shape)}")
        if do_sample and temperature <= 0:
            raise ValueError(f"generate: temperature must be > 0 when sampling, got "
                             f"{temperature}")
        eos = _eos_list(self.config.eos_token_id if eos_token_id == -1 else eos_token_id)
        if pad_token_id is None:
            pad_token_id = self.config.pad_token_id
            pad_token_id = pad_token_id if pad_token_id is not None else (eos[0] if eos else 0)
        was_training = self.training
        self.eval()
        try:
            with genesis.no_grad():
                return self._generate(input_ids, attention_mask, max_new_tokens, do_sample,
                                      temperature, top_k, top_p, repetition_penalty, eos,
                                      pad_token_id, streamer, generator, use_cuda_graph)
        finally:
            self.train(was_training)

    def _generate(self, input_ids, attention_mask, max_new_tokens, do_sample, temperature,
                  top_k, top_p, repetition_penalty, eos, pad_token_id, streamer, generator,
                  use_cuda_graph):
        device = self.device
        input_ids = input_ids.to(device)
        b, p = input_ids.shape
        if streamer is not None:
            streamer.put(input_ids.cpu())
        if max_new_tokens <= 0:
            if streamer is not None:
                streamer.end()
            return input_ids
        if attention_mask is None:
            prompt_valid = genesis.ones((b, p), dtype=genesis.bool, device=device)
        else:
            prompt_valid = attention_mask.to(device, genesis.bool)
            if tuple(prompt_valid.shape) != (b, p):
                raise ValueError(f"generate: attention_mask {list(prompt_valid.shape)} must "
                                 f"have input_ids' shape {[b, p]}")
            if not prompt_valid[:, -1].all().item():  # one host check per call
                raise ValueError("generate: prompts must be left-padded (attention_mask 1 at "
                                 "the last position of every row)")
        cache = KVCache(self.config, b, p + max_new_tokens, self.dtype, device)
        key_valid = genesis.cat([prompt_valid, genesis.ones((b, max_new_tokens),
                                                            dtype=genesis.bool, device=device)],
                                dim=1)  # (B, L): new tokens are always real
        # Positions count real tokens only (padding gets 1, as transformers).
        position_ids = prompt_valid.to(genesis.int64).cumsum(-1) - 1
        position_ids = position_ids.masked_fill(prompt_valid.logical_not(), 1)
        seen = None
        if repetition_penalty != 1.0:
            seen = genesis.zeros((b, self.config.vocab_size), dtype=genesis.bool, device=device)
            seen = seen.scatter(1, input_ids, prompt_valid)  # padding does not count
        eos_ids = genesis.tensor(eos, dtype=genesis.int64, device=device) if eos else None

        logits = self.prefill(input_ids, position_ids,
                              None if attention_mask is None else prompt_valid, cache)
        next_position = position_ids[:, -1:] + 1  # (B, 1)
        cache_position = genesis.tensor([p], dtype=genesis.int64, device=device)
        finished = genesis.zeros(b, dtype=genesis.bool, device=device)
        decode = self.decode_step
        cuda = _graph_api(device) if use_cuda_graph else None
        if cuda is not None and self.graphable():
            decode = _GraphedDecode(self, cuda)
        new_tokens, all_ended = [], []  # all_ended: (0-d bool) per step, read in batches
        check_every = _eos_check_every(device)
        for step in range(max_new_tokens):
            logits = logits.to(genesis.float32)
            if seen is not None:
                logits = apply_repetition_penalty(logits, seen, repetition_penalty)
            if do_sample:
                token = sample_token(warp_logits(logits, temperature, top_k, top_p), generator)
            else:
                token = logits.argmax(-1)  # (B,)
            token = genesis.where(finished, pad_token_id, token)
            new_tokens.append(token)
            if streamer is not None:
                streamer.put(token.cpu())
            if seen is not None:
                seen = seen.scatter(1, token.unsqueeze(1), True)
            if eos_ids is not None:
                finished = finished | (token.unsqueeze(1) == eos_ids).any(-1)
                all_ended.append(finished.all())
                checked = streamer is not None or (step + 1) % check_every == 0
                if checked and all_ended[-1].item():
                    break
            if step + 1 < max_new_tokens:
                logits = decode(token.unsqueeze(1), next_position, cache_position, key_valid,
                                cache)
                next_position = next_position + 1
                cache_position = cache_position + 1
        if streamer is not None:
            streamer.end()
        if all_ended:  # stop where every row had ended, as if it had been checked each step
            ended = genesis.stack(all_ended).tolist()
            new_tokens = new_tokens[:ended.index(True) + 1] if True in ended else new_tokens
        return genesis.cat([input_ids, genesis.stack(new_tokens, dim=1)], dim=1)
