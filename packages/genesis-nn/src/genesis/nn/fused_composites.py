"""Composites of genesis-nn's fused ops: the references and the fallbacks of the rows in
``genesis.nn.fused_declarations`` (cross-entropy rows, SwiGLU, add + RMSNorm, rotary,
decoding attention, the optimizer steps, the multi-tensor norm and scale, GradScaler's unscale).

Each takes the backend first (``b``), then the kernel's arguments, and returns exactly what
the kernel must return (the row's docstring in ``genesis.nn.fused_declarations`` states it),
so the autograd code is the same whichever runs. They are written with the backend
contract's primitives and compute in float32 (float64 stays) with one rounding, except the
optimizer steps, which replay genesis.optim's per-parameter update primitive by primitive.
A composite built on another fused op calls it through ``call_fused`` (its kernel where the
backend has one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from genesis.backends.composite import expand as _expand
from genesis.backends.composite import expand_to as _expand_to_shape
from genesis.backends.composite import norm_acc_dtype as _acc_dtype
from genesis.dtypes import float32, float64, int64
from genesis.fused_declarations import RMS_NORM
from genesis.fused_op import call_fused

Array = object  # a backend's array type (see genesis.backends.base)


# ------------------------------------------------------------------ cross-entropy rows
def cross_entropy(
    b, logits: Array, target: Array, ignore_index: int, label_smoothing: float
) -> tuple[Array, Array]:
    """The composite of the ``cross_entropy`` kernel (see its row)."""
    acc = _acc_dtype(b.dtype_of(logits))
    m, c = logits.shape
    z = b.cast(logits, acc)  # (M, C)
    row_max = b.amax(z, (1,), True)  # (M, 1)
    exp = b.unary("exp", b.binary("sub", z, _expand(b, row_max, z)))
    lse = b.binary("add", b.unary("log", b.sum(exp, (1,), True, acc)), row_max)
    keep, safe = _ce_targets(b, target, ignore_index)  # (M, 1) each
    picked = b.gather(z, 1, safe)  # (M, 1)
    loss = b.binary("sub", lse, picked)
    if label_smoothing:
        smooth = b.binary("sub", b.binary("mul", lse, float(c)), b.sum(z, (1,), True, acc))
        loss = b.binary(
            "add",
            b.binary("mul", loss, 1.0 - label_smoothing),
            b.binary("mul", smooth, label_smoothing / c),
        )
    loss = b.where(keep, loss, 0.0)
    return b.as_strided(loss, (m,), (1,), 0), b.as_strided(lse, (m,), (1,), 0)


def cross_entropy_backward(
    b,
    grad: Array,
    logits: Array,
    target: Array,
    lse: Array,
    ignore_index: int,
    label_smoothing: float,
) -> Array:
    """The composite of the ``cross_entropy_backward`` kernel (see its row)."""
    acc = _acc_dtype(b.dtype_of(logits))
    m, c = logits.shape
    z = b.cast(logits, acc)  # (M, C)
    lse2 = _column(b, lse)
    prob = b.unary("exp", b.binary("sub", z, _expand(b, lse2, z)))
    keep, safe = _ce_targets(b, target, ignore_index)
    classes = b.arange(0, c, 1, b.dtype_of(target), b.device_index_of(logits))
    onehot = b.cast(b.binary("eq", _expand_to_shape(b, classes, z.shape), _expand(b, safe, z)), acc)
    d = b.binary("sub", prob, b.binary("mul", onehot, 1.0 - label_smoothing))
    if label_smoothing:
        d = b.binary("sub", d, label_smoothing / c)
    row = b.where(keep, _column(b, b.cast(grad, acc)), 0.0)
    return b.cast(b.binary("mul", d, _expand(b, row, d)), b.dtype_of(logits))


def _ce_targets(b, target: Array, ignore_index: int) -> tuple[Array, Array]:
    """``(keep, safe)`` of an int64 (M,) target, each (M, 1): ``keep`` is bool (not
    ignored), ``safe`` the target with ignored entries replaced by class 0."""
    t = _column(b, target)
    keep = b.binary("ne", t, ignore_index)
    return keep, b.where(keep, t, 0)


def _column(b, a: Array) -> Array:
    """A 1-d array (M,) viewed as a contiguous column (M, 1)."""
    a = b.contiguous(a)
    return b.as_strided(a, (a.shape[0], 1), (1, 1), b.storage_offset_of(a))


# ------------------------------------------------------------------ decoder blocks


def swiglu(b, gate: Array, up: Array) -> Array:
    """The composite of the ``swiglu`` kernel (see its row)."""
    acc = _acc_dtype(b.dtype_of(gate))
    g, u = b.cast(gate, acc), b.cast(up, acc)
    out = b.binary("mul", b.binary("mul", g, b.unary("sigmoid", g)), u)
    return b.cast(out, b.dtype_of(gate))


def swiglu_backward(b, grad: Array, gate: Array, up: Array) -> tuple[Array, Array]:
    """The composite of the ``swiglu_backward`` kernel (see its row)."""
    dt = b.dtype_of(gate)
    acc = _acc_dtype(dt)
    g, u, d = b.cast(gate, acc), b.cast(up, acc), b.cast(grad, acc)
    s = b.unary("sigmoid", g)
    silu = b.binary("mul", g, s)
    one_minus_s = b.binary("add", b.unary("neg", s), 1.0)
    dsilu = b.binary("mul", s, b.binary("add", b.binary("mul", g, one_minus_s), 1.0))
    grad_gate = b.binary("mul", b.binary("mul", d, u), dsilu)
    return b.cast(grad_gate, dt), b.cast(b.binary("mul", d, silu), dt)


def swiglu_linear(b, gate_up: Array, weight: Array, bias: Array | None) -> Array:
    """The composite of the ``swiglu_linear`` kernel (see its row): ``swiglu`` on the two
    halves of ``gate_up`` (views), then ``linear``."""
    half = gate_up.shape[-1] // 2
    shape = tuple(gate_up.shape[:-1]) + (half,)
    strides, offset = b.strides_of(gate_up), b.storage_offset_of(gate_up)
    gate = b.as_strided(gate_up, shape, strides, offset)  # (..., K)
    up = b.as_strided(gate_up, shape, strides, offset + half * strides[-1])  # (..., K)
    return b.linear(call_fused(b, "swiglu", swiglu, (gate, up)), weight, bias)


def add_rms_norm(
    b, x: Array, residual: Array, weight: Array | None, eps: float
) -> tuple[Array, Array, Array]:
    """The composite of the ``add_rms_norm`` kernel (see its row)."""
    h = b.binary("add", x, residual)
    y, rstd = RMS_NORM.forward(b, h, weight, eps)
    return h, y, rstd


def rotary(b, q: Array, k: Array, cos: Array, sin: Array, inverse: bool) -> tuple[Array, Array]:
    """The composite of the ``rotary`` kernel (see its row)."""
    return _rotary_one(b, q, cos, sin, inverse), _rotary_one(b, k, cos, sin, inverse)


def _rotary_one(b, x: Array, cos: Array, sin: Array, inverse: bool) -> Array:
    dt = b.dtype_of(x)
    acc = _acc_dtype(dt)
    nb, h, s, d = x.shape
    half = d // 2

    def halves(a, heads):  # (B, S, D) or (B, H, S, D) -> two (B, H, S, D/2) views
        st = b.strides_of(a)
        off = b.storage_offset_of(a)
        st4 = (st[0], 0, st[1], st[2]) if heads is None else st
        shape = (nb, h, s, half)
        return (b.as_strided(a, shape, st4, off), b.as_strided(a, shape, st4, off + half * st4[3]))

    x1, x2 = (b.cast(a, acc) for a in halves(x, True))
    c1, c2 = (b.cast(a, acc) for a in halves(cos, None))
    s1, s2 = (b.cast(a, acc) for a in halves(sin, None))
    if inverse:  # out1 = x1 c1 + x2 s2, out2 = x2 c2 - x1 s1
        o1 = b.binary("add", b.binary("mul", x1, c1), b.binary("mul", x2, s2))
        o2 = b.binary("sub", b.binary("mul", x2, c2), b.binary("mul", x1, s1))
    else:  # out1 = x1 c1 - x2 s1, out2 = x2 c2 + x1 s2
        o1 = b.binary("sub", b.binary("mul", x1, c1), b.binary("mul", x2, s1))
        o2 = b.binary("add", b.binary("mul", x2, c2), b.binary("mul", x1, s2))
    return b.cat([b.cast(o1, dt), b.cast(o2, dt)], 3)


def attention_decode(b, q: Array, k_cache: Array, v_cache: Array, cache_lens: Array,
                     key_starts: Array | None, k_new: Array | None, v_new: Array | None,
                     scale: float) -> Array:
    """The composite of the ``attention_decode`` kernel (see its row): the new keys and
    values written with ``index_put_``, then the query heads of each KV group as the rows of
    one matmul against the whole cache, the slots outside ``[start, len)`` (and after each
    query's own slot) masked, a softmax, a matmul."""
    if k_new is not None:
        _write_new_slots(b, k_cache, v_cache, cache_lens, k_new, v_new)
    dt = b.dtype_of(q)
    acc = _acc_dtype(dt)
    nb, hq, n_q, d = q.shape
    hk, s_max = k_cache.shape[1], k_cache.shape[2]
    rows = hq // hk * n_q  # row r of a group: head r // n_q, query r % n_q
    idx = b.device_index_of(q)
    qg = b.contiguous(b.cast(q, acc))  # (B, Hq, n_q, D) = (B, Hk, rows, D)
    qg = b.as_strided(qg, (nb, hk, rows, d), (hk * rows * d, rows * d, d, 1),
                      b.storage_offset_of(qg))
    ks = b.strides_of(k_cache)
    kt = b.as_strided(k_cache, (nb, hk, d, s_max), (ks[0], ks[1], ks[3], ks[2]),
                      b.storage_offset_of(k_cache))  # (B, Hk, D, S)
    scores = b.binary("mul", b.matmul(qg, b.cast(kt, acc)), float(scale))  # (B, Hk, rows, S)
    shape = scores.shape
    # allowed: start <= slot and slot - len <= i - n_q (query i sits at len - n_q + i)
    slots = _expand_to_shape(b, b.arange(0, s_max, 1, int64, idx), shape)
    lens = _per_row(b, b.cast(cache_lens, int64), shape)
    offset = b.binary("sub", slots, lens)
    query_at = b.arange(-n_q, 0, 1, int64, idx)  # (n_q,): i - n_q for each query i
    query_at = b.contiguous(b.as_strided(query_at, (rows // n_q, n_q), (0, 1),
                                         b.storage_offset_of(query_at)))  # one per row
    query_at = b.as_strided(query_at, (rows, 1), (1, 1), b.storage_offset_of(query_at))
    allowed = b.binary("le", offset, _expand_to_shape(b, query_at, shape))
    if key_starts is not None:
        starts = _per_row(b, b.cast(key_starts, int64), shape)
        allowed = b.binary("logical_and", allowed, b.binary("ge", slots, starts))
    scores = b.where(allowed, scores, float("-inf"))
    row_max = b.amax(scores, (3,), True)  # (B, Hk, rows, 1)
    row_max = b.where(b.binary("eq", row_max, float("-inf")), 0.0, row_max)
    weights = b.unary("exp", b.binary("sub", scores, _expand(b, row_max, scores)))
    total = b.sum(weights, (3,), True, acc)
    total = b.where(b.binary("eq", total, 0.0), 1.0, total)  # a row with no key: zeros
    weights = b.binary("div", weights, _expand(b, total, weights))
    out = b.contiguous(b.cast(b.matmul(weights, b.cast(v_cache, acc)), dt))  # (B, Hk, rows, D)
    return b.as_strided(out, (nb, hq, n_q, d), (hq * n_q * d, n_q * d, d, 1),
                        b.storage_offset_of(out))


def _write_new_slots(b, k_cache: Array, v_cache: Array, cache_lens: Array, k_new: Array,
                     v_new: Array) -> None:
    """``cache[b, h, len[b] - n_q + i] = new[b, h, i]`` for the keys and the values."""
    nb, hk, n_q, _ = k_new.shape
    idx = b.device_index_of(k_cache)
    rows = b.arange(0, nb, 1, int64, idx)
    rows = b.as_strided(rows, (nb, 1, 1), (1, 0, 0), b.storage_offset_of(rows))
    heads = b.arange(0, hk, 1, int64, idx)
    heads = b.as_strided(heads, (1, hk, 1), (0, 1, 0), b.storage_offset_of(heads))
    lens = _per_row(b, b.cast(cache_lens, int64), (nb, 1, n_q))
    back = _expand_to_shape(b, b.arange(-n_q, 0, 1, int64, idx), (nb, 1, n_q))
    slots = b.binary("add", lens, back)  # (B, 1, n_q)
    b.index_put_(k_cache, [rows, heads, slots], k_new, False)
    b.index_put_(v_cache, [rows, heads, slots], v_new, False)


def _per_row(b, vector: Array, shape) -> Array:
    """The (B,) ``vector`` viewed along dim 0 of ``shape`` (stride 0 elsewhere)."""
    vector = b.contiguous(vector)
    strides = (1,) + (0,) * (len(shape) - 1)
    return b.as_strided(vector, tuple(shape), strides, b.storage_offset_of(vector))


# ------------------------------------------------------------------ optimizer steps


def adam_step(
    b,
    params: Sequence[Array],
    grads: Sequence[Array],
    exp_avgs: Sequence[Array],
    exp_avg_sqs: Sequence[Array],
    max_exp_avg_sqs: Sequence[Array] | None,
    step: int | Sequence[Array],
    lr: float | Array,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    decoupled: bool,
    maximize: bool,
) -> None:
    """The composite of the ``adam_step`` kernel (see its row)."""
    for i, p in enumerate(params):
        if isinstance(step, int):
            step_size, bc2_sqrt, decay = _adam_scalars(step, lr, beta1, beta2, weight_decay)
        else:
            step_size, bc2_sqrt, decay = _adam_device_scalars(b, step[i], lr, beta1, beta2,
                                                              weight_decay)
        g = grads[i]
        if maximize:
            g = b.unary("neg", g)
        if weight_decay != 0:
            if decoupled:
                _by_scalar(b, "mul", p, decay, out=p)
            else:
                g = b.binary("add", g, _scaled(b, p, weight_decay))
        m, v = exp_avgs[i], exp_avg_sqs[i]
        b.binary("add", m, _scaled(b, b.binary("sub", g, m), 1 - beta1), out=m)
        b.binary("mul", v, beta2, out=v)
        b.binary("add", v, _scaled(b, b.binary("mul", g, g), 1 - beta2), out=v)
        if max_exp_avg_sqs is not None:
            v = b.copy_(max_exp_avg_sqs[i], b.binary("maximum", max_exp_avg_sqs[i], v))
        denom = _by_scalar(b, "div", b.unary("sqrt", v), bc2_sqrt)
        denom = b.binary("add", denom, eps, out=denom)
        b.binary("add", p, _by_scalar(b, "mul", b.binary("div", m, denom), step_size), out=p)


def _adam_scalars(step: int, lr: float, beta1: float, beta2: float, weight_decay: float):
    """Adam's step-dependent factors as host floats: ``(-lr / (1 - beta1**step),
    sqrt(1 - beta2**step), 1 - lr * weight_decay)``."""
    return -(lr / (1 - beta1**step)), (1 - beta2**step) ** 0.5, 1 - lr * weight_decay


def _adam_device_scalars(b, step: Array, lr: float | Array, beta1: float, beta2: float,
                         weight_decay: float):
    """``_adam_scalars`` for a step count held in a 0-d float32 array (and ``lr`` a float or
    a 0-d array): the count is advanced by one in place and the factors are 0-d float64
    arrays computed on its device (nothing is read on the host, so this can be captured
    in a CUDA graph); float64 keeps them equal to the host floats."""
    b.binary("add", step, 1.0, out=step)
    index = b.device_index_of(step)
    t = b.cast(step, float64)

    def one_minus_pow(beta):  # 1 - beta**t (a - x is a + (-x) exactly)
        power = b.binary("pow", b.full((), beta, float64, index), t)
        return b.binary("add", b.unary("neg", power), 1.0)

    if isinstance(lr, (int, float)):
        lr = b.full((), lr, float64, index)
    else:
        lr = b.cast(lr, float64)
    step_size = b.unary("neg", b.binary("div", lr, one_minus_pow(beta1)))
    decay = b.binary("add", b.unary("neg", b.binary("mul", lr, weight_decay)), 1.0)
    return step_size, b.unary("sqrt", one_minus_pow(beta2)), decay


def _by_scalar(b, op: str, a: Array, s, out: Array | None = None) -> Array:
    """``a op s`` for a scalar ``s``: a Python number, or a 0-d float64 array on ``a``'s
    device (read there, broadcast), applied as a number is: in float32 for 16-bit ``a``
    (float64 stays) and rounded once to ``a``'s dtype."""
    if isinstance(s, (int, float)):
        return b.binary(op, a, s, out=out)
    dt = b.dtype_of(a)
    acc = _acc_dtype(dt)
    s = _expand_to_shape(b, b.cast(s, acc), a.shape)
    if dt is acc:
        return b.binary(op, a, s, out=out)
    result = b.cast(b.binary(op, b.cast(a, acc), s), dt)
    return result if out is None else b.copy_(out, result)


def sgd_step(
    b,
    params: Sequence[Array],
    grads: Sequence[Array],
    momentum_buffers: Sequence[Array | None],
    lr: float,
    momentum: float,
    dampening: float,
    weight_decay: float,
    nesterov: bool,
    maximize: bool,
) -> list[Array | None]:
    """The composite of the ``sgd_step`` kernel (see its row)."""
    out = []
    for i, p in enumerate(params):
        g = grads[i]
        if maximize:
            g = b.unary("neg", g)
        if weight_decay != 0:
            g = b.binary("add", g, _scaled(b, p, weight_decay))
        buf = momentum_buffers[i]
        if momentum != 0:
            if buf is None:
                buf = b.copy_(b.empty(g.shape, b.dtype_of(g), b.device_index_of(g)), g)
            else:
                b.binary("mul", buf, momentum, out=buf)
                b.binary("add", buf, _scaled(b, g, 1 - dampening), out=buf)
            g = b.binary("add", g, _scaled(b, buf, momentum)) if nesterov else buf
        b.binary("add", p, _scaled(b, g, -lr), out=p)
        out.append(buf)
    return out


def multi_tensor_norm(b, arrays: Sequence[Array], norm_type: float) -> Array:
    """The composite of the ``multi_tensor_norm`` kernel (see its row)."""
    acc = _acc_dtype(b.dtype_of(arrays[0]))
    total = b.full((), 0.0, acc, b.device_index_of(arrays[0]))
    for a in arrays:
        x = b.cast(a, acc)
        dims = tuple(range(len(x.shape)))
        if norm_type == math.inf:
            part = b.amax(b.unary("abs", x), dims, False) if math.prod(x.shape) else total
            total = b.binary("maximum", total, part)
        else:
            total = b.binary("add", total, b.sum(b.binary("mul", x, x), dims, False, acc))
    return total if norm_type == math.inf else b.unary("sqrt", total)


def multi_tensor_scale_(b, arrays: Sequence[Array], scale: Array) -> None:
    """The composite of the ``multi_tensor_scale_`` kernel (see its row)."""
    sdt = b.dtype_of(scale)
    for a in arrays:
        s = b.as_strided(scale, a.shape, (0,) * len(a.shape), b.storage_offset_of(scale))
        if b.dtype_of(a) is sdt:
            b.binary("mul", a, s, out=a)
        else:
            b.copy_(a, b.binary("mul", b.cast(a, sdt), s))


def amp_unscale_(b, arrays: Sequence[Array], inv_scale: Array, found_inf: Array) -> None:
    """The composite of the ``amp_unscale_`` kernel (see its row)."""
    for a in arrays:
        dims = tuple(range(len(a.shape)))
        finite = b.all(b.unary("isfinite", a), dims, False)  # 0-d bool
        bad = b.cast(b.unary("logical_not", finite), float32)
        b.copy_(found_inf, b.binary("maximum", found_inf, bad))
    call_fused(b, "multi_tensor_scale_", multi_tensor_scale_, (arrays, inv_scale))


def _scaled(b, a: Array, alpha: float) -> Array:
    """``alpha * a`` as genesis's ``alpha=`` arguments compute it (no op when 1)."""
    return a if alpha == 1 else b.binary("mul", a, alpha)
