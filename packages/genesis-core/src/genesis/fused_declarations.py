"""genesis-core's fused ops, declared once: a row per op (see ``genesis.fused_op``).

Each row names the op (and its kernel pair), its composite on the backend contract's
primitives (in ``genesis.backends.composite``: the reference and the fallback) and its
autocast category. ``genesis.ops.fused`` makes the public functions and autograd Functions
from them (``genesis.softmax``, ``F.layer_norm``, ``F.rms_norm``); the CPU backend registers
torch's softmax as the ``softmax`` kernel and genesis-cuda its Triton kernels under these
names. genesis-nn declares its own fused ops (attention, cross-entropy, SwiGLU, rotary, the
optimizer steps) in ``genesis.nn.fused_declarations``.

Kernel signatures (what ``backend.kernel(name)`` is called with, and returns):

* ``softmax(x, dim, log) -> y``: softmax (log_softmax when ``log``) along ``dim`` of a
  floating ``x``, computed in at least float32, returned in ``x``'s dtype.
  ``softmax_backward(y, grad, dim, log) -> grad_x`` from the output ``y``.
* ``layer_norm(x, weight, bias, eps) -> (y, mean, rstd)`` over the last dim, ``mean`` and
  ``rstd`` float32 (float64 for float64 input) of shape ``x.shape[:-1] + (1,)``;
  ``layer_norm_backward(grad, x, weight, mean, rstd) -> (grad_x, grad_weight, grad_bias)``.
* ``rms_norm(x, weight, eps) -> (y, rstd)`` over the last dim, ``rstd`` as layer_norm's;
  ``rms_norm_backward(grad, x, weight, rstd) -> (grad_x, grad_weight)``.

``weight``/``bias`` may be None; kernels return new arrays. The norms' backward kernels give
``grad_x`` in ``x``'s dtype and the parameters' gradients in the weight's (a bfloat16 ``x`` with
a float32 weight under autocast), computing half inputs in float32; the differentiable
formulas ``genesis.ops.fused`` uses under create_graph (and genesis.compile traces) match them.
"""

from __future__ import annotations

from genesis.backends import composite
from genesis.fused_op import fused

# name           forward composite      backward composite            autocast
SOFTMAX = fused("softmax", composite.softmax, composite.softmax_backward, autocast="fp32")
LAYER_NORM = fused("layer_norm", composite.layer_norm, composite.layer_norm_backward,
                   autocast="fp32")
# (no autocast category: as in torch's CUDA autocast, the output keeps the input's dtype; the
# kernels compute half inputs in float32 internally)
RMS_NORM = fused("rms_norm", composite.rms_norm, composite.rms_norm_backward)

FUSED_OPS = (SOFTMAX, LAYER_NORM, RMS_NORM)
