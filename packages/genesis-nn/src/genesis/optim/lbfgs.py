"""L-BFGS: a quasi-Newton method driven by a closure that re-evaluates the loss."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import genesis
from genesis.optim.lbfgs_line_search import strong_wolfe
from genesis.optim.optimizer import Optimizer


class LBFGS(Optimizer):
    """Limited-memory BFGS, as ``torch.optim.LBFGS`` (same iterations, same stopping rules).

    All parameters are treated as one flat vector ``x`` with gradient ``g``. Each step runs
    up to ``max_iter`` iterations of::

        s = x_k - x_{k-1},  y = g_k - g_{k-1}          (kept when y . s > 1e-10, the last
                                                        history_size pairs)
        d = -H g            (H: the inverse-Hessian estimate of the two-loop recursion,
                             scaled by (y . s) / (y . y) of the newest pair)
        x = x + t d         (t = lr, or min(1, 1 / |g|_1) * lr on the very first iteration;
                             with line_search_fn="strong_wolfe", a step meeting the strong
                             Wolfe conditions instead)

    and stops early when ``max|g| <= tolerance_grad``, when the step or the loss change
    falls below ``tolerance_change``, or after ``max_eval`` closure calls.

    Args:
        params: the parameters (one group only: L-BFGS has no per-group options).
        lr: the step length (scales the step the line search starts from).
        max_iter: iterations per ``step``.
        max_eval: closure evaluations per ``step``; ``max_iter * 5 // 4`` when None.
        tolerance_grad: stop when the largest gradient entry is this small.
        tolerance_change: stop when the loss or the parameters change less than this.
        history_size: how many ``(s, y)`` pairs to remember.
        line_search_fn: ``None`` (fixed steps) or ``"strong_wolfe"``.

    Losses, step lengths and curvature scalars are Python floats (torch keeps 0-d tensors
    for some of them): every iteration reads the loss on the host anyway.

    Example::

        >>> opt = genesis.optim.LBFGS(model.parameters(), line_search_fn="strong_wolfe")
        >>> def closure():
        ...     opt.zero_grad()
        ...     loss = loss_fn(model(x), y)
        ...     loss.backward()
        ...     return loss
        >>> opt.step(closure)
    """

    def __init__(self, params: Iterable, lr: float = 1, max_iter: int = 20,
                 max_eval: int | None = None, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: str | None = None) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if line_search_fn not in (None, "strong_wolfe"):
            raise ValueError(f"only 'strong_wolfe' is supported as line_search_fn, got "
                             f"{line_search_fn!r}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = {"lr": lr, "max_iter": max_iter, "max_eval": max_eval,
                    "tolerance_grad": tolerance_grad, "tolerance_change": tolerance_change,
                    "history_size": history_size, "line_search_fn": line_search_fn}
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    # ------------------------------------------------------- the flat vector
    def _flat_grad(self):
        """Every parameter's gradient (zeros where there is none) in one new 1-d tensor."""
        return genesis.cat([genesis.zeros(p.numel(), dtype=p.dtype, device=p.device)
                            if p.grad is None else p.grad.reshape(-1) for p in self._params])

    def _move(self, t: float, direction) -> None:
        """``x += t * direction``, the flat direction split back over the parameters."""
        offset = 0
        for p in self._params:
            n = p.numel()
            p.add_(direction[offset:offset + n].view_as(p), alpha=t)
            offset += n

    def _evaluate_at(self, closure: Callable, t: float, direction) -> tuple[float, Any]:
        """Loss and flat gradient at ``x + t * direction``; ``x`` is restored afterwards."""
        saved = [p.clone() for p in self._params]
        self._move(t, direction)
        with genesis.enable_grad():
            loss = float(closure())
        grad = self._flat_grad()
        for p, x in zip(self._params, saved):
            p.copy_(x)
        return loss, grad

    # ----------------------------------------------------------------- step
    def step(self, closure: Callable[[], Any]):  # type: ignore[override]
        """Run up to ``max_iter`` L-BFGS iterations.

        Args:
            closure: clears the gradients, computes the loss, calls ``backward`` and returns
                the loss (it is called several times).

        Returns:
            The loss of the first closure call.
        """
        for hook in list(self._step_pre_hooks):
            hook(self, (closure,), {})
        with genesis.no_grad():
            loss = self._step(closure)
        for hook in list(self._step_post_hooks):
            hook(self, (closure,), {})
        return loss

    def _step(self, closure: Callable):
        group = self.param_groups[0]
        lr, max_iter, max_eval = float(group["lr"]), group["max_iter"], group["max_eval"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        with genesis.enable_grad():
            first_loss = closure()
        loss = float(first_loss)
        evals = 1
        state["func_evals"] += 1
        grad = self._flat_grad()
        if float(grad.abs().max()) <= tol_grad:
            return first_loss

        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        h_diag, prev_grad = state.get("H_diag"), state.get("prev_flat_grad")
        prev_loss = state.get("prev_loss")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d = grad.neg()
                old_dirs, old_stps, ro, h_diag = [], [], [], 1.0
            else:
                y, s = grad - prev_grad, d * t
                ys = float(y.dot(s))
                if ys > 1e-10:  # keep the pair only where the curvature is positive
                    if len(old_dirs) == group["history_size"]:
                        old_dirs.pop(0), old_stps.pop(0), ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / float(y.dot(y))
                d = _two_loop(grad, old_dirs, old_stps, ro, h_diag)
            prev_grad = grad.clone()
            prev_loss = loss
            t = min(1.0, 1.0 / float(grad.abs().sum())) * lr if state["n_iter"] == 1 else lr
            slope = float(grad.dot(d))
            if slope > -tol_change:  # not a descent direction any more
                break

            used = 0
            if group["line_search_fn"] == "strong_wolfe":
                loss, grad, t, used = strong_wolfe(
                    lambda step, d=d: self._evaluate_at(closure, step, d), d, t, loss, grad, slope,
                    max_ls=max_eval - evals)
                self._move(t, d)
                converged = float(grad.abs().max()) <= tol_grad
            else:
                self._move(t, d)
                converged = False
                if n_iter != max_iter:  # (the last iteration's loss is never looked at)
                    with genesis.enable_grad():
                        loss = float(closure())
                    grad = self._flat_grad()
                    converged = float(grad.abs().max()) <= tol_grad
                    used = 1
            evals += used
            state["func_evals"] += used

            if n_iter == max_iter or evals >= max_eval or converged:
                break
            if float((d * t).abs().max()) <= tol_change or abs(loss - prev_loss) < tol_change:
                break

        state.update({"d": d, "t": t, "old_dirs": old_dirs, "old_stps": old_stps, "ro": ro,
                      "H_diag": h_diag, "prev_flat_grad": prev_grad, "prev_loss": prev_loss})
        return first_loss


def _two_loop(grad, old_dirs: list, old_stps: list, ro: list, h_diag: float):
    """``-H grad`` by the L-BFGS two-loop recursion over the stored ``(s, y)`` pairs."""
    q = grad.neg()
    alphas = [0.0] * len(old_dirs)
    for i in range(len(old_dirs) - 1, -1, -1):
        alphas[i] = float(old_stps[i].dot(q)) * ro[i]
        q.add_(old_dirs[i], alpha=-alphas[i])
    r = q * h_diag
    for i in range(len(old_dirs)):
        beta = float(old_dirs[i].dot(r)) * ro[i]
        r.add_(old_stps[i], alpha=alphas[i] - beta)
    return r
