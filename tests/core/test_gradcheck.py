"""float64 gradcheck (central finite differences vs autograd) for every differentiable op
of the table, on every sample small enough to difference element by element."""

from __future__ import annotations

import pytest
from op_table import Built, op_dtype_params, samples_for

from genesis.testing import gradcheck, gradgradcheck


@pytest.mark.parametrize(("op", "dtype"),
                         op_dtype_params("gradcheck", differentiable_only=True,
                                         dtypes=("float64",)))
def test_gradcheck(op, dtype):
    checked = 0
    for sample, realized in samples_for(op, dtype):
        if sample.name.startswith("special"):
            continue
        built = Built(realized, "genesis", "cpu", requires_grad=True)
        if not built.leaves:
            continue
        if sum(leaf.numel() for leaf in built.leaves) > op.gradcheck_max_numel:
            continue

        def fn(*leaves, built=built):
            args, kwargs = built.assemble(leaves)
            return op.op(*args, **kwargs)

        try:
            gradcheck(fn, tuple(built.leaves))
        except Exception as exc:
            raise AssertionError(f"{op.name}[{sample.name}]: {exc}") from exc
        checked += 1
    if op.gradcheck_max_numel:
        assert checked, f"{op.name}: no sample was small enough to gradcheck"


@pytest.mark.parametrize(("op", "dtype"),
                         op_dtype_params("gradgradcheck", differentiable_only=True,
                                         dtypes=("float64",)))
def test_gradgradcheck(op, dtype):
    """Second derivatives (backward of backward, as create_graph=True records it)."""
    checked = 0
    for sample, realized in samples_for(op, dtype):
        if sample.name.startswith("special"):
            continue
        built = Built(realized, "genesis", "cpu", requires_grad=True)
        if not built.leaves or sum(leaf.numel() for leaf in built.leaves) > min(
                op.gradcheck_max_numel, 24):
            continue

        def fn(*leaves, built=built):
            args, kwargs = built.assemble(leaves)
            return op.op(*args, **kwargs)

        try:
            gradgradcheck(fn, tuple(built.leaves))
        except Exception as exc:
            raise AssertionError(f"{op.name}[{sample.name}]: {type(exc).__name__}: {exc}") \
                from exc
        checked += 1
