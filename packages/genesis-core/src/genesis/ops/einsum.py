"""``einsum``: Einstein summation, as a composition of views, sums and batched matmuls.

The equation is parsed into one list of labels per operand (letters, plus one label per
dimension an ellipsis covers, counted from the right so ellipses broadcast as shapes do).
Then, in order: a label repeated within an operand takes that operand's diagonal (an
``as_strided`` view); a label no other operand and not the output uses is summed away; the
operands are contracted left to right, two at a time, each pair as one ``bmm`` of
``(batch, kept-left, summed)`` by ``(batch, summed, kept-right)``; the result is permuted to
the output's order. Every step is a differentiable genesis op, so autograd (and every
backend) comes for free. No contraction order is searched: operands meet left to right.
"""

from __future__ import annotations

import math

from genesis.tensor import Tensor

_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def einsum(equation: str, *operands) -> Tensor:
    """Sum products of ``operands``' elements over the indices the equation names.

    ``"ij,jk->ik"`` is a matrix product, ``"ii->i"`` a diagonal, ``"ii"`` a trace,
    ``"bhqd,bhkd->bhqk"`` attention scores, ``"...ij->...ji"`` a batched transpose. Without
    ``->`` the output holds the ellipsis dims, then the labels used once, in alphabetical
    order (upper case first), as torch's. Sizes of 1 broadcast.

    Args:
        equation: subscripts of each operand (letters ``a-zA-Z`` and at most one ``...``
            each), comma-separated, optionally ``->`` and the output's subscripts.
        *operands: the tensors (all of one dtype and device), or one list of them.

    Returns:
        A tensor with one dim per output subscript.

    Example:
        >>> a, b = genesis.randn(2, 3), genesis.randn(3, 4)
        >>> genesis.einsum("ij,jk->ik", a, b).shape
        (2, 4)
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise RuntimeError("einsum(): must provide at least one operand")
    for i, op in enumerate(operands):
        if not isinstance(op, Tensor):
            raise TypeError(f"einsum(): operand {i} must be a Tensor, got {type(op).__name__}")
        if op.dtype is not operands[0].dtype or op.device != operands[0].device:
            raise RuntimeError(
                f"einsum(): operands must share one dtype and device, but operand 0 is "
                f"{operands[0].dtype} on {operands[0].device} and operand {i} is {op.dtype} "
                f"on {op.device}")
    inputs, output = _parse(equation.replace(" ", ""), operands)
    sizes = _label_sizes(inputs, operands)
    terms = [_take_diagonals(op, labels) for op, labels in zip(operands, inputs)]
    result, labels = terms[0]
    for k in range(1, len(terms) + 1):
        # labels still needed once operand k is in: the output's and the later operands'
        needed = {lab for _, lbs in terms[k + 1:] for lab in lbs} | set(output)
        result, labels = _sum_unused(result, labels, needed | set(terms[k][1] if k < len(terms)
                                                                 else ()))
        if k == len(terms):
            break
        other, other_labels = _sum_unused(*terms[k], needed | set(labels))
        result, labels = _contract(result, labels, other, other_labels, needed, sizes)
    result = _broadcast_to_labels(result, labels, sizes)
    return result.permute(tuple(labels.index(lab) for lab in output))


def _parse(equation: str, operands) -> tuple[list[list], list]:
    """Labels per operand and of the output. A letter is its own label; the dims an
    ellipsis covers are labelled ``0, 1, ...`` counted from the right."""
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) > len(operands):
        raise RuntimeError("einsum(): fewer operands were provided than specified in the "
                           f"equation ({len(terms)} subscript groups, {len(operands)} operands)")
    if len(terms) < len(operands):
        raise RuntimeError("einsum(): more operands were provided than specified in the "
                           f"equation ({len(terms)} subscript groups, {len(operands)} operands)")
    inputs, offset, widest = [], 0, 0
    for i, (term, op) in enumerate(zip(terms, operands)):
        letters, has_ellipsis = _split_term(term, offset, f"operand {i}")
        offset += len(term) + 1
        if len(letters) > op.ndim or (not has_ellipsis and len(letters) != op.ndim):
            raise RuntimeError(
                f"einsum(): the number of subscripts in the equation ({len(letters)}) does not "
                f"match the number of dimensions ({op.ndim}) for operand {i}"
                + ("" if has_ellipsis else " and no ellipsis was given"))
        covered = op.ndim - len(letters)
        widest = max(widest, covered)
        pos = term.find("...")
        before = len(term[:pos]) if has_ellipsis else len(letters)
        inputs.append(letters[:before] + list(range(covered - 1, -1, -1)) + letters[before:])
    ellipsis_labels = list(range(widest - 1, -1, -1))
    if not arrow:
        counts: dict = {}
        for labels in inputs:
            for lab in labels:
                counts[lab] = counts.get(lab, 0) + 1
        once = sorted(lab for lab, n in counts.items() if isinstance(lab, str) and n == 1)
        return inputs, ellipsis_labels + once
    letters, has_ellipsis = _split_term(rhs, len(lhs) + 2, "the output")
    seen = {lab for labels in inputs for lab in labels}
    for lab in letters:
        if letters.count(lab) > 1:
            raise RuntimeError(f"einsum(): output subscript {lab} appears more than once in "
                               "the output")
        if lab not in seen:
            raise RuntimeError(f"einsum(): output subscript {lab} does not appear in the "
                               "equation for any input operand")
    if not has_ellipsis:
        return inputs, letters
    pos = rhs.find("...")
    return inputs, letters[:pos] + ellipsis_labels + letters[pos:]


def _split_term(term: str, offset: int, what: str) -> tuple[list, bool]:
    """The letters of one subscript group, and whether it has an ellipsis."""
    has_ellipsis = False
    letters = []
    i = 0
    while i < len(term):
        if term[i] == ".":
            if term[i:i + 3] != "...":
                raise RuntimeError(f"einsum(): found '.' for {what} that is not part of any "
                                   "ellipsis")
            if has_ellipsis:
                raise RuntimeError(f"einsum(): found '.' for {what} for which an ellipsis was "
                                   "already found")
            has_ellipsis = True
            i += 3
            continue
        if term[i] not in _LETTERS:
            raise RuntimeError(f"einsum(): invalid subscript given at index {offset + i} in the "
                               "equation string, subscripts must be in [a-zA-Z]")
        letters.append(term[i])
        i += 1
    return letters, has_ellipsis


def _label_sizes(inputs: list, operands) -> dict:
    """Each label's size across the operands: equal, or 1 (which broadcasts)."""
    sizes: dict = {}
    for i, (labels, op) in enumerate(zip(inputs, operands)):
        own: dict = {}
        for lab, n in zip(labels, op.shape):
            if own.setdefault(lab, n) != n:
                raise RuntimeError(f"einsum(): subscript {lab} is repeated for operand {i} but "
                                   f"the sizes don't match, {n} != {own[lab]}")
        for lab, n in own.items():
            seen = sizes.get(lab, 1)
            if n != 1 and seen != 1 and n != seen:
                name = f"subscript {lab}" if isinstance(lab, str) else "an ellipsis dim"
                raise RuntimeError(
                    f"einsum(): {name} has size {n} for operand {i} which does not broadcast "
                    f"with previously seen size {seen} (operand {i} has shape "
                    f"{tuple(op.shape)})")
            sizes[lab] = seen if n == 1 and lab in sizes else n
    return sizes


def _take_diagonals(x: Tensor, labels: list) -> tuple[Tensor, list]:
    """``x`` with each repeated label's dims merged into their diagonal (a view)."""
    unique = list(dict.fromkeys(labels))
    if len(unique) == len(labels):
        return x, labels
    strides = x.stride()
    shape = tuple(x.shape[labels.index(lab)] for lab in unique)
    new_strides = tuple(sum(s for lab2, s in zip(labels, strides) if lab2 == lab)
                        for lab in unique)
    return x.as_strided(shape, new_strides, x.storage_offset()), unique


def _sum_unused(x: Tensor, labels: list, keep: set) -> tuple[Tensor, list]:
    """``x`` summed over the dims whose labels nothing later needs."""
    gone = tuple(d for d, lab in enumerate(labels) if lab not in keep)
    if not gone:
        return x, labels
    return x.sum(dim=gone), [lab for lab in labels if lab in keep]


def _broadcast_to_labels(x: Tensor, labels: list, sizes: dict) -> Tensor:
    """``x`` expanded (a view) so each labelled dim has the label's broadcast size."""
    target = tuple(sizes[lab] for lab in labels)
    return x if tuple(x.shape) == target else x.expand(target)


def _contract(a: Tensor, la: list, b: Tensor, lb: list, keep: set,
              sizes: dict) -> tuple[Tensor, list]:
    """``a`` and ``b`` multiplied, summing the labels they share that ``keep`` lacks."""
    batch = [lab for lab in la if lab in lb and lab in keep]
    summed = [lab for lab in la if lab in lb and lab not in keep]
    left = [lab for lab in la if lab not in lb]
    right = [lab for lab in lb if lab not in la]
    a = _broadcast_to_labels(a, la, sizes).permute(tuple(la.index(x) for x in batch + left
                                                         + summed))
    b = _broadcast_to_labels(b, lb, sizes).permute(tuple(lb.index(x) for x in batch + summed
                                                         + right))

    def size(labels):
        return math.prod(sizes[lab] for lab in labels)

    out = a.reshape(size(batch), size(left), size(summed)).bmm(
        b.reshape(size(batch), size(summed), size(right)))  # (batch, left, right)
    labels = batch + left + right
    return out.reshape(tuple(sizes[lab] for lab in labels)), labels
