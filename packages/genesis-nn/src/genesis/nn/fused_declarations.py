"""genesis-nn's fused ops, declared once: a row per op (see ``genesis.fused_op``).

A row names the op (and its kernel pair: ``<name>``, ``<name>_backward``), its composite in
``genesis.nn.fused_composites`` (the reference, and the fallback where a backend has no kernel
of that name) and its autocast category. The autograd Functions and public functions that run
them are in ``genesis.nn.functional`` (attention, attention_decode, cross_entropy_rows,
fused_loss, fused_llm), ``genesis.optim``, ``genesis.amp`` and ``genesis.nn.utils``; the CPU
backend registers torch's flash attention as the ``scaled_dot_product_attention`` kernel
pair, and genesis-cuda its Triton kernels under these names (``genesis_cuda.fused_kernels``).

The kernels' arguments (backend arrays and plain values) and results; one floating dtype
throughout unless stated; half inputs computed in float32 (float64 stays) and rounded once:

* ``scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale, gen)``: q (B, Hq,
  L, E), k (B, Hk, S, E), v (B, Hk, S, Ev), Hq a multiple of Hk (query head h uses KV head
  h // (Hq // Hk)); ``mask`` None or bool (True = may attend) / float (added), viewed at
  (B, Hq, L, S); dropout drawn from generator ``gen``. Returns ``(out (B, Hq, L, Ev), lse
  (B, Hq, L) float32, rng)`` (``rng``: what the backward needs to redraw the dropout).
  ``..._backward(grad, q, k, v, out, lse, mask, dropout_p, is_causal, scale, rng)`` returns
  ``(dq, dk, dv)``. No array composite: where no kernel runs, ``F.scaled_dot_product_attention``
  runs its composite of differentiable ops (matmul, softmax, dropout), the reference.
* ``attention_decode(q, k_cache, v_cache, cache_lens, key_starts, k_new, v_new, scale)``:
  inference attention of the last ``n_q`` tokens of each sequence over its KV cache: q (B, Hq,
  n_q, D), caches (B, Hk, S_max, D); row b sees slots ``[key_starts[b], cache_lens[b])``
  (device int arrays; ``key_starts`` None for 0), query i up to slot ``cache_lens[b] - n_q +
  i``; ``k_new``/``v_new`` (B, Hk, n_q, D), when given, are first written into the caches at
  those slots. Returns (B, Hq, n_q, D), zeros for a query with no slot; reads the lengths on
  the device only (a CUDA graph can capture it).
* ``cross_entropy(logits, target, ignore_index, label_smoothing)``: logits (M, C), int64
  target (M,). Returns ``(loss, lse)``, both (M,) float32 (float64 for float64 logits):
  ``loss = (1 - s) * (lse - z[t]) + s / C * (C * lse - sum(z))``, 0 where ``target ==
  ignore_index``. ``cross_entropy_backward(grad, logits, target, lse, ignore_index,
  label_smoothing)``: (M, C) in the logits' dtype, ``grad * (softmax(z) - (1 - s) *
  onehot(t) - s / C)``, zero rows where ignored.
* ``swiglu(gate, up)``: ``silu(gate) * up`` (same shape, any strides), a new contiguous array;
  ``swiglu_backward(grad, gate, up)``: ``(grad_gate, grad_up)``.
* ``swiglu_linear(gate_up, weight, bias)``: inference (no backward), ``linear(swiglu(gate, up),
  weight, bias)`` with ``gate``/``up`` the halves of gate_up (..., 2K); weight (N, K), bias
  (N,) or None; result (..., N). The SwiGLU product is rounded to the dtype first.
* ``add_rms_norm(x, residual, weight, eps)``: ``h = x + residual``; returns ``(h, y, rstd)``
  as ``rms_norm(h)`` does (its backward is core's ``rms_norm_backward`` on ``h``).
* ``rotary(q, k, cos, sin, inverse)``: q (B, Hq, S, D), k (B, Hk, S, D), cos/sin (B, S, D);
  ``x * cos + rotate_half(x) * sin`` on the half-split pairs; with ``inverse`` the transpose
  ``x * cos - rotate_half(x * sin)`` (the backward is this kernel with ``inverse=True``).
  Returns new contiguous ``(q, k)``.
* ``adam_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, step, lr, beta1, beta2,
  eps, weight_decay, decoupled, maximize)``: one Adam (``decoupled``: AdamW) step in place over
  lists of same-dtype arrays on one device (``max_exp_avg_sqs`` None without AMSGrad).
  ``step`` is an int (counted from 1), or (capturable) a list of 0-d float32 counts advanced
  by one in place, with ``lr`` a float or 0-d array: the bias corrections are then computed on
  the device. Returns None.
* ``sgd_step(params, grads, momentum_buffers, lr, momentum, dampening, weight_decay, nesterov,
  maximize)``: one SGD step in place; a None buffer (first step) starts as a copy of the
  gradient. Returns the buffers (all None without momentum).
* ``multi_tensor_norm(arrays, norm_type)``: the 2-norm (``2.0``) or max-abs norm (``inf``) of
  every element together, a 0-d float32 array (float64 for float64 arrays).
* ``multi_tensor_scale_(arrays, scale)``: ``a *= scale`` in place, ``scale`` a 0-d array read
  on the device; the product taken in ``scale``'s dtype. Returns None.
* ``amp_unscale_(arrays, inv_scale, found_inf)``: set the 0-d float32 ``found_inf`` to 1 if any
  element is inf or NaN, then ``a *= inv_scale`` in place. Returns None.
"""

from __future__ import annotations

from genesis.fused_op import fused
from genesis.nn import fused_composites as c

# name                 forward composite     backward composite
SCALED_DOT_PRODUCT_ATTENTION = fused("scaled_dot_product_attention", None, autocast="lower",
                                     backward_kernel="scaled_dot_product_attention_backward")
ATTENTION_DECODE = fused("attention_decode", c.attention_decode)
CROSS_ENTROPY = fused("cross_entropy", c.cross_entropy, c.cross_entropy_backward)
SWIGLU = fused("swiglu", c.swiglu, c.swiglu_backward)
SWIGLU_LINEAR = fused("swiglu_linear", c.swiglu_linear)
ADD_RMS_NORM = fused("add_rms_norm", c.add_rms_norm)
ROTARY = fused("rotary", c.rotary)
ADAM_STEP = fused("adam_step", c.adam_step)
SGD_STEP = fused("sgd_step", c.sgd_step)
MULTI_TENSOR_NORM = fused("multi_tensor_norm", c.multi_tensor_norm)
MULTI_TENSOR_SCALE = fused("multi_tensor_scale_", c.multi_tensor_scale_)
AMP_UNSCALE = fused("amp_unscale_", c.amp_unscale_)

FUSED_OPS = (SCALED_DOT_PRODUCT_ATTENTION, ATTENTION_DECODE, CROSS_ENTROPY, SWIGLU, SWIGLU_LINEAR,
             ADD_RMS_NORM, ROTARY, ADAM_STEP, SGD_STEP, MULTI_TENSOR_NORM, MULTI_TENSOR_SCALE,
             AMP_UNSCALE)
