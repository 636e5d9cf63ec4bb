"""Every differentiable op of the table, backward: genesis gradients against torch's for
random upstream gradients (float32 and float64), at torch's default tolerances."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from op_table import (
    Built,
    flatten_outputs,
    op_dtype_params,
    require_device,
    samples_for,
    seed_for,
    t_dtype,
    to_genesis,
    to_torch,
)

import genesis


def _grad_outputs(outs_t, dtype, seed):
    rng = np.random.default_rng(seed)
    return [torch.tensor(rng.uniform(-1, 1, size=tuple(o.shape))).to(o.dtype)
            for o in outs_t]


@pytest.mark.parametrize(("op", "dtype"), op_dtype_params("backward", differentiable_only=True))
def test_backward_matches_torch(op, dtype, device):
    require_device(op, device)
    checked = 0
    for k, (sample, realized) in enumerate(samples_for(op, dtype)):
        g = Built(realized, "genesis", device, requires_grad=True)
        t = Built(realized, "torch", device, requires_grad=True)
        if not t.leaves:
            continue
        out_t = flatten_outputs(op.ref(*t.args, **t.kwargs))
        out_g = flatten_outputs(op.op(*g.args, **g.kwargs))
        assert len(out_g) == len(out_t), (op.name, sample.name)
        pairs = [(og, ot) for og, ot in zip(out_g, out_t)
                 if isinstance(ot, torch.Tensor) and ot.requires_grad]
        for og, ot in zip(out_g, out_t):
            if isinstance(ot, torch.Tensor):
                assert og.requires_grad == ot.requires_grad, \
                    f"{op.name}[{sample.name}]: requires_grad {og.requires_grad}, torch " \
                    f"{ot.requires_grad}"
        if not pairs:
            continue
        upstream = _grad_outputs([ot for _, ot in pairs], dtype, seed_for(op.name, k))
        grads_t = torch.autograd.grad([ot for _, ot in pairs], t.leaves,
                                      [u.to(ot.device) for u, (_, ot) in zip(upstream, pairs)],
                                      allow_unused=True)
        grads_g = genesis.autograd.grad([og for og, _ in pairs], g.leaves,
                                        [to_genesis(u, device) for u in upstream],
                                        allow_unused=True)
        for i, (gg, gt, leaf) in enumerate(zip(grads_g, grads_t, g.leaves)):
            expected = torch.zeros(tuple(leaf.shape), dtype=t_dtype(dtype)) if gt is None \
                else gt.detach().cpu()
            if gg is None:
                actual = torch.zeros(tuple(leaf.shape), dtype=t_dtype(dtype))
            else:
                assert gg.device == leaf.device, (op.name, sample.name)
                actual = to_torch(gg)
            torch.testing.assert_close(
                actual, expected, equal_nan=True,
                msg=lambda m, i=i, s=sample: f"{op.name}[{s.name}] {dtype} grad of input {i}: {m}")
        checked += 1
    assert checked, f"{op.name}: no sample produced a gradient to compare"
