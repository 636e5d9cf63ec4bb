"""genesis-core's fused ops: softmax, log_softmax, layer_norm and rms_norm.

Each autograd Function runs its row of ``genesis.fused_declarations`` (``SOFTMAX``,
``LAYER_NORM``, ``RMS_NORM``): the backend's kernel registered under the row's name, else the
row's composite (``genesis.fused_op.call_fused``)."""

from __future__ import annotations

import math

from genesis import creation
from genesis import dtypes as D
from genesis.autograd.entries import ternary_entry
from genesis.autograd.function import Function
from genesis.autograd.grad_mode import is_grad_enabled
from genesis.backends.composite import norm_acc_dtype
from genesis.fused_declarations import LAYER_NORM, RMS_NORM, SOFTMAX
from genesis.ops.common import check_same_device, normalize_dim, wrap
from genesis.tensor import Tensor


class Softmax(Function):
    autocast = SOFTMAX.autocast
    log = False

    @classmethod
    def forward(cls, ctx, x, dim):
        y = wrap(SOFTMAX.forward(x._backend, x._data, dim, cls.log), x.device)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @classmethod
    def backward(cls, ctx, g):
        (y,) = ctx.saved_tensors
        if not is_grad_enabled():  # the row's backward kernel (or its composite)
            gx = SOFTMAX.backward(y._backend, y._data, g.contiguous()._data, ctx.dim, cls.log)
            return wrap(gx, y.device), None
        # create_graph: tensor ops, so double backward works
        if cls.log:
            return g - y.exp() * g.sum(ctx.dim, keepdim=True), None
        return y * (g - (g * y).sum(ctx.dim, keepdim=True)), None


class LogSoftmax(Softmax):
    log = True


def _softmax(cls, input: Tensor, dim, dtype):
    if dim is None:
        raise TypeError(f"{cls.__name__.lower()}() requires a dim argument")
    if dtype is not None:
        input = input.to(dtype)
    elif not input.dtype.is_floating_point:
        raise RuntimeError(f"{cls.__name__.lower()}: expected a floating-point input, got "
                           f"{input.dtype}")
    if input.ndim == 0:
        return cls.apply(input.reshape(1), 0).reshape(())
    return cls.apply(input, normalize_dim(dim, input.ndim))


def softmax(input: Tensor, dim: int | None = None, dtype: D.DType | None = None) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``dim``, computed stably (fused where the backend can).

    Args:
        input: the input tensor.
        dim: the dim to normalise over.
        dtype: cast ``input`` to this dtype first.

    Returns:
        A new tensor of ``input``'s shape.
    """
    return _softmax(Softmax, input, dim, dtype)


def log_softmax(input: Tensor, dim: int | None = None, dtype: D.DType | None = None) -> Tensor:
    """``x - logsumexp(x)`` along ``dim``.

    Args:
        input: the input tensor.
        dim: the dim to normalise over.
        dtype: cast ``input`` to this dtype first.

    Returns:
        A new tensor of ``input``'s shape.
    """
    return _softmax(LogSoftmax, input, dim, dtype)


def _flatten_norm_input(op: str, x: Tensor, normalized_shape, params) -> tuple:
    """View ``x`` as (..., N) where N covers ``normalized_shape``; check parameter shapes."""
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) \
        else tuple(normalized_shape)
    k = len(normalized_shape)
    nd = len(x.shape)
    if k == 0 or tuple(x.shape[nd - k:]) != normalized_shape or nd < k:
        raise RuntimeError(
            f"{op}: Given normalized_shape={list(normalized_shape)}, expected input with shape "
            f"[*, {', '.join(map(str, normalized_shape))}], but got input of size "
            f"{list(x.shape)}")
    for name, p in params:
        if p is not None:
            check_same_device(op, x, p)
            if tuple(p.shape) != normalized_shape:
                raise RuntimeError(f"{op}: Expected {name} to be of shape "
                                   f"{list(normalized_shape)}, but got {list(p.shape)}")
    n = math.prod(normalized_shape)
    if k == 1:  # already (..., N): no view nodes, and the parameters' gradients stay fresh
        return x, [p for _, p in params]  # tensors the engine hands to .grad uncopied
    flat_params = [None if p is None else p.reshape(n) for _, p in params]
    return x.reshape(x.shape[:x.ndim - k] + (n,)), flat_params


class LayerNorm(Function):
    autocast = LAYER_NORM.autocast

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y, mean, rstd = LAYER_NORM.forward(x._backend, x._data,
                                           None if weight is None else weight._data,
                                           None if bias is None else bias._data, eps)
        mean, rstd = wrap(mean, x.device), wrap(rstd, x.device)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.has_bias = bias is not None
        ctx.eps = eps
        return wrap(y, x.device)

    @staticmethod
    def backward(ctx, g):
        x, weight, mean, rstd = ctx.saved_tensors
        if is_grad_enabled():  # create_graph: differentiable ops, so double backward works
            return _layer_norm_grads(x, weight, g, ctx.eps, ctx.has_bias) + (None,)
        gx, gw, gb = LAYER_NORM.backward(
            x._backend, g.contiguous()._data, x._data, None if weight is None else weight._data,
            mean._data, rstd._data)
        gx = wrap(gx, x.device)
        gw = None if gw is None else wrap(gw, x.device)
        gb = None if gb is None or not ctx.has_bias else wrap(gb, x.device)
        return gx, gw, gb, None


def _layer_norm_grads(x, weight, g, eps, has_bias) -> tuple:
    """LayerNorm's gradients written with differentiable ops (x: (..., N)).

    Computed and returned in the dtypes of the row's backward (see ``_rms_norm_grads``).
    """
    acc = norm_acc_dtype(x.dtype)
    xa, ga = x.to(acc), g.to(acc)  # (..., N)
    xc = xa - xa.mean(-1, keepdim=True)
    r = ((xc * xc).mean(-1, keepdim=True) + eps).rsqrt()  # (..., 1)
    xhat = xc * r
    gy = ga if weight is None else ga * weight.to(acc)
    gx = r * (gy - gy.mean(-1, keepdim=True) - xhat * (gy * xhat).mean(-1, keepdim=True))
    lead = tuple(range(x.ndim - 1))
    gw = None if weight is None else (ga * xhat).sum(lead).to(weight.dtype)  # (N,)
    gb = ga.sum(lead).to(weight.dtype) if has_bias else None  # (a bias comes with a weight)
    return gx.to(x.dtype), gw, gb


def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` dims, then scale and shift.

    Shape:
        input (*, *normalized_shape); weight and bias normalized_shape.

    Args:
        input: the input tensor.
        normalized_shape: the trailing shape to normalise over.
        weight: the scale, of ``normalized_shape`` (or None).
        bias: the shift, of ``normalized_shape`` (or None).
        eps: added to the variance.

    Returns:
        A new tensor of ``input``'s shape.
    """
    x, (w, b) = _flatten_norm_input("layer_norm", input, normalized_shape,
                                    (("weight", weight), ("bias", bias)))
    if w is None and b is not None:
        w = creation.ones_like(b)
    y = LayerNorm.apply(x, w, b, float(eps))
    return y if x is input else y.reshape(input.shape)


class RMSNorm(Function):
    autocast = RMS_NORM.autocast  # None: the output keeps the input's dtype
    kernel_forward = True  # (the row's kernel or array-level composite: no op)

    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = RMS_NORM.forward(x._backend, x._data, None if weight is None else weight._data,
                                   eps)
        rstd = wrap(rstd, x.device)
        ctx.save_for_backward(x, weight, rstd)
        ctx.eps = eps
        return wrap(y, x.device)

    @staticmethod
    def backward(ctx, g):
        x, weight, rstd = ctx.saved_tensors
        if is_grad_enabled():  # create_graph: differentiable ops, so double backward works
            return _rms_norm_grads(x, weight, g, ctx.eps) + (None,)
        gx, gw = RMS_NORM.backward(x._backend, g.contiguous()._data, x._data,
                                   None if weight is None else weight._data, rstd._data)
        return wrap(gx, x.device), (None if gw is None else wrap(gw, x.device)), None


_rms_norm = ternary_entry(RMSNorm)  # (x, weight, eps): RMSNorm.apply's steps for its arity


def _rms_norm_grads(x, weight, g, eps) -> tuple:
    """RMSNorm's gradients written with differentiable ops (x: (..., N)).

    They must match the row's backward in dtypes as well as values: computed in float32 for
    half inputs (``norm_acc_dtype``), ``grad_x`` in ``x``'s dtype and ``grad_weight`` in the
    weight's. create_graph runs this formula and genesis.compile traces it; were a bfloat16
    ``x`` with a float32 weight (autocast) to get a float32 gradient here, the bfloat16
    matmul before the norm would refuse it (issue 30).
    """
    acc = norm_acc_dtype(x.dtype)
    xa, ga = x.to(acc), g.to(acc)  # (..., N)
    r = ((xa * xa).mean(-1, keepdim=True) + eps).rsqrt()  # (..., 1)
    xhat = xa * r
    gy = ga if weight is None else ga * weight.to(acc)
    gx = r * (gy - xhat * (gy * xhat).mean(-1, keepdim=True))
    gw = None if weight is None else \
        (ga * xhat).sum(tuple(range(x.ndim - 1))).to(weight.dtype)  # (N,)
    return gx.to(x.dtype), gw


def rms_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """Root-mean-square normalisation over the trailing ``normalized_shape`` dims.

    ``eps`` defaults to the machine epsilon of the input's dtype, as in torch.

    Args:
        input: the input tensor.
        normalized_shape: the trailing shape to normalise over.
        weight: the scale, of ``normalized_shape`` (or None).
        eps: added to the mean square; the dtype's epsilon when None.

    Returns:
        A new tensor of ``input``'s shape.
    """
    if eps is None:
        eps = {D.float16: 0.0009765625, D.bfloat16: 0.0078125,
               D.float64: 2.220446049250313e-16}.get(input.dtype, 1.1920928955078125e-07)
    x, (w,) = _flatten_norm_input("rms_norm", input, normalized_shape, (("weight", weight),))
    y = _rms_norm(x, w, float(eps))
    return y if x is input else y.reshape(input.shape)
