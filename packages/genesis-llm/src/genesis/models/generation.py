"""Text generation: a prefill over the prompt, then one decode step per new token.

The KV cache is preallocated for prompt + ``max_new_tokens`` slots, rounded up to a power
of two (so one compiled step serves many calls). The decode step
(``decode_step``) has the same shapes every time and takes its slot and positions as
tensors; that is what lets a CUDA graph capture it. Its keys are described in one of two
ways: with left padding only (the usual batch), each row's valid keys are one range of
slots, ``[first real slot, new token]``, and ``F.attention_decode`` reads just those; for
any other padding, a mask over the whole cache hides padding and not-yet-written slots.
Prompts in a batch are left-padded; as transformers, a row's position ids count only its
real tokens.

``decode_step`` makes no host synchronisation of its own (its inputs are tensors, its key
bounds are computed on the device), and the mixture-of-experts block routes a decode step at
fixed shapes (``moe.py``). What may still sync inside it is outside this file: dynamic RoPE
(``RotaryEmbedding._grow`` reads the longest position) and, on the CPU only, the index bound
checks of core's ``ops/indexing.py`` (which a trace skips). ``generate(compile=True)`` —
the default for a model on which ``model.compile()`` was called — runs the step through
``genesis.compile(mode="reduce-overhead")``, for models without dynamic RoPE (dense or MoE):
traced once, then replayed, on CUDA as fused kernels in a CUDA graph whose static inputs are
the step's own tensors (the KV cache, tokens, positions, slot: the same tensors at every
call, read and written in place). The compiled step, with its KV cache, is kept on the model
for later calls of the same batch size and capacity (``release_decode_graphs`` frees them;
``train()`` and ``to()`` drop them). The generation loop around it reads back only a
streamer's tokens and, every ``_EOS_CHECK_EVERY`` steps (each step on the CPU), whether
every row has ended.
"""

from __future__ import annotations

import weakref

import genesis
from genesis import Tensor
from genesis.compiler import CompiledFunction
from genesis.models.attention import KVCache
from genesis.models.fused_weights import share_all
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


def _capacity_bucket(length: int) -> int:
    """KV-cache slots for ``length`` tokens: rounded up to a power of two, at least 512, so
    calls with other prompt lengths or ``max_new_tokens`` reuse one compiled step (a short
    warm-up call and a long one included). The decode attention reads only the filled
    slots, so a roomier cache costs memory, not time."""
    return max(512, 1 << (length - 1).bit_length())


class _Decoder:
    """The decode step of one shape (batch, cache capacity, kind of key bounds, greedy or
    not) with its state at fixed addresses: the KV cache, the key bounds, the step's inputs
    (the last tokens, their positions, their cache slot) and which rows have finished.

    A step (``_step``) runs ``decode_step`` and advances the positions and the slot in place.
    Greedy, it also chooses the next tokens itself (``argmax``; the pad token on finished
    rows), feeds them back as its next input and records them in ``history`` at their slot,
    so a replayed step needs nothing from the host. Otherwise it returns the logits and the
    caller feeds its choice back (``step(token)``).

    Eager (``compiled`` False) the step just runs. Compiled, it runs through
    ``genesis.compile(mode="reduce-overhead")``: the first step is traced (it runs eagerly
    while its ops are recorded), later ones replay the graph — on CUDA the backend fuses it
    and captures it as a CUDA graph after a warm-up replay. The step takes no arguments:
    every tensor it reads is this decoder's or the model's, the same tensors at every call,
    which the graph reads and writes in place. Compiled decoders are kept on the model
    between ``generate`` calls (``GenerationMixin._decoder``), so their state is refilled in
    place, never replaced (the stacked projection weights of ``fused_weights`` are the
    parameters' own memory, or a copy that every call's eager prefill rewrites in place).
    """

    def __init__(self, model, compiled: bool, batch: int, capacity: int, spans: bool,
                 greedy: bool) -> None:
        device = model.device
        # a weak reference: a kept decoder lives in the model's __dict__, and a cycle would
        # keep a dropped model and its graphs' memory until the next garbage collection
        self.model = weakref.ref(model)
        self.greedy = greedy
        self.cache = KVCache(model.config, batch, capacity, model.dtype, device)
        # key bounds: (B,) first real slot of each row, or a (B, L) validity mask
        self.key_starts = genesis.zeros(batch, dtype=genesis.int64, device=device) \
            if spans else None
        self.key_valid = None if spans else genesis.ones((batch, capacity), dtype=genesis.bool,
                                                         device=device)
        self.tokens = genesis.zeros((batch, 1), dtype=genesis.int64, device=device)
        self.positions = genesis.zeros((batch, 1), dtype=genesis.int64, device=device)
        self.slot = genesis.zeros(1, dtype=genesis.int64, device=device)
        self.finished = genesis.zeros(batch, dtype=genesis.bool, device=device)
        self.pad = genesis.zeros((), dtype=genesis.int64, device=device)
        self.history = genesis.zeros((batch, capacity), dtype=genesis.int64, device=device) \
            if greedy else None
        self.run = genesis.compile(_weak_step(self), mode="reduce-overhead") if compiled \
            else self._step

    def start(self, prompt_valid: Tensor, key_starts: Tensor | None, positions: Tensor,
              pad_token_id: int) -> None:
        """Set up a new batch of prompts ``(B, P)``: key bounds, the first new tokens'
        positions ``(B, 1)`` and slot ``P``, no row finished."""
        p = prompt_valid.shape[1]
        if self.key_starts is not None:
            self.key_starts.copy_(key_starts)
        else:
            self.key_valid[:, :p] = prompt_valid
            self.key_valid[:, p:] = True  # new tokens are always real
        self.positions.copy_(positions)
        self.slot.fill_(p)
        self.finished.fill_(False)
        self.pad.fill_(pad_token_id)

    def first(self, token: Tensor) -> None:
        """Record the prefill's choice ``(B,)``: the first step's input (and, greedy, the
        history's first new token, at slot ``P``)."""
        self.tokens.copy_(token.unsqueeze(1))
        if self.greedy:
            self.history.index_put_((None, self.slot), self.tokens)

    def _step(self) -> Tensor | None:
        logits = self.model().decode_step(self.tokens, self.positions, self.slot, self.key_valid,
                                          self.cache, key_starts=self.key_starts)
        self.positions.add_(1)
        self.slot.add_(1)
        if not self.greedy:
            return logits
        token = genesis.where(self.finished, self.pad, logits.argmax(-1))  # (B,)
        self.tokens.copy_(token.unsqueeze(1))
        self.history.index_put_((None, self.slot), self.tokens)
        return None

    def step(self, token: Tensor | None = None) -> Tensor | None:
        """One decode step after ``token`` ``(B,)`` (not greedy: the caller's choice);
        returns the logits ``(B, V)`` (greedy: None, the token is in ``history``)."""
        if token is not None:
            self.tokens.copy_(token.unsqueeze(1))
        return self.run()

    def release(self) -> None:
        """Drop the compiled step (its traces, graphs and their memory pools) and the cache;
        also run when the decoder goes (a dropped model's decoders let go at once)."""
        run, self.run = getattr(self, "run", None), None
        if isinstance(run, CompiledFunction):
            # A compiled callable and its cache entries refer to each other: cleared here, the
            # tensors its traces hold (the weights, this cache) and its CUDA graphs go now,
            # not at the next cyclic garbage collection.
            run._entries.clear()
        self.cache = self.history = None

    __del__ = release


def _weak_step(decoder: _Decoder):
    """``decoder._step`` as a function holding ``decoder`` weakly: the compiled step lives
    on the decoder, and a reference back would make a cycle (see ``_Decoder.model``)."""
    ref = weakref.ref(decoder)

    def decode_step():
        return ref()._step()

    return decode_step


def _eos_list(eos_token_id) -> list[int]:
    if eos_token_id is None:
        return []
    return [int(eos_token_id)] if isinstance(eos_token_id, int) else [int(e) for e in
                                                                       eos_token_id]


class GenerationMixin:
    """``generate`` for ``QwenForCausalLM`` (needs ``self.model``, ``self.config``,
    ``logits_for_last``).

    ``decode_attention``: decode steps attend through ``F.attention_decode`` over each row's
    valid cache slots when the prompts' padding allows it (left padding: one range of slots
    per row); False: always through a mask over the whole cache.
    """

    decode_attention = True
    _KEPT_GRAPHS = 4  # compiled decode steps kept between calls (least recently used go)

    def prefill(self, input_ids: Tensor, position_ids: Tensor, prompt_valid: Tensor | None,
                cache: KVCache) -> Tensor:
        """Run the prompt ``(B, P)``, filling cache slots ``0 .. P-1``; ``(B, V)`` logits of
        the last prompt position. ``prompt_valid`` ``(B, P)`` marks padding (None: none,
        which lets full-attention layers use plain causal attention)."""
        p = input_ids.shape[1]
        slots = genesis.arange(p, device=input_ids.device)
        masks = self.model.masks(slots, prompt_valid)
        hidden, _ = self.model(input_ids, position_ids, masks, cache, slots, prompt=True)
        return self.logits_for_last(hidden)

    def graphable(self) -> bool:
        """Whether ``decode_step`` is free of host synchronisation (so ``genesis.compile``
        traces it as one graph, which a CUDA graph can capture): no dynamic RoPE (MoE blocks
        route a decode step at fixed shapes)."""
        return not self.model.rotary_emb.dynamic

    def decode_step(self, tokens: Tensor, position_ids: Tensor, cache_position: Tensor,
                    key_valid: Tensor | None, cache: KVCache,
                    key_starts: Tensor | None = None) -> Tensor:
        """One new token per row, at a fixed shape.

        Args:
            tokens: ``(B, 1)`` int64, the tokens just chosen.
            position_ids: ``(B, 1)`` their positions.
            cache_position: ``(1,)`` int64, the cache slot they go to.
            key_valid: ``(B, L)`` bool over all cache slots, False at padding (unused with
                ``key_starts``).
            cache: the KV cache (``L`` slots).
            key_starts: ``(B,)`` int64, each row's first real slot: the keys are then the
                slots from there to the new token (``F.attention_decode``), no mask.

        Returns:
            ``(B, V)`` logits for the following token.
        """
        if key_starts is not None:
            keys = self.model.spans(cache_position, key_starts)
        else:
            keys = self.model.masks(cache_position, key_valid)
        hidden, _ = self.model(tokens, position_ids, keys, cache, cache_position)
        return self.logits_for_last(hidden)

    # ------------------------------------------------- decode steps kept between calls
    def _decoder(self, batch: int, length: int, spans: bool, greedy: bool,
                 compiled: bool) -> _Decoder:
        """The decode step for ``batch`` rows of ``length`` slots: a new eager one, or
        (``compiled``) the compiled one kept for this shape, made on first use."""
        # Eager steps get the same capacity as compiled ones: the decode kernel's split of
        # the cache follows the capacity, so both then add up the same numbers in one order.
        if not compiled:
            return _Decoder(self, False, batch, _capacity_bucket(length), spans, greedy)
        kept = self.__dict__.get("_decoders")
        signature = self._weights_signature()
        if kept is None or kept[0] != signature:  # new weights, dtype or device
            self.release_decode_graphs()
            kept = self.__dict__["_decoders"] = (signature, {})
        decoders = kept[1]
        key = (batch, _capacity_bucket(length), spans, greedy)
        decoder = decoders.pop(key, None)
        if decoder is None:
            while len(decoders) >= self._KEPT_GRAPHS:
                decoders.pop(next(iter(decoders))).release()
            decoder = _Decoder(self, True, batch, key[1], spans, greedy)
        decoders[key] = decoder  # (re)inserted last: the most recently used
        return decoder

    def _weights_signature(self) -> tuple:
        """What a compiled decode step depends on: every parameter's and buffer's memory
        (and dtype). Values may change in place (the graph reads them at each replay)."""
        return tuple((t.data_ptr(), t.dtype) for t in (*self.parameters(), *self.buffers()))

    def release_decode_graphs(self) -> None:
        """Free the compiled decode steps (their CUDA graphs on CUDA, and their KV caches)
        that ``generate(compile=True)`` keeps between calls. They are also dropped by
        ``train()`` and ``to()``, and made again by the next call that needs one."""
        kept = self.__dict__.pop("_decoders", None)
        if kept is not None:
            for decoder in kept[1].values():
                decoder.release()

    def train(self, mode: bool = True):
        """Set the mode (``nn.Module.train``); training mode also frees the kept decode
        steps (``release_decode_graphs``). ``generate`` restores a training mode it found
        without freeing them."""
        if mode:
            self.release_decode_graphs()
        return super().train(mode)

    def _apply(self, fn):
        self.release_decode_graphs()
        out = super()._apply(fn)
        share_all(self)  # the moved parameters: views of one buffer again (fused_weights)
        return out

    def generate(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                 max_new_tokens: int = 20, do_sample: bool = False, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None,
                 repetition_penalty: float = 1.0, eos_token_id: int | list[int] | None = -1,
                 pad_token_id: int | None = None, streamer=None, generator=None,
                 compile: bool | None = None) -> Tensor:
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
            compile: run the decode step through ``genesis.compile`` (traced on the first
                step, replayed after; on CUDA fused and replayed as a CUDA graph), kept on
                the model for later calls; default: when ``model.compile()`` was called.
                Ignored (eager steps) for models with dynamic RoPE, whose step reads the
                longest position on the host.

        Returns:
            ``(B, P + n)`` int64: the prompts followed by the ``n <= max_new_tokens`` new
            tokens (``n`` stops early once every row has ended).

        Example::

            >>> out = model.generate(genesis.tensor([[1, 2, 3]]), max_new_tokens=5)
            >>> model.compile()          # training and, here, the decode step: compiled
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
                                      pad_token_id, streamer, generator, compile)
        finally:
            # back to the caller's mode without this class's train(): putting a model in
            # training mode back (as from_pretrained leaves it) must keep the decode steps
            # kept for the next call; the caller's own train() drops them
            super().train(was_training)

    def _generate(self, input_ids, attention_mask, max_new_tokens, do_sample, temperature,
                  top_k, top_p, repetition_penalty, eos, pad_token_id, streamer, generator,
                  compile):
        device = self.device
        input_ids = input_ids.to(device)
        b, p = input_ids.shape
        if streamer is not None:
            streamer.put(input_ids.cpu())
        if max_new_tokens <= 0:
            if streamer is not None:
                streamer.end()
            return input_ids
        prompt_valid, key_starts = self._prompt_padding(input_ids, attention_mask)
        # Positions count real tokens only (padding gets 1, as transformers).
        position_ids = prompt_valid.to(genesis.int64).cumsum(-1) - 1
        position_ids = position_ids.masked_fill(prompt_valid.logical_not(), 1)
        seen = None
        if repetition_penalty != 1.0:
            seen = genesis.zeros((b, self.config.vocab_size), dtype=genesis.bool, device=device)
            seen = seen.scatter(1, input_ids, prompt_valid)  # padding does not count
        eos_ids = genesis.tensor(eos, dtype=genesis.int64, device=device) if eos else None

        if compile is None:  # as the model: compiled by model.compile() or not
            compile = self._compiled_call is not None
        # greedy steps choose their tokens themselves (inside a replayed graph)
        greedy = not do_sample and seen is None
        decode = self._decoder(b, p + max_new_tokens, key_starts is not None, greedy,
                               compile and self.graphable())
        decode.start(prompt_valid, key_starts, position_ids[:, -1:] + 1, pad_token_id)
        logits = self.prefill(input_ids, position_ids,
                              None if attention_mask is None else prompt_valid, decode.cache)
        finished = decode.finished  # (B,) bool, updated in place (a greedy step reads it)
        new_tokens, all_ended = [], []  # all_ended: (0-d bool) per step, read in batches
        check_every = _eos_check_every(device)
        for step in range(max_new_tokens):
            if step and greedy:
                token = decode.history[:, p + step]  # (B,) chosen by the step
            else:
                if seen is not None:
                    logits = apply_repetition_penalty(logits.to(genesis.float32), seen,
                                                      repetition_penalty)
                if do_sample:
                    token = sample_token(warp_logits(logits.to(genesis.float32), temperature,
                                                     top_k, top_p), generator)
                else:  # widening is exact and keeps the order: no float32 copy to argmax
                    token = logits.argmax(-1)  # (B,)
                token = genesis.where(finished, pad_token_id, token)
                if step == 0:
                    decode.first(token)
            new_tokens.append(token)
            if streamer is not None:
                streamer.put(token.cpu())
            if seen is not None:
                seen = seen.scatter(1, token.unsqueeze(1), True)
            if eos_ids is not None:
                finished.copy_(finished | (token.unsqueeze(1) == eos_ids).any(-1))
                all_ended.append(finished.all())
                checked = streamer is not None or (step + 1) % check_every == 0
                if checked and all_ended[-1].item():
                    break
            if step + 1 < max_new_tokens:
                logits = decode.step(None if greedy or step == 0 else token)
        if streamer is not None:
            streamer.end()
        if all_ended:  # stop where every row had ended, as if it had been checked each step
            ended = genesis.stack(all_ended).tolist()
            new_tokens = new_tokens[:ended.index(True) + 1] if True in ended else new_tokens
        return genesis.cat([input_ids, genesis.stack(new_tokens, dim=1)], dim=1)

    def _prompt_padding(self, input_ids: Tensor,
                        attention_mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """``(prompt_valid (B, P) bool, key_starts)``: ``key_starts`` (B,) int64 is each
        row's first real slot when decode steps can take their keys as slot ranges
        (``decode_attention``, padding only on the left), else None (a mask is used). One
        host read checks the mask."""
        b, p = input_ids.shape
        device = input_ids.device
        if attention_mask is None:
            prompt_valid = genesis.ones((b, p), dtype=genesis.bool, device=device)
            starts = genesis.zeros(b, dtype=genesis.int64, device=device)
            return prompt_valid, starts if self.decode_attention else None
        prompt_valid = attention_mask.to(device, genesis.bool)
        if tuple(prompt_valid.shape) != (b, p):
            raise ValueError(f"generate: attention_mask {list(prompt_valid.shape)} must "
                             f"have input_ids' shape {[b, p]}")
        starts = p - prompt_valid.to(genesis.int64).sum(-1)  # (B,) padding tokens per row
        left = genesis.arange(p, device=device).unsqueeze(0) >= starts.unsqueeze(1)  # (B, P)
        last_real, one_range = genesis.stack([prompt_valid[:, -1].all(),
                                              (left == prompt_valid).all()]).tolist()
        if not last_real:
            raise ValueError("generate: prompts must be left-padded (attention_mask 1 at "
                             "the last position of every row)")
        return prompt_valid, starts if self.decode_attention and one_range else None
