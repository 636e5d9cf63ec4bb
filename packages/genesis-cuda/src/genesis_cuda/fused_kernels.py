"""genesis-cuda's kernels of the fused ops, registered on ``CUDABackend`` by op name.

The fused ops are declared by the packages that own them (``genesis.fused_declarations``:
softmax and the norms; ``genesis.nn.fused_declarations``: attention, cross-entropy, SwiGLU,
rotary, the optimizer steps ...; ``genesis.distributed.fsdp.copy_plan``: FSDP's
``multi_tensor_copy_``), each with a composite that runs where a backend has no
kernel. ``KERNELS`` maps each op's kernel name to the launcher here: one call into the
``genesis_cuda.kernels`` family of the same name (``softmax`` ->
``kernels.softmax.softmax``), with the signature of the row's composite minus the backend.
The families are imported on first use, so registering these imports no Triton.

A kernel returns ``NotImplemented`` for operands it does not cover (float64 norms, head sizes
the flash kernels lack, strided or mixed optimizer lists ...): genesis then runs the row's
composite on this backend's primitives (``genesis.fused_op.call_fused``).
"""

from __future__ import annotations

from genesis.dtypes import float64
from genesis_cuda import kernels


# ------------------------------------------------------ core's: softmax and the norms
def softmax(x, dim, log):
    return kernels.softmax.softmax(x, dim, log)


def softmax_backward(y, grad, dim, log):
    return kernels.softmax.softmax_backward(y, grad, dim, log)


# the norm kernels accumulate in float32: float64 inputs take the composite
def layer_norm(x, weight, bias, eps):
    if x.dtype is float64:
        return NotImplemented
    return kernels.norms.layer_norm(x, weight, bias, eps)


def layer_norm_backward(grad, x, weight, mean, rstd):
    if x.dtype is float64:
        return NotImplemented
    return kernels.norms.layer_norm_backward(grad, x, weight, mean, rstd)


def rms_norm(x, weight, eps):
    if x.dtype is float64:
        return NotImplemented
    return kernels.norms.rms_norm(x, weight, eps)


def rms_norm_backward(grad, x, weight, rstd):
    if x.dtype is float64:
        return NotImplemented
    return kernels.norms.rms_norm_backward(grad, x, weight, rstd)


# --------------------------------------------------------------- genesis-nn's: attention
def scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale, gen):
    return kernels.attention.scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal,
                                                          scale, gen)


def scaled_dot_product_attention_backward(grad, q, k, v, out, lse, mask, dropout_p, is_causal,
                                          scale, rng):
    return kernels.attention_backward.scaled_dot_product_attention_backward(
        grad, q, k, v, out, lse, mask, dropout_p, is_causal, scale, rng)


def attention_decode(q, k_cache, v_cache, cache_lens, key_starts, k_new, v_new, scale):
    if not kernels.attention_decode.decode_supported(q, k_cache, v_cache):
        return NotImplemented
    return kernels.attention_decode.attention_decode(q, k_cache, v_cache, cache_lens, scale,
                                                     True, key_starts, k_new, v_new)


# ------------------------------------------- genesis-nn's: LLM training blocks (issue 9)
def cross_entropy(logits, target, ignore_index, label_smoothing):
    return kernels.cross_entropy.cross_entropy(logits, target, ignore_index, label_smoothing)


def cross_entropy_backward(grad, logits, target, lse, ignore_index, label_smoothing):
    return kernels.cross_entropy.cross_entropy_backward(grad, logits, target, lse,
                                                        ignore_index, label_smoothing)


def swiglu(gate, up):
    return kernels.swiglu.swiglu(gate, up)


def swiglu_backward(grad, gate, up):
    return kernels.swiglu.swiglu_backward(grad, gate, up)


def swiglu_linear(gate_up, weight, bias):
    return kernels.matmul.swiglu_linear(gate_up, weight, bias)


def add_rms_norm(x, residual, weight, eps):
    return kernels.add_rms_norm.add_rms_norm(x, residual, weight, eps)


def rotary(q, k, cos, sin, inverse):
    return kernels.rotary.rotary(q, k, cos, sin, inverse)


# ------------------------------------------------ genesis-nn's: optimizer steps and AMP
def adam_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, step, lr, beta1, beta2,
              eps, weight_decay, decoupled, maximize):
    return kernels.optim.adam_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, step,
                                   lr, beta1, beta2, eps, weight_decay, decoupled, maximize)


def sgd_step(params, grads, momentum_buffers, lr, momentum, dampening, weight_decay, nesterov,
             maximize):
    return kernels.optim.sgd_step(params, grads, momentum_buffers, lr, momentum, dampening,
                                  weight_decay, nesterov, maximize)


def multi_tensor_norm(arrays, norm_type):
    return kernels.multi_tensor.multi_tensor_norm(arrays, norm_type)


def multi_tensor_scale_(arrays, scale):
    return kernels.multi_tensor.multi_tensor_scale_(arrays, scale)


def amp_unscale_(arrays, inv_scale, found_inf):
    return kernels.multi_tensor.amp_unscale_(arrays, inv_scale, found_inf)


# --------------------------------- genesis-distributed's: FSDP's copies (fsdp/copy_plan.py)
def multi_tensor_copy_(dsts, srcs):
    return kernels.multi_tensor_copy.multi_tensor_copy_(dsts, srcs)


# kernel name -> launcher (each registered on CUDABackend under its name)
KERNELS = {fn.__name__: fn for fn in (
    softmax, softmax_backward, layer_norm, layer_norm_backward, rms_norm, rms_norm_backward,
    scaled_dot_product_attention, scaled_dot_product_attention_backward, attention_decode,
    cross_entropy, cross_entropy_backward, swiglu, swiglu_backward, swiglu_linear,
    add_rms_norm, rotary, adam_step, sgd_step, multi_tensor_norm, multi_tensor_scale_,
    amp_unscale_, multi_tensor_copy_)}
