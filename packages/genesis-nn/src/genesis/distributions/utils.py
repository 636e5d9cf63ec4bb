"""Helpers shared by the distributions: broadcasting parameters, probs <-> logits."""

from __future__ import annotations

import genesis

# The most negative finite value of each floating dtype: logits clamped to it keep
# ``0 * logit`` finite where a probability is 0 (there the logit is -inf).
_LOWEST = {genesis.float16: -65504.0, genesis.bfloat16: -3.3895313892515355e38,
           genesis.float32: -3.4028234663852886e38, genesis.float64: -1.7976931348623157e308}


def broadcast_all(*values):
    """The tensors and numbers in ``values`` as tensors of one broadcast shape.

    Numbers become tensors of the tensors' dtype and device (the default dtype when all
    are numbers).

    Args:
        *values: tensors and Python numbers.

    Returns:
        A tuple of tensors, one per value, all of the broadcast shape.
    """
    tensors = [v for v in values if isinstance(v, genesis.Tensor)]
    for v in values:
        if not isinstance(v, (genesis.Tensor, int, float)):
            raise ValueError(f"Input arguments must all be instances of numbers or Tensors, "
                             f"got {type(v).__name__}")
    like = tensors[0] if tensors else None
    dtype = like.dtype if like is not None and like.is_floating_point() \
        else genesis.get_default_dtype()
    device = like.device if like is not None else None
    values = [v if isinstance(v, genesis.Tensor) else genesis.tensor(float(v), dtype=dtype,
                                                                      device=device)
              for v in values]
    return genesis.broadcast_tensors(*values)


def clamp_probs(probs):
    """``probs`` kept inside ``(0, 1)`` by the dtype's resolution (for logs and logits)."""
    eps = {genesis.float64: 2.220446049250313e-16, genesis.float16: 0.0009765625,
           genesis.bfloat16: 0.0078125}.get(probs.dtype, 1.1920928955078125e-07)
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs, is_binary: bool = False):
    """Logits of probabilities: ``log(p) - log(1 - p)`` (binary) or ``log(p)``."""
    clamped = clamp_probs(probs)
    if is_binary:
        return clamped.log() - (-clamped).log1p()
    return clamped.log()


def logits_to_probs(logits, is_binary: bool = False):
    """Probabilities of logits: ``sigmoid`` (binary) or ``softmax`` over the last dim."""
    if is_binary:
        return logits.sigmoid()
    return genesis.softmax(logits, dim=-1)


def clamp_to_lowest(logits):
    """``logits`` with ``-inf`` raised to the dtype's lowest finite value."""
    return logits.clamp(min=_LOWEST[logits.dtype])
