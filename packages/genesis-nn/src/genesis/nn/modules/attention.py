"""``MultiheadAttention``: attention with several heads over learned projections."""

from __future__ import annotations

import genesis
from genesis import Tensor
from genesis.nn import functional as F
from genesis.nn import init
from genesis.nn.modules.linear import Linear
from genesis.nn.modules.module import Module
from genesis.nn.parameter import Parameter

__all__ = ["MultiheadAttention"]


class MultiheadAttention(Module):
    """Multi-head attention: ``concat(head_1, ..., head_h) W_o`` with
    ``head_i = softmax(Q W_q^i (K W_k^i)^T / sqrt(d)) V W_v^i``.

    Parameter names and layout are torch's (``in_proj_weight`` stacks the q, k, v
    projections), so a torch state dict loads as is.

    Args:
        embed_dim: model width ``E``.
        num_heads: number of heads; must divide ``E``.
        dropout: dropout on the attention weights while training.
        bias: learn input/output projection biases.
        add_bias_kv: learn an extra key and value appended to the sequence.
        add_zero_attn: append a zero key and value to the sequence.
        kdim: key width (default ``E``).
        vdim: value width (default ``E``).
        batch_first: inputs and outputs are ``(N, L, E)`` instead of ``(L, N, E)``.

    Shape:
        query: ``(L, N, E)`` (``(N, L, E)`` if ``batch_first``) or unbatched ``(L, E)``;
        key/value: ``(S, N, kdim/vdim)`` likewise. ``key_padding_mask``: ``(N, S)`` (bool,
        ``True`` = ignore). ``attn_mask``: ``(L, S)`` or ``(N * num_heads, L, S)`` (bool,
        ``True`` = not allowed; or float, added). Output: like ``query``; weights
        ``(N, L, S)`` (averaged over heads) or ``(N, num_heads, L, S)``.

    Example::

        >>> mha = genesis.nn.MultiheadAttention(16, 4, batch_first=True)
        >>> x = genesis.randn(2, 5, 16)
        >>> out, weights = mha(x, x, x)
        >>> out.shape, weights.shape
        (genesis.Size([2, 5, 16]), genesis.Size([2, 5, 5]))
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False,
                 kdim: int | None = None, vdim: int | None = None, batch_first: bool = False,
                 device=None, dtype=None) -> None:
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got "
                             f"embed_dim={embed_dim} and num_heads={num_heads} instead")
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        kw = {"device": device, "dtype": dtype}
        if not self._qkv_same_embed_dim:
            self.q_proj_weight = Parameter(genesis.empty((embed_dim, embed_dim), **kw))
            self.k_proj_weight = Parameter(genesis.empty((embed_dim, self.kdim), **kw))
            self.v_proj_weight = Parameter(genesis.empty((embed_dim, self.vdim), **kw))
            self.register_parameter("in_proj_weight", None)
        else:
            self.in_proj_weight = Parameter(genesis.empty((3 * embed_dim, embed_dim), **kw))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(genesis.empty((3 * embed_dim,), **kw))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k = Parameter(genesis.empty((1, 1, embed_dim), **kw))
            self.bias_v = Parameter(genesis.empty((1, 1, embed_dim), **kw))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            if self.out_proj.bias is not None:
                init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def forward(self, query: Tensor, key: Tensor, value: Tensor,
                key_padding_mask: Tensor | None = None, need_weights: bool = True,
                attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query`` to ``key``/``value``.

        Returns:
            ``(output, weights)``; ``weights`` is ``None`` unless ``need_weights``.
        """
        batched = query.ndim == 3
        if self.batch_first and batched:
            # The functional form is sequence-first: (N, L, E) -> (L, N, E).
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        out, weights = F.multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight,
            self.in_proj_bias, self.bias_k, self.bias_v, self.add_zero_attn, self.dropout,
            self.out_proj.weight, self.out_proj.bias, training=self.training,
            key_padding_mask=key_padding_mask, need_weights=need_weights,
            attn_mask=attn_mask, use_separate_proj_weight=not self._qkv_same_embed_dim,
            q_proj_weight=self.q_proj_weight, k_proj_weight=self.k_proj_weight,
            v_proj_weight=self.v_proj_weight, average_attn_weights=average_attn_weights,
            is_causal=is_causal,
        )
        if self.batch_first and batched:
            out = out.transpose(0, 1)
        return out, weights
