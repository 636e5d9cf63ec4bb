"""Fused pieces of a decoder block: SwiGLU, residual add + RMSNorm, rotary embedding.

Each is one autograd Function over one fused op of ``genesis.nn.fused_declarations``
(``SWIGLU``, ``ADD_RMS_NORM``, ``ROTARY``): the backend's kernel of that name, else the row's
composite, so it works on every backend; ``swiglu_linear`` (a gated MLP's down projection,
for inference) has a kernel but no backward (``SwiGLULinear``, a dispatched op like the
others, so ``genesis.compile`` records it), and runs as differentiable ops where gradients
are wanted.
They compute in float32 and round once, so half-precision results are at least as
accurate as the unfused torch expressions they replace.
"""

from __future__ import annotations

import genesis
from genesis import dtypes as D
from genesis.autograd.function import Function, once_differentiable
from genesis.fused_declarations import RMS_NORM
from genesis.nn.fused_declarations import ADD_RMS_NORM, ROTARY, SWIGLU, SWIGLU_LINEAR
from genesis.ops.common import check_same_device, wrap
from genesis.ops.fused import _flatten_norm_input
from genesis.ops.linalg import linear as _linear

__all__ = ["swiglu", "swiglu_linear", "add_rms_norm", "apply_rotary_emb"]


def _same(op: str, a, b, what: str) -> None:
    check_same_device(op, a, b)
    if tuple(a.shape) != tuple(b.shape):
        raise RuntimeError(f"{op}: {what} must have the same shape, got {list(a.shape)} and "
                           f"{list(b.shape)}")
    if a.dtype is not b.dtype or not a.dtype.is_floating_point:
        raise RuntimeError(f"{op}: expected {what} of one floating dtype, got {a.dtype} and "
                           f"{b.dtype}")


# ----------------------------------------------------------------------------- SwiGLU
class SwiGLU(Function):
    """``silu(gate) * up`` as one op: one kernel forward, one backward."""

    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return wrap(SWIGLU.forward(gate._backend, gate._data, up._data), gate.device)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        gate, up = ctx.saved_tensors
        dg, du = SWIGLU.backward(gate._backend, g.contiguous()._data, gate._data, up._data)
        return wrap(dg, gate.device), wrap(du, gate.device)


def swiglu(gate, up):
    """The SwiGLU gate of a gated MLP: ``F.silu(gate) * up``, fused.

    Args:
        gate: the gate projection's output, any shape.
        up: the up projection's output, same shape and dtype.

    Returns:
        ``silu(gate) * up``, computed in float32 and rounded once to the inputs' dtype.

    Example:
        >>> h = F.swiglu(gate_proj(x), up_proj(x))
        >>> y = down_proj(h)
    """
    _same("swiglu", gate, up, "gate and up")
    return SwiGLU.apply(gate, up)  # strided operands too (the halves of one projection)


def swiglu_linear(gate_up, weight, bias=None):
    """The down projection of a SwiGLU MLP on its fused gate/up output, fused.

    Computes ``F.linear(F.swiglu(gate, up), weight, bias)`` with ``gate`` and ``up`` the
    first and second halves of ``gate_up``'s last dim (the output of one linear whose
    weight stacks gate_proj's rows over up_proj's). Where the backend has a kernel for it
    (CUDA, at most 64 rows: a decode step) that is one launch, the SwiGLU product made as
    the matmul loads it; elsewhere ``swiglu`` then ``linear``. The product is rounded to
    the inputs' dtype before the matmul either way, as ``swiglu`` rounds its output.

    The fused kernel has no backward: where grad mode is on and an input requires grad,
    this runs ``linear(swiglu(gate, up), weight, bias)`` as differentiable ops.

    Args:
        gate_up: ``(*, 2 * K)``, gate in ``[..., :K]`` and up in ``[..., K:]``.
        weight: ``(out_features, K)``.
        bias: ``(out_features,)`` or ``None``.

    Returns:
        A new ``(*, out_features)`` tensor in the inputs' dtype.

    Example:
        >>> h = F.linear(x, gate_up_weight)                   # (B, S, 2 * I)
        >>> y = F.swiglu_linear(h, down_proj.weight)          # (B, S, hidden)
    """
    _check_swiglu_linear_shapes(gate_up, weight, bias)
    others = (weight,) if bias is None else (weight, bias)
    if (genesis.is_grad_enabled() and (gate_up.requires_grad
                                       or any(t.requires_grad for t in others))) \
            or genesis.is_autocast_enabled(gate_up.device.type):
        half = gate_up.shape[-1] // 2  # differentiable ops (autocast casts their inputs)
        return _linear(swiglu(gate_up[..., :half], gate_up[..., half:]), weight, bias)
    check_same_device("swiglu_linear", gate_up, *others)
    if not gate_up.dtype.is_floating_point or any(t.dtype is not gate_up.dtype for t in others):
        raise TypeError(f"swiglu_linear: expected gate_up, weight and bias of one floating "
                        f"dtype, got {gate_up.dtype}, {weight.dtype} and "
                        f"{None if bias is None else bias.dtype}")
    return SwiGLULinear.apply(gate_up, weight, bias)


class SwiGLULinear(Function):
    """``swiglu_linear``'s fused kernel as a dispatched op (inference: no backward)."""

    op_name = "swiglu_linear"
    differentiable = False

    @staticmethod
    def forward(ctx, gate_up, weight, bias):
        out = SWIGLU_LINEAR.forward(gate_up._backend, gate_up._data, weight._data,
                                    None if bias is None else bias._data)
        return wrap(out, gate_up.device)


def _check_swiglu_linear_shapes(gate_up, weight, bias) -> None:
    if weight.ndim != 2 or gate_up.ndim < 1 or gate_up.shape[-1] != 2 * weight.shape[1]:
        raise ValueError(f"swiglu_linear: expected gate_up (*, 2 * K) and weight "
                         f"(out_features, K), got gate_up of shape {list(gate_up.shape)} and "
                         f"weight of shape {list(weight.shape)}")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"swiglu_linear: expected bias of shape [{weight.shape[0]}] for "
                         f"weight of shape {list(weight.shape)}, got {list(bias.shape)}")


# --------------------------------------------------------------- residual add + RMSNorm
class AddRMSNorm(Function):
    """``h = x + residual; y = rms_norm(h)`` over the last dim, returning ``(h, y)``."""

    @staticmethod
    def forward(ctx, x, residual, weight, eps):
        h, y, rstd = ADD_RMS_NORM.forward(x._backend, x._data, residual._data,
                                          None if weight is None else weight._data, eps)
        h, y = wrap(h, x.device), wrap(y, x.device)
        ctx.save_for_backward(h, weight, wrap(rstd, x.device))
        return h, y

    @staticmethod
    @once_differentiable
    def backward(ctx, g_h, g_y):
        h, weight, rstd = ctx.saved_tensors
        gx, gw = RMS_NORM.backward(  # the norm's backward on h, as F.rms_norm's
            h._backend, g_y.contiguous()._data, h._data,
            None if weight is None else weight._data, rstd._data)
        gh = g_h + wrap(gx, h.device)  # the sum feeds both the norm and the next residual
        return gh, gh, (None if gw is None else wrap(gw, h.device)), None


_DEFAULT_EPS = {D.float16: 0.0009765625, D.bfloat16: 0.0078125, D.float64: 2.220446049250313e-16}


def add_rms_norm(input, residual, normalized_shape, weight=None, eps: float | None = None):
    """Residual add and RMS norm of a pre-norm decoder block, fused.

    ``hidden = input + residual`` and ``F.rms_norm(hidden, normalized_shape, weight, eps)``
    in one pass (one read of each input, one write of each output).

    Args:
        input: the sublayer's output (*, *normalized_shape).
        residual: the residual stream, same shape and dtype.
        normalized_shape: the trailing dims to normalise over.
        weight: optional scale of shape ``normalized_shape``.
        eps: added to the mean square; defaults to the dtype's machine epsilon, as
            ``F.rms_norm``.

    Returns:
        ``(hidden, normed)``: the new residual stream and its normalised value.

    Example:
        >>> residual, h = F.add_rms_norm(attn_out, residual, (d,), norm.weight, 1e-6)
        >>> mlp_out = mlp(h)
    """
    _same("add_rms_norm", input, residual, "input and residual")
    if eps is None:
        eps = _DEFAULT_EPS.get(input.dtype, 1.1920928955078125e-07)
    x, (w,) = _flatten_norm_input("add_rms_norm", input.contiguous(), normalized_shape,
                                  (("weight", weight),))
    if x.shape == input.shape:  # one normalised dim: the kernel takes (*, N) as it is
        return AddRMSNorm.apply(x, residual.contiguous(), w, float(eps))
    h, y = AddRMSNorm.apply(x, residual.contiguous().reshape(x.shape), w, float(eps))
    return h.reshape(input.shape), y.reshape(input.shape)


# ----------------------------------------------------------------------------- rotary
class Rotary(Function):
    """Rotary embedding of q and k together (cos/sin are constants: no gradient)."""

    @staticmethod
    def forward(ctx, q, k, cos, sin):
        qo, ko = ROTARY.forward(q._backend, q._data, k._data, cos._data, sin._data, False)
        ctx.save_for_backward(cos, sin)
        return wrap(qo, q.device), wrap(ko, q.device)

    @staticmethod
    @once_differentiable
    def backward(ctx, gq, gk):
        cos, sin = ctx.saved_tensors
        # the transpose of the rotation: the same kernel, inverse=True
        dq, dk = ROTARY.forward(cos._backend, gq._data, gk._data, cos._data, sin._data, True)
        return wrap(dq, cos.device), wrap(dk, cos.device), None, None


def _rotate_half(x):
    half = x.shape[-1] // 2
    return genesis.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary_emb(q, k, cos, sin):
    """Rotary position embedding (RoPE) of queries and keys, both in one kernel.

    The half-split convention of Llama/Qwen checkpoints (Hugging Face's
    ``apply_rotary_pos_emb``): with ``x = cat(x1, x2)`` along the head dim,
    ``rotate_half(x) = cat(-x2, x1)`` and the result is ``x * cos + rotate_half(x) * sin``.

    Args:
        q: queries (B, Hq, S, D), D even.
        k: keys (B, Hk, S, D) (grouped-query heads: Hk may differ from Hq).
        cos, sin: (S, D) or (B, S, D): the angles of each position (typically each frequency
            repeated for both halves), in q's dtype. A ``cos``/``sin`` that requires grad
            takes the unfused expression, which differentiates them too.

    Returns:
        ``(q_embed, k_embed)``, new tensors of q's and k's shapes and dtype.

    Example:
        >>> cos, sin = rope(positions)                       # (S, 64) each
        >>> q, k = F.apply_rotary_emb(q, k, cos, sin)        # q (B, 14, S, 64), k (B, 2, S, 64)
    """
    if q.ndim != 4 or k.ndim != 4 or q.shape[0] != k.shape[0] or q.shape[2:] != k.shape[2:]:
        raise RuntimeError(f"apply_rotary_emb: expected q (B, Hq, S, D) and k (B, Hk, S, D), "
                           f"got q of size {list(q.shape)} and k of size {list(k.shape)}")
    b, _, s, d = q.shape
    if d % 2:
        raise RuntimeError(f"apply_rotary_emb: the head dim must be even, got {d}")
    for name, t in (("cos", cos), ("sin", sin)):
        if tuple(t.shape) not in ((s, d), (b, s, d), (1, s, d)):
            raise RuntimeError(f"apply_rotary_emb: expected {name} of size [{s}, {d}] or "
                               f"[{b}, {s}, {d}], got {list(t.shape)}")
    check_same_device("apply_rotary_emb", q, k, cos, sin)
    if cos.requires_grad or sin.requires_grad:
        c, sn = cos.unsqueeze(-3), sin.unsqueeze(-3)  # broadcast over heads
        return q * c + _rotate_half(q) * sn, k * c + _rotate_half(k) * sn
    for name, t in (("k", k), ("cos", cos), ("sin", sin)):
        if t.dtype is not q.dtype:
            raise RuntimeError(f"apply_rotary_emb: expected {name} of q's dtype {q.dtype}, got "
                               f"{t.dtype}")
    cos, sin = cos.expand(b, s, d), sin.expand(b, s, d)
    return Rotary.apply(q, k, cos, sin)
