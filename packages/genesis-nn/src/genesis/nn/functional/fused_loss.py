"""Linear + cross-entropy in chunks, for large vocabularies.

It runs the fused op ``CROSS_ENTROPY`` of ``genesis.nn.fused_declarations`` (per-row loss
and logsumexp; the gradient of the logits): the backend's kernels of those names, else the
row's composites, so it runs on every backend.

``linear_cross_entropy`` never holds the (tokens x vocab) logits: the forward walks the
tokens in chunks, computing a chunk's logits, its loss and logsumexp, and keeps only the
logsumexp (one float per token); the backward recomputes each chunk's logits, turns them
into their gradient and accumulates ``grad_input`` / ``grad_weight`` / ``grad_bias``.
Peak memory is a chunk's logits plus the gradients, at the price of one more matmul.
"""

from __future__ import annotations

import math

import genesis
from genesis.autograd.function import Function, once_differentiable
from genesis.nn.functional.cross_entropy_rows import _reduce_rows
from genesis.nn.functional.linear import linear
from genesis.nn.functional.loss import _check_reduction, cross_entropy
from genesis.nn.fused_declarations import CROSS_ENTROPY
from genesis.ops.common import check_same_device, wrap

__all__ = ["linear_cross_entropy"]

# Logit elements per chunk, at most: 2**28 (512 MiB of bf16 logits; 1,766 tokens of a
# 151,936-word vocabulary) is small next to all (tokens x vocab) logits, and few chunks keep
# the per-chunk (vocab x hidden) gradient accumulation cheap. Chunks are balanced and a
# multiple of 64 tokens (matmul tiles).
CHUNK_ELEMENTS = 2**28


def _chunk_tokens(n_tokens: int, vocab: int) -> int:
    """Tokens per chunk: balanced chunks of at most ``CHUNK_ELEMENTS`` logits."""
    most = max(1, CHUNK_ELEMENTS // max(vocab, 1))
    chunks = max(1, -(-n_tokens // most))
    per = -(-n_tokens // chunks)
    return min(most, -(-per // 64) * 64) if per >= 64 else max(per, 1)


class LinearCrossEntropy(Function):
    """``cross_entropy(x @ W^T + b, t)`` per token without the (tokens x vocab) logits.

    forward(x (N, H), weight (V, H), bias (V,) or None, target (N,), ignore_index,
    label_smoothing, chunk) -> per-token loss (N,) float32. Matmul-like under autocast.
    """

    autocast = "lower"

    @staticmethod
    def forward(ctx, x, weight, bias, target, ignore_index, label_smoothing, chunk):
        b = x._backend
        losses, lses = [], []
        for start in range(0, x.shape[0], chunk):
            xc = x[start:start + chunk]  # (n, H)
            logits = linear(xc, weight, bias)  # (n, V)
            loss, lse = CROSS_ENTROPY.forward(b, logits._data,
                                              target[start:start + chunk]._data, ignore_index,
                                              label_smoothing)
            losses.append(wrap(loss, x.device))
            lses.append(wrap(lse, x.device))
            del logits
        loss = genesis.cat(losses) if len(losses) > 1 else losses[0]  # (N,)
        lse = genesis.cat(lses) if len(lses) > 1 else lses[0]
        ctx.save_for_backward(x, weight, bias, target, lse)
        ctx.opts = (ignore_index, label_smoothing, chunk)
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        x, weight, bias, target, lse = ctx.saved_tensors
        ignore_index, label_smoothing, chunk = ctx.opts
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        b = x._backend
        g = g.float().contiguous()  # (N,)
        # Half-precision weights accumulate their gradient in float32 across chunks, so it
        # is rounded once, as a single (V, N) @ (N, H) matmul would round it.
        acc_dtype = genesis.float32 if weight.dtype.itemsize < 4 else weight.dtype
        gxs, gw, gb = [], None, None
        for start in range(0, x.shape[0], chunk):
            stop = start + chunk
            xc = x[start:stop]  # (n, H)
            logits = linear(xc, weight, bias)  # (n, V)
            dl = wrap(CROSS_ENTROPY.backward(b, g[start:stop]._data, logits._data,
                                             target[start:stop]._data, lse[start:stop]._data,
                                             ignore_index, label_smoothing), x.device)
            del logits
            if need_x:
                gxs.append(dl.matmul(weight))  # (n, H)
            if need_w:
                part = dl.mT.matmul(xc).to(acc_dtype)  # (V, H)
                gw = part if gw is None else gw.add_(part)
            if need_b and bias is not None:
                part = dl.sum(0, dtype=acc_dtype)  # (V,)
                gb = part if gb is None else gb.add_(part)
        gx = (genesis.cat(gxs) if len(gxs) > 1 else gxs[0]) if need_x else None
        gw = None if gw is None else gw.to(weight.dtype)
        gb = None if gb is None else gb.to(bias.dtype)
        return gx, gw, gb, None, None, None, None


def linear_cross_entropy(input, weight, target, bias=None, ignore_index: int = -100,
                         label_smoothing: float = 0.0, reduction: str = "mean", *,
                         chunk_size: int | None = None):
    """``cross_entropy(linear(input, weight, bias), target)`` without materialising logits.

    The language-model head and its loss in one op: the tokens are processed in chunks, so
    memory holds one chunk's (chunk x vocab) logits instead of all (tokens x vocab) of
    them; the backward recomputes each chunk's logits. Values and gradients are those of
    ``F.cross_entropy(F.linear(input, weight, bias), target, ...)``, computed in float32
    from the (possibly half-precision) logits. Under ``genesis.autocast`` the matmuls run
    in the autocast dtype and the loss is float32, as torch's autocast does for the two ops.

    Args:
        input: (*, H) hidden states (``*`` the token dims, flattened).
        weight: (V, H) output projection (e.g. tied embeddings).
        target: (*) int64 class indices in ``[0, V)`` or ``ignore_index``.
        bias: optional (V,).
        ignore_index: targets equal to it contribute 0 and leave the mean's denominator.
        label_smoothing: in [0, 1]; mixes the target with the uniform distribution.
        reduction: ``'none'`` (per-token loss of ``target``'s shape) | ``'mean'`` | ``'sum'``.
        chunk_size: tokens per chunk (default: balanced chunks of at most
            ``CHUNK_ELEMENTS`` logits).

    Returns:
        A scalar, or the per-token loss for ``'none'`` (float32 under autocast, else
        ``input``'s dtype).

    Example:
        >>> h = genesis.randn(8, 64, requires_grad=True)
        >>> w = genesis.randn(1000, 64, requires_grad=True)
        >>> loss = linear_cross_entropy(h, w, genesis.randint(0, 1000, (8,)))
        >>> loss.backward()
    """
    _check_reduction("linear_cross_entropy", reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"linear_cross_entropy: label_smoothing must be between 0.0 and 1.0, "
                         f"got {label_smoothing}")
    if input.ndim < 1 or weight.ndim != 2 or input.shape[-1] != weight.shape[1]:
        raise RuntimeError(f"linear_cross_entropy: expected input (*, H) and weight (V, H), got "
                           f"input of size {list(input.shape)} and weight of size "
                           f"{list(weight.shape)}")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise RuntimeError(f"linear_cross_entropy: expected bias of size [{weight.shape[0]}], "
                           f"got {list(bias.shape)}")
    if tuple(target.shape) != tuple(input.shape[:-1]):
        raise ValueError(f"linear_cross_entropy: expected target of size "
                         f"{list(input.shape[:-1])} for input of size {list(input.shape)}, got "
                         f"{list(target.shape)}")
    if target.dtype.is_floating_point or target.dtype is genesis.bool:
        raise TypeError(f"linear_cross_entropy: expected an integer (int64) class-index "
                        f"target, got dtype {target.dtype}")
    check_same_device("linear_cross_entropy", input, weight, target,
                      *(() if bias is None else (bias,)))
    if chunk_size is None:
        chunk_size = _chunk_tokens(math.prod(input.shape[:-1]), weight.shape[0])
    elif chunk_size < 1:
        raise ValueError(f"linear_cross_entropy: chunk_size must be positive, got {chunk_size}")
    x = input.reshape(-1, input.shape[-1]).contiguous()  # (N, H)
    t = target.reshape(-1).to(genesis.int64).contiguous()  # (N,)
    out_dtype = genesis.float32 if genesis.is_autocast_enabled(input.device.type) \
        else input.dtype
    if x.shape[0] == 0:  # nothing to chunk: the composite gives torch's empty results
        return cross_entropy(linear(x, weight, bias), t, ignore_index=ignore_index,
                             reduction=reduction, label_smoothing=label_smoothing
                             ).reshape(target.shape if reduction == "none" else ())
    loss = LinearCrossEntropy.apply(x, weight, bias, t, int(ignore_index),
                                    float(label_smoothing), int(chunk_size))  # (N,)
    keep = (t != ignore_index).sum().float()
    out = _reduce_rows(loss, keep, reduction)
    if reduction == "none":
        out = out.reshape(target.shape)
    return out.to(out_dtype)
