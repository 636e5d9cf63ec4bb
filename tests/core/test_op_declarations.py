"""The op declarations (``genesis.op_declarations``) agree with the op table, the Tensor
API, the backend contract and every kernel name the packages use."""

from __future__ import annotations

import ast
import inspect
import os

import op_table
import pytest

import genesis
from genesis import op_declarations as decl
from genesis.backends.base import Backend
from genesis.dispatch import REGISTRY
from genesis.ops import declared_reductions, elementwise

_PACKAGES = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                         "packages")
_DECLARED = decl.UNARY + decl.BINARY


def _declared_names() -> list[str]:
    """Every public name the declarations make: functions, aliases, in-place variants."""
    names = []
    for op in _DECLARED:
        for name in (op.name, *op.aliases):
            names.append(name)
            if op.inplace:
                names.append(name + "_")
    return names


def test_every_declared_op_is_in_the_op_table():
    tested = {info.name for info in op_table.OPS}
    # an alias is the very same function object as the op it names: one entry covers both
    aliases = {a for op in _DECLARED for a in op.aliases}
    missing = [n for n in _declared_names()
               if n not in tested and n not in aliases and n.rstrip("_") not in aliases]
    assert not missing, f"declared in genesis.op_declarations but not in the op table: {missing}"


def test_declared_ops_are_made_everywhere():
    for op in _DECLARED:
        for name in (op.name, *op.aliases):
            assert getattr(genesis, name) is elementwise.FUNCTIONS[op.name], name
            if op.method:
                assert getattr(genesis.Tensor, name) is elementwise.FUNCTIONS[op.name], name
            assert hasattr(genesis.Tensor, name + "_") == op.inplace, name
        fn = elementwise.DECLARED[op.name].function  # every declared op is a Function
        assert fn.__name__ == op.name.capitalize() and fn.autocast == op.autocast
        assert fn.differentiable == op.differentiable and fn.op is REGISTRY[op.name]


def test_contract_lists_are_the_declarations():
    assert Backend.UNARY_OPS == tuple(op.name for op in decl.UNARY)
    assert Backend.BINARY_OPS == tuple(op.name for op in decl.BINARY)
    assert len(set(Backend.UNARY_OPS + Backend.BINARY_OPS)) == len(_DECLARED)


def test_every_declared_reduction_is_in_the_op_table():
    tested = {info.name for info in op_table.OPS}
    missing = [op.name for op in decl.REDUCTIONS if op.name not in tested]
    assert not missing, f"declared reductions not in the op table: {missing}"


def test_declared_reductions_are_made_everywhere():
    for op in decl.REDUCTIONS:
        fn = declared_reductions.FUNCTIONS[op.name]
        assert getattr(genesis, op.name) is fn, op.name
        assert getattr(declared_reductions, op.name) is fn, op.name
        assert (getattr(genesis.Tensor, op.name, None) is fn) == op.method, op.name
        assert fn.function.__name__ == op.name.capitalize()  # every reduction is a Function
        assert fn.function.autocast == op.autocast
        assert fn.function.differentiable == op.differentiable
        assert fn.function.op is REGISTRY[op.name]


def test_reduction_kernels_are_contract_methods_with_the_declared_parameters():
    assert Backend.REDUCTION_OPS == tuple(op.name for op in decl.REDUCTIONS)
    for op in decl.REDUCTIONS:
        params = tuple(inspect.signature(getattr(Backend, op.name)).parameters)[1:]
        assert params == op.kernel_params, (op.name, params)


def test_reductions_save_what_the_gradient_reads():
    x = genesis.tensor([[0.5, 2.0], [3.0, 1.0]], requires_grad=True)
    assert x.sum(0).grad_fn.saved_values() == (None, None)  # d sum / dx reads nothing
    y = x.amax(1)
    assert y.grad_fn.saved_values()[0] is x and y.grad_fn.saved_values()[1] is y
    p = x.prod(1)
    assert p.grad_fn.saved_values()[0] is x and p.grad_fn.saved_values()[1] is None


def test_saved_tensors_are_what_the_gradient_reads():
    x = genesis.tensor([0.5, 1.0], requires_grad=True)
    y = x.exp()  # d/dx exp reads only the output
    assert y.grad_fn.saved_values()[0] is None and y.grad_fn.saved_values()[1] is y
    b = genesis.tensor([2.0, 3.0])
    z = x * b  # only x wants a gradient: d/dx reads b, so x itself is not saved
    assert z.grad_fn.saved_values()[0] is None and z.grad_fn.saved_values()[1] is b


# ------------------------------------------------------------------ kernel names
# Calls that name an elementwise kernel with a string literal: (function or method name,
# position of the kernel-name argument, which list it must be in).
_KERNEL_CALLS = {"unary": (0, "unary"), "unary_kernel": (0, "unary"),
                 "binary": (0, "binary"), "binary_kernel": (0, "binary"),
                 "inplace_kernel": (0, "binary")}


def _kernel_names_used() -> list[tuple[str, str, str]]:
    """(kind, name, file:line) for every literal kernel name passed to a kernel lookup."""
    found = []
    for folder, _, files in os.walk(_PACKAGES):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(folder, f)
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read(), path)
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else \
                    func.id if isinstance(func, ast.Name) else None
                if called == "kernel" and len(node.args) == 3 \
                        and isinstance(node.args[1], ast.Constant):
                    kind, arg = ("unary" if node.args[1].value == 1 else "binary"), node.args[2]
                elif called in _KERNEL_CALLS and node.args:
                    pos, kind = _KERNEL_CALLS[called]
                    arg = node.args[pos]
                else:
                    continue
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    where = f"{os.path.relpath(path, _PACKAGES)}:{node.lineno}"
                    found.append((kind, arg.value, where))
    return found


def test_every_kernel_name_used_is_declared():
    used = _kernel_names_used()
    assert len(used) > 10  # the scan finds the composite kernels in backends/base.py
    lists = {"unary": set(Backend.UNARY_OPS), "binary": set(Backend.BINARY_OPS)}
    undeclared = [u for u in used if u[1] not in lists[u[0]]]
    assert not undeclared, f"kernel names used but not declared: {undeclared}"


def test_cpu_backend_has_every_declared_kernel():
    cpu = genesis.device("cpu").backend
    x = cpu.full((2,), 1, genesis.int64, None)
    for name in Backend.UNARY_OPS:
        assert callable(cpu.unary_kernel(name))
    for name in Backend.BINARY_OPS:
        assert cpu.binary_kernel(name)(x, x).shape == (2,)


def test_undeclared_kernel_is_refused():
    cpu = genesis.device("cpu").backend
    with pytest.raises(KeyError):
        cpu.unary_kernel("not_an_op")
