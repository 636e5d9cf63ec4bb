"""The strong-Wolfe line search of ``LBFGS(line_search_fn="strong_wolfe")``.

Nocedal and Wright's algorithms 3.5 (bracketing) and 3.6 (zoom), with the minimiser of the
cubic through two points' values and slopes as the trial step, as minFunc and torch do. The
objective is seen only through ``evaluate(t) -> (loss, flat_grad)`` along a fixed direction
``d``; losses, slopes and steps are Python floats.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from genesis.tensor import Tensor


@dataclass
class _Point:
    """One evaluated step along the direction: its size, loss, gradient and slope."""

    t: float
    loss: float
    grad: Tensor
    slope: float


def cubic_minimum(a: _Point, b: _Point, bounds: tuple[float, float] | None = None) -> float:
    """The minimiser of the cubic matching ``a`` and ``b``'s losses and slopes, clamped to
    ``bounds`` (the interval between them by default); the bounds' midpoint when the cubic
    has no minimum."""
    lo, hi = bounds if bounds is not None else (min(a.t, b.t), max(a.t, b.t))
    d1 = a.slope + b.slope - 3 * (a.loss - b.loss) / (a.t - b.t)
    d2_square = d1 * d1 - a.slope * b.slope
    if d2_square < 0:
        return (lo + hi) / 2.0
    d2 = d2_square**0.5
    if a.t <= b.t:
        t = b.t - (b.t - a.t) * ((b.slope + d2 - d1) / (b.slope - a.slope + 2 * d2))
    else:
        t = a.t - (a.t - b.t) * ((a.slope + d2 - d1) / (a.slope - b.slope + 2 * d2))
    return min(max(t, lo), hi)


def strong_wolfe(evaluate: Callable[[float], tuple[float, Tensor]], direction: Tensor,
                 t: float, loss: float, grad: Tensor, slope: float, *, c1: float = 1e-4,
                 c2: float = 0.9, tolerance_change: float = 1e-9,
                 max_ls: int = 25) -> tuple[float, Tensor, float, int]:
    """A step ``t`` along ``direction`` meeting the strong Wolfe conditions
    ``f(t) <= f(0) + c1 t f'(0)`` (enough decrease) and ``|f'(t)| <= -c2 f'(0)`` (flat
    enough), or the best one found in ``max_ls`` evaluations.

    Args:
        evaluate: the loss and flat gradient at step ``t`` (parameters left unchanged).
        direction: the search direction (flat).
        t: the first step to try.
        loss, grad, slope: at ``t = 0``: the loss, flat gradient and ``grad . direction``.
        c1, c2: the Wolfe constants.
        tolerance_change: stop zooming once the bracket is this small (in parameter change).
        max_ls: the most evaluations.

    Returns:
        ``(loss, flat_grad, t, evaluations)`` at the chosen step.
    """
    d_norm = float(direction.abs().max())
    start = _Point(0.0, loss, grad.clone(), slope)

    def at(step: float) -> _Point:
        f, g = evaluate(step)
        return _Point(step, f, g, float(g.dot(direction)))

    prev, new = start, at(t)
    evaluations, iters = 1, 0
    bracket, done = None, False
    while iters < max_ls:  # phase 1: grow the step until an interval holds a good one
        if new.loss > loss + c1 * new.t * slope or (iters > 1 and new.loss >= prev.loss):
            bracket = [prev, new]
            break
        if abs(new.slope) <= -c2 * slope:
            bracket, done = [new], True
            break
        if new.slope >= 0:
            bracket = [prev, new]
            break
        step = cubic_minimum(prev, new, bounds=(new.t + 0.01 * (new.t - prev.t), new.t * 10))
        prev, new = new, at(step)
        evaluations += 1
        iters += 1
    if iters == max_ls:
        bracket = [start, new]
    if done:
        return new.loss, new.grad, new.t, evaluations

    # phase 2 (zoom): shrink the bracket; `low` is its end with the lower loss
    low, high = (0, 1) if bracket[0].loss <= bracket[-1].loss else (1, 0)
    stalled = False
    while iters < max_ls:
        if abs(bracket[1].t - bracket[0].t) * d_norm < tolerance_change:
            break
        step = cubic_minimum(bracket[0], bracket[1])
        top, bottom = max(bracket[0].t, bracket[1].t), min(bracket[0].t, bracket[1].t)
        margin = 0.1 * (top - bottom)
        if min(top - step, step - bottom) < margin:  # too close to an end: move inwards
            if stalled or step >= top or step <= bottom:
                step = top - margin if abs(step - top) < abs(step - bottom) else bottom + margin
                stalled = False
            else:
                stalled = True
        else:
            stalled = False
        new = at(step)
        evaluations += 1
        iters += 1
        if new.loss > loss + c1 * new.t * slope or new.loss >= bracket[low].loss:
            bracket[high] = new
            low, high = (0, 1) if bracket[0].loss <= bracket[1].loss else (1, 0)
        else:
            if abs(new.slope) <= -c2 * slope:
                done = True
            elif new.slope * (bracket[high].t - bracket[low].t) >= 0:
                bracket[high] = bracket[low]
            bracket[low] = new
        if done:
            break
    best = bracket[low]
    return best.loss, best.grad, best.t, evaluations
