"""Every differentiable op of the table: the gradients ``create_graph=True`` records equal the
plain backward's, in the same dtypes.

Many ops have two gradient formulas: a fast one on backend arrays (or a fused kernel) for a
plain backward, and one of differentiable ops for create_graph (double backward). genesis.compile
traces the backward with create_graph, so the second is what a compiled model trains with; when
the two disagree in a dtype, a compiled model breaks where eager trains (issue 30: rms_norm's
gave a bfloat16 input a float32 gradient). Half dtypes are checked too, though the table has no
half gradients against torch: there the two formulas must agree with each other.
"""

from __future__ import annotations

import numpy as np
import pytest
from op_table import Built, flatten_outputs, op_dtype_params, samples_for, seed_for

import genesis
from genesis.testing import assert_close


def _gradients(op, built, upstream_seed, create_graph):
    genesis.manual_seed(0)  # (the random ops draw the same numbers in both runs)
    outs = [o for o in flatten_outputs(op.op(*built.args, **built.kwargs))
            if isinstance(o, genesis.Tensor) and o.requires_grad]
    if not outs:
        return None
    rng = np.random.default_rng(upstream_seed)
    upstream = [genesis.tensor(rng.uniform(-1, 1, size=tuple(o.shape))).to(o.dtype)
                for o in outs]
    grads = genesis.autograd.grad(outs, built.leaves, upstream, allow_unused=True,
                                  create_graph=create_graph)
    return [None if g is None else g.detach() for g in grads]


# (not op_dtype_params' differentiable_only: it keeps the dtypes compared with torch's grads)
PARAMS = [p for p in op_dtype_params("create_graph", dtypes=("float32", "bfloat16"))
          if p.values[0].differentiable]


@pytest.mark.parametrize(("op", "dtype"), PARAMS)
def test_create_graph_gradients_match_the_plain_backward(op, dtype):
    checked = 0
    for k, (sample, realized) in enumerate(samples_for(op, dtype)):
        built = Built(realized, "genesis", "cpu", requires_grad=True)
        if not built.leaves:
            continue
        plain = _gradients(op, built, seed_for(op.name, k), False)
        if plain is None:
            continue
        recorded = _gradients(op, built, seed_for(op.name, k), True)
        for i, (p, r) in enumerate(zip(plain, recorded)):
            where = f"{op.name}[{sample.name}] {dtype} grad of input {i}"
            assert (p is None) == (r is None), where
            if p is not None:
                assert r.dtype is p.dtype, f"{where}: {r.dtype} under create_graph, {p.dtype}"
                assert_close(r, p, equal_nan=True, msg=lambda m, w=where: f"{w}: {m}")
        checked += 1
    assert checked, f"{op.name}: no sample produced a gradient to compare"
