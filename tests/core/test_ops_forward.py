"""Every op of the table, forward: genesis against torch at torch's default tolerances,
for every dtype it supports, on every sample (function and method forms), plus its
error inputs."""

from __future__ import annotations

import re

import pytest
import torch
from op_table import (
    OPS,
    Built,
    flatten_outputs,
    op_dtype_params,
    require_device,
    samples_for,
    to_torch,
    tolerance,
)

import genesis


def _to_torch_tree(out):
    if isinstance(out, genesis.Tensor):
        return to_torch(out)
    if isinstance(out, (tuple, list)):
        return [_to_torch_tree(o) for o in out]
    return out


def _cpu_tree(out):
    if isinstance(out, torch.Tensor):
        return out.detach().cpu()
    if isinstance(out, (tuple, list)):
        return [_cpu_tree(o) for o in out]
    return out


def check_against_torch(op, dtype, sample, actual, expected):
    """Structure, dtype, shape and values of ``actual`` (genesis) vs ``expected`` (torch)."""
    if isinstance(expected, tuple) and hasattr(expected, "values") \
            and hasattr(expected, "indices"):
        assert hasattr(actual, "values") and hasattr(actual, "indices"), \
            f"{op.name}[{sample.name}]: torch returns (values, indices), genesis {type(actual)}"
    assert type(actual) is not genesis.Tensor or isinstance(expected, torch.Tensor), \
        f"{op.name}[{sample.name}]: genesis returned a tensor, torch a {type(expected)}"
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, genesis.Tensor), \
            f"{op.name}[{sample.name}]: expected a Tensor, got {type(actual).__name__}"
    torch.testing.assert_close(
        _to_torch_tree(actual), _cpu_tree(expected), equal_nan=True, **tolerance(op, dtype),
        msg=lambda m: f"{op.name}[{sample.name}] {dtype}: {m}")


@pytest.mark.parametrize(("op", "dtype"), op_dtype_params("forward"))
def test_forward_matches_torch(op, dtype, device):
    require_device(op, device)
    for sample, realized in samples_for(op, dtype):
        g = Built(realized, "genesis", device, requires_grad=False)
        t = Built(realized, "torch", device, requires_grad=False)
        expected = op.ref(*t.args, **t.kwargs)
        actual = op.op(*g.args, **g.kwargs)
        check_against_torch(op, dtype, sample, actual, expected)
        if op.method is not None and isinstance(g.args[0], genesis.Tensor):
            # the method form: args[0].<method>(*args[1:])
            actual_m = getattr(g.args[0], op.method)(*g.args[1:], **g.kwargs)
            check_against_torch(op, dtype, sample, actual_m, expected)
        # outputs live on the inputs' device
        inputs = [a for a in flatten_outputs(list(g.args) + list(g.kwargs.values()))
                  if isinstance(a, genesis.Tensor)]
        for o in flatten_outputs(actual):
            if isinstance(o, genesis.Tensor) and inputs:
                assert o.device == inputs[0].device, (op.name, sample.name, o.device)


@pytest.mark.parametrize(("op", "dtype"), op_dtype_params("forward"))
def test_forward_leaves_inputs_unchanged(op, dtype, device):
    """Out-of-place ops never write into their inputs (views included)."""
    require_device(op, device)
    for sample, realized in samples_for(op, dtype)[:3]:
        g = Built(realized, "genesis", device, requires_grad=False)
        tensors = [a for a in flatten_outputs(list(g.args) + list(g.kwargs.values()))
                   if isinstance(a, genesis.Tensor)]
        before = [(to_torch(a), a._version) for a in tensors]
        op.op(*g.args, **g.kwargs)
        for a, (values, version) in zip(tensors, before):
            torch.testing.assert_close(to_torch(a), values, rtol=0, atol=0, equal_nan=True)
            assert a._version == version, f"{op.name}[{sample.name}] bumped an input's version"


_ERROR_PARAMS = [pytest.param(op, id=op.name) for op in OPS if op.errors is not None]


@pytest.mark.parametrize("op", _ERROR_PARAMS)
def test_error_inputs(op, device, monkeypatch):
    """Bad input raises the stated exception with a message that says what was wrong."""
    import numpy as np
    from op_table import realize

    # value checks (index bounds) read the device only when asked for off the CPU
    monkeypatch.setattr(genesis.ops.common, "DEVICE_VALUE_CHECKS", True)

    rng = np.random.default_rng(0)
    dtype = "float32" if "float32" in op.dtypes else op.dtypes[0]
    for err in op.errors():
        realized = type(err.sample)(realize(err.sample.args, dtype, rng),
                                    realize(err.sample.kwargs, dtype, rng), err.sample.name)
        g = Built(realized, "genesis", device, requires_grad=False)
        with pytest.raises(err.exc) as info:
            op.op(*g.args, **g.kwargs)
        assert re.search(err.match, str(info.value)), \
            f"{op.name}: message {str(info.value)!r} does not match {err.match!r}"
