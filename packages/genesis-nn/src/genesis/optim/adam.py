"""Adam (and AMSGrad): adaptive moment estimation."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import genesis
from genesis.nn.fused_declarations import ADAM_STEP
from genesis.optim.optimizer import (
    Optimizer,
    bucket_by_array,
    bump_versions,
    check_foreach_fused,
)


class Adam(Optimizer):
    """Adam, as ``torch.optim.Adam`` (same update, same order of operations).

    For each parameter, at step ``t`` with gradient ``g`` (negated when ``maximize``)::

        g = g + weight_decay * p                 (or p = p * (1 - lr * wd), decoupled)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        v_hat = max(v_hat, v)                    (amsgrad only; used instead of v)
        p = p - lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)

    Args:
        params: parameters (or parameter groups) to optimize.
        lr: learning rate.
        betas: decay rates of the first and second moment averages.
        eps: term added to the denominator for numerical stability.
        weight_decay: L2 penalty (added to the gradient unless ``decoupled_weight_decay``).
        amsgrad: use the running maximum of the second moment (AMSGrad).
        maximize: ascend the objective instead of descending it.
        decoupled_weight_decay: decay the weights directly, as AdamW.
        foreach, fused: update every parameter of a group in one multi-tensor call (the
            backend's fused ``adam_step`` kernel where it has one); ``None`` (default) picks
            it for parameters on an accelerator, as torch does. Same update either way.
        capturable: keep the step count on the parameter's device (``state["step"]``, a
            0-d float32 tensor, as torch) and compute the bias corrections there, so that
            ``step()`` reads nothing on the host and can be captured in a CUDA graph
            (``lr`` may then be a 0-d tensor on that device too, changed in place between
            replays). Same update either way; without it ``step()`` refuses to be
            captured (``genesis.cuda.GraphCaptureError``).

    Example::

        >>> opt = genesis.optim.Adam(model.parameters(), lr=3e-4, betas=(0.9, 0.95))
    """

    def __init__(self, params: Iterable, lr: float | genesis.Tensor = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *, maximize: bool = False,
                 decoupled_weight_decay: bool = False, foreach: bool | None = None,
                 fused: bool | None = None, capturable: bool = False) -> None:
        if isinstance(lr, genesis.Tensor):
            if foreach and not capturable:
                raise ValueError("lr as a Tensor is not supported for capturable=False and "
                                 "foreach=True")
            if lr.numel() != 1:
                raise ValueError("Tensor lr must be 1-element")
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        check_foreach_fused(foreach, fused)
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                    "amsgrad": amsgrad, "maximize": maximize, "foreach": foreach,
                    "capturable": capturable, "fused": fused,
                    "decoupled_weight_decay": decoupled_weight_decay}
        super().__init__(params, defaults)

    def init_state(self, param, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["step"] = (genesis.zeros((), dtype=genesis.float32, device=param.device)
                         if group["capturable"] else 0)
        state["exp_avg"] = genesis.zeros_like(param)
        state["exp_avg_sq"] = genesis.zeros_like(param)
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = genesis.zeros_like(param)

    def update(self, param, grad, state: dict[str, Any], group: dict[str, Any]) -> None:
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        weight_decay = group["weight_decay"]
        if group["maximize"]:
            grad = -grad
        if isinstance(state["step"], genesis.Tensor):  # capturable: all on the device
            neg_step_size, bias_correction2_sqrt = _device_factors(state["step"], lr, beta1,
                                                                   beta2)
        else:
            lr = float(lr)  # a tensor lr without capturable is read once (as torch does)
            state["step"] += 1
            step = state["step"]
            neg_step_size = -(lr / (1 - beta1**step))
            bias_correction2_sqrt = (1 - beta2**step) ** 0.5
        if weight_decay != 0:
            if group["decoupled_weight_decay"]:
                param.mul_(1 - lr * weight_decay)
            else:
                grad = grad.add(param, alpha=weight_decay)
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        if group["amsgrad"]:
            max_sq = state["max_exp_avg_sq"]
            max_sq.copy_(genesis.maximum(max_sq, exp_avg_sq))
            exp_avg_sq = max_sq
        denom = _by_scalar(operator.truediv, exp_avg_sq.sqrt(), bias_correction2_sqrt).add_(eps)
        if isinstance(neg_step_size, genesis.Tensor):  # what addcdiv_'s value= computes
            param.add_(_by_scalar(operator.mul, exp_avg / denom, neg_step_size))
        else:
            param.addcdiv_(exp_avg, denom, value=neg_step_size)

    def multi_update(self, params, grads, states, group: dict[str, Any]) -> None:
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        if group["capturable"]:  # the counts are advanced by the backend, on the device
            buckets = bucket_by_array(params, grads, states)
            if isinstance(lr, genesis.Tensor):  # read on the device when it lives there
                lr = lr._data if lr.device == params[0].device else float(lr)
        else:
            lr = float(lr)
            for state in states:
                state["step"] += 1
            buckets = bucket_by_array(params, grads, states, lambda st: (st["step"],))
        for _, items in buckets.items():
            ps = [p for p, _, _ in items]
            ms = [st["exp_avg"] for _, _, st in items]
            vs = [st["exp_avg_sq"] for _, _, st in items]
            maxs = [st["max_exp_avg_sq"] for _, _, st in items] if group["amsgrad"] else None
            steps = [st["step"] for _, _, st in items]
            step = [s._data for s in steps] if group["capturable"] else steps[0]
            ADAM_STEP.forward(
                ps[0]._backend, [p._data for p in ps], [g._data for _, g, _ in items],
                [m._data for m in ms], [v._data for v in vs],
                None if maxs is None else [x._data for x in maxs], step, lr, beta1, beta2, eps,
                group["weight_decay"], group["decoupled_weight_decay"], group["maximize"])
            bump_versions(ps, ms, vs, maxs or (), steps if group["capturable"] else ())


def _device_factors(step, lr, beta1: float, beta2: float):
    """Advance the 0-d step tensor by one and return ``(-lr / (1 - beta1**step),
    sqrt(1 - beta2**step))`` as 0-d float64 tensors on its device (no host read; float64
    keeps them equal to the host floats of the non-capturable path)."""
    step.add_(1)
    t = step.double()
    if isinstance(lr, genesis.Tensor):
        lr = lr.double() if lr.device == step.device else float(lr)
    return -(lr / (1 - beta1**t)), (1 - beta2**t).sqrt()


def _by_scalar(op, x, s):
    """``op(x, s)`` for a float or a 0-d float64 tensor ``s``, rounded as for a float: a
    16-bit ``x`` is computed in float32 and rounded once, as a Python number operand is."""
    if isinstance(s, genesis.Tensor) and x.dtype in (genesis.float16, genesis.bfloat16):
        return op(x.float(), s).to(x.dtype)
    return op(x, s)
