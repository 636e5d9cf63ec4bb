"""Transformer layers: ``TransformerEncoderLayer``, ``TransformerDecoderLayer``, the
``TransformerEncoder`` / ``TransformerDecoder`` stacks and the whole encoder-decoder
``Transformer`` (torch's parameter names, so a torch state dict loads as is)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import genesis
from genesis import Tensor
from genesis.nn import functional as F
from genesis.nn import init
from genesis.nn.modules.attention import MultiheadAttention
from genesis.nn.modules.container import ModuleList
from genesis.nn.modules.dropout import Dropout
from genesis.nn.modules.linear import Linear
from genesis.nn.modules.module import Module
from genesis.nn.modules.normalization import LayerNorm

__all__ = ["TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder",
           "TransformerDecoder", "Transformer"]


def _get_activation_fn(activation: str | Callable[[Tensor], Tensor]) -> Callable:
    if callable(activation):
        return activation
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block, each with a residual connection and
    LayerNorm ("Attention Is All You Need").

    Args:
        d_model: model width.
        nhead: number of attention heads.
        dim_feedforward: hidden width of the feed-forward block (default 2048).
        dropout: dropout after attention, inside and after the feed-forward block.
        activation: ``"relu"``, ``"gelu"`` or a callable.
        layer_norm_eps: LayerNorm eps.
        batch_first: inputs are ``(N, S, E)`` instead of ``(S, N, E)``.
        norm_first: pre-norm (``x + f(norm(x))``) instead of post-norm (``norm(x + f(x))``).
        bias: learn biases in the linear layers and norms.

    Shape:
        src: ``(S, N, E)`` (``(N, S, E)`` if ``batch_first``); output: same.

    Example::

        >>> layer = genesis.nn.TransformerEncoderLayer(d_model=16, nhead=4, batch_first=True)
        >>> layer(genesis.randn(2, 10, 16)).shape
        genesis.Size([2, 10, 16])
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable = F.relu,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _get_activation_fn(activation)

    def forward(self, src: Tensor, src_mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x: Tensor, attn_mask: Tensor | None, key_padding_mask: Tensor | None,
                  is_causal: bool) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x: Tensor) -> Tensor:
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout2(x)


class TransformerDecoderLayer(Module):
    """Self-attention, cross-attention to ``memory``, then a feed-forward block, each with a
    residual connection and LayerNorm.

    Args:
        d_model: model width.
        nhead: number of attention heads.
        dim_feedforward: hidden width of the feed-forward block (default 2048).
        dropout: dropout after each block and inside the feed-forward block.
        activation: ``"relu"``, ``"gelu"`` or a callable.
        layer_norm_eps: LayerNorm eps.
        batch_first: inputs are ``(N, T, E)`` instead of ``(T, N, E)``.
        norm_first: pre-norm instead of post-norm.
        bias: learn biases in the linear layers and norms.

    Shape:
        tgt: ``(T, N, E)``; memory: ``(S, N, E)`` (batch first if ``batch_first``); output:
        like ``tgt``.

    Example::

        >>> layer = genesis.nn.TransformerDecoderLayer(16, 4, batch_first=True)
        >>> layer(genesis.randn(2, 7, 16), genesis.randn(2, 10, 16)).shape
        genesis.Size([2, 7, 16])
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable = F.relu,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **kw)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _get_activation_fn(activation)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Tensor:
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask,
                                   tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask,
                                    memory_key_padding_mask, memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask,
                                              tgt_is_causal))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask,
                                               memory_key_padding_mask, memory_is_causal))
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x: Tensor, attn_mask: Tensor | None, key_padding_mask: Tensor | None,
                  is_causal: bool) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           is_causal=is_causal, need_weights=False)[0]
        return self.dropout1(x)

    def _mha_block(self, x: Tensor, mem: Tensor, attn_mask: Tensor | None,
                   key_padding_mask: Tensor | None, is_causal: bool) -> Tensor:
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, is_causal=is_causal,
                                need_weights=False)[0]
        return self.dropout2(x)

    def _ff_block(self, x: Tensor) -> Tensor:
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout3(x)


def _clones(module: Module, n: int) -> ModuleList:
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


class TransformerEncoder(Module):
    """A stack of ``num_layers`` copies of ``encoder_layer`` (each with its own weights),
    optionally followed by ``norm``.

    Args:
        encoder_layer: the layer to copy.
        num_layers: how many copies.
        norm: an optional final normalisation module.
        enable_nested_tensor: accepted for torch compatibility and has no effect: genesis has
            no nested tensors, so padded positions are always computed as ordinary elements.
            Real positions agree with torch; at the positions ``src_key_padding_mask`` marks
            as padding, torch's nested-tensor fast path (eval, no grad, batch first) returns
            zeros, genesis the computed values.
        mask_check: accepted for torch compatibility (used by torch's nested-tensor path
            only); has no effect.

    Example::

        >>> layer = genesis.nn.TransformerEncoderLayer(16, 4, batch_first=True)
        >>> enc = genesis.nn.TransformerEncoder(layer, num_layers=2)
        >>> enc(genesis.randn(2, 10, 16)).shape
        genesis.Size([2, 10, 16])
    """

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int,
                 norm: Module | None = None, enable_nested_tensor: bool = True,
                 mask_check: bool = True) -> None:
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check

    def forward(self, src: Tensor, mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None,
                is_causal: bool | None = None) -> Tensor:
        out = src
        for layer in self.layers:
            out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                        is_causal=bool(is_causal))
        if self.norm is not None:
            out = self.norm(out)
        return out


class TransformerDecoder(Module):
    """A stack of ``num_layers`` copies of ``decoder_layer``, optionally followed by
    ``norm``.

    Args:
        decoder_layer: the layer to copy.
        num_layers: how many copies.
        norm: an optional final normalisation module.
    """

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int,
                 norm: Module | None = None) -> None:
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Tensor:
        out = tgt
        for layer in self.layers:
            out = layer(out, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                        tgt_key_padding_mask=tgt_key_padding_mask,
                        memory_key_padding_mask=memory_key_padding_mask,
                        tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        if self.norm is not None:
            out = self.norm(out)
        return out


class Transformer(Module):
    """The encoder-decoder transformer of "Attention Is All You Need": a
    ``TransformerEncoder`` over ``src`` and a ``TransformerDecoder`` over ``tgt`` attending to
    the encoder's output, each followed by a final ``LayerNorm``.

    Args:
        d_model: model width.
        nhead: attention heads.
        num_encoder_layers: encoder layers.
        num_decoder_layers: decoder layers.
        dim_feedforward: hidden width of the feed-forward blocks.
        dropout: dropout rate in every layer.
        activation: ``"relu"``, ``"gelu"`` or a callable.
        custom_encoder: use this module as the encoder instead.
        custom_decoder: use this module as the decoder instead.
        layer_norm_eps: LayerNorm eps.
        batch_first: inputs are ``(N, S, E)`` instead of ``(S, N, E)``.
        norm_first: pre-norm layers.
        bias: learn biases in the linear layers and norms.

    Shape:
        src ``(S, N, E)``, tgt ``(T, N, E)`` (batch first if ``batch_first``; or unbatched
        ``(S, E)``/``(T, E)``); output like ``tgt``.

    Example::

        >>> model = genesis.nn.Transformer(d_model=16, nhead=4, num_encoder_layers=1,
        ...                                num_decoder_layers=1, dim_feedforward=32)
        >>> mask = model.generate_square_subsequent_mask(7)
        >>> model(genesis.randn(10, 2, 16), genesis.randn(7, 2, 16), tgt_mask=mask).shape
        genesis.Size([7, 2, 16])
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable = F.relu,
                 custom_encoder: Module | None = None, custom_decoder: Module | None = None,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                      batch_first, norm_first, bias)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(
                TransformerEncoderLayer(*layer_args, **kw), num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(*layer_args, **kw), num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def _reset_parameters(self) -> None:
        """torch's default: Xavier-uniform for every weight of two or more dims."""
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None,
                tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None,
                src_is_causal: bool | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        """Encode ``src``, then decode ``tgt`` against it.

        Args:
            src: the encoder's input sequence.
            tgt: the decoder's input sequence.
            src_mask: ``(S, S)`` attention mask of the encoder.
            tgt_mask: ``(T, T)`` attention mask of the decoder's self-attention.
            memory_mask: ``(T, S)`` mask of the decoder's attention to the encoder output.
            src_key_padding_mask: ``(N, S)``, ``True`` = padding.
            tgt_key_padding_mask: ``(N, T)``, ``True`` = padding.
            memory_key_padding_mask: ``(N, S)``, ``True`` = padding.
            src_is_causal: hint that ``src_mask`` is the causal mask.
            tgt_is_causal: hint that ``tgt_mask`` is the causal mask.
            memory_is_causal: hint that ``memory_mask`` is the causal mask.

        Returns:
            The decoder's output, shaped like ``tgt`` with ``d_model`` features.
        """
        batched = src.ndim == 3
        if batched and src.shape[0 if self.batch_first else 1] != tgt.shape[
                0 if self.batch_first else 1]:
            raise RuntimeError(f"the batch number of src and tgt must be equal, got src "
                               f"{list(src.shape)} and tgt {list(tgt.shape)} "
                               f"(batch_first={self.batch_first})")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError(f"the feature number of src and tgt must be equal to d_model "
                               f"({self.d_model}), got src {list(src.shape)} and tgt "
                               f"{list(tgt.shape)}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
        """The causal mask: ``-inf`` above the diagonal (future positions), ``0`` elsewhere.

        Args:
            sz: sequence length.
            device: where to make it (default: the default device).
            dtype: its floating dtype (default: the default dtype).

        Returns:
            A ``(sz, sz)`` float tensor to pass as ``tgt_mask``/``src_mask``.

        Example::

            >>> genesis.nn.Transformer.generate_square_subsequent_mask(3)
            tensor([[  0., -inf, -inf],
                    [  0.,   0., -inf],
                    [  0.,   0.,   0.]])
        """
        full = genesis.full((sz, sz), float("-inf"), dtype=dtype, device=device)
        return genesis.triu(full, diagonal=1)
