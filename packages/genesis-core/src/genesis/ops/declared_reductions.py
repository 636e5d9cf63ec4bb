"""The declared reductions (sum, prod, amax/amin, all/any, argmax/argmin: a row each in
``genesis.op_declarations``) made into autograd Functions and public functions.

Every declared reduction is a ``Function`` (``genesis.sum.function`` is ``Sum``), so every
call goes through the dispatcher; the composites built on them are in ``reduction``.
"""

from __future__ import annotations

from collections import namedtuple

from genesis import creation
from genesis import dtypes as D
from genesis import op_declarations as decl
from genesis.autograd.entries import constants_entry
from genesis.autograd.function import _NO_GRAD_CTX, Function
from genesis.ops.common import KernelTable, formula_caller, normalize_dim, normalize_dims, wrap
from genesis.ops.views import expand_to
from genesis.tensor import Tensor, interned_size, new_tensor

values_indices = namedtuple("values_indices", ["values", "indices"])


def _unreduce(g: Tensor, in_shape: tuple, dims: tuple, keepdim: bool) -> Tensor:
    """Broadcast a reduced gradient back to the input's shape."""
    if not keepdim and len(dims) == len(in_shape):  # a full reduction: g is 0-d
        if not in_shape:
            return g
        return expand_to(g, in_shape)  # (expand(), its checks known)
    if not keepdim:
        shape = list(g.shape)
        for d in dims:
            shape.insert(d, 1)
        g = g.reshape(shape)
    return g.expand(in_shape)


_SCALAR = interned_size(())
_ALL_DIMS = tuple(tuple(range(n)) for n in range(17))  # ndim -> (0, 1, ..., ndim - 1)
# the dtype a sum computes in when none is given: int64 for integers and bool (as torch)
SUM_DTYPE = {d: D.int64 if d.category < 2 else d for d in D.ALL_DTYPES}


# ------------------------------------------------------ the declared reductions
def reduce_forward(op: decl.Reduction, kernels: KernelTable, save_x: bool, save_y: bool):
    """``forward(ctx, x, dims, keepdim, dtype)`` of the declared reduction ``op`` (sum, prod,
    amax, amin): one kernel call, saving x and y where the gradient formula reads them.

    Made per op as the elementwise ops' forwards are (``declared_elementwise.unary_forward``:
    the row's fields are closure cells, cheaper to read than class attributes).

    Args:
        op: the reduction's row.
        kernels: its kernel per backend.
        save_x: whether a recorded call saves ``x``; save_y: ``y``.

    Returns:
        The forward (the reduction's Function has it as a staticmethod).

    Example:
        >>> forward = reduce_forward(decl_sum, kernels, save_x=False, save_y=False)
        >>> y = forward(ctx, x, (0,), False, None)
    """
    name, refuse_empty, sums, table = op.name, op.refuse_empty, op.result == "sum", kernels.table

    def forward(ctx, x, dims, keepdim, dtype):
        if refuse_empty and x.numel() == 0 and (not dims or 0 in [x.shape[d] for d in dims]):
            raise RuntimeError(
                f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                "Specify the reduction dim with the 'dim' argument.")
        backend = x._backend
        try:
            kernel = table[backend]
        except KeyError:  # (this backend's first call of the reduction)
            kernel = kernels.fill(backend)
        if sums:  # dtype None: decided here, after autocast may have cast x
            dtype = dtype or SUM_DTYPE[x.dtype]
            data = kernel(x._data, dims, keepdim, dtype)
        else:
            dtype = x.dtype
            data = kernel(x._data, dims, keepdim)
        if keepdim or len(dims) != len(x.shape):
            y = wrap(data, x.device)
        else:  # every dim: a 0-d result, nothing to read back
            y = new_tensor(data, x.device, backend, _SCALAR, dtype)
        if ctx is not _NO_GRAD_CTX:  # (recording: keep what backward reads)
            ctx.save_for_backward(x if save_x else None, y if save_y else None)
            ctx.in_shape, ctx.in_dtype, ctx.dims, ctx.keepdim = x.shape, x.dtype, dims, keepdim
        return y

    return forward


class _Reduce(Function):
    """``y = name(x, dims, keepdim)`` for one declared reduction (``decl``); made by
    ``_reduction_class``, with ``reduce_forward``'s forward."""

    op_name = None  # (the base of the declared reductions, not an op itself)
    kernel_forward = True
    decl: decl.Reduction
    grad: object  # its gradient formula, called on (g, x, y, dims): see formula_caller
    kernels: KernelTable  # backend -> its kernel of this reduction

    @classmethod
    def backward(cls, ctx, g):
        x, y = ctx.saved_tensors
        shape, dims, keepdim = ctx.in_shape, ctx.dims, ctx.keepdim
        g = _unreduce(g, shape, dims, keepdim)
        if y is not None:
            y = _unreduce(y, shape, dims, keepdim)
        gx = cls.grad((g, x, y, dims))
        return (gx if gx.dtype is ctx.in_dtype else gx.to(ctx.in_dtype)), None, None, None


class _LogicalReduce(Function):
    """all/any along ``dims`` (not differentiable); made by ``_reduction_function``."""

    op_name = None  # (the base of all/any, not an op itself)
    differentiable = False
    kernels: KernelTable

    @classmethod
    def forward(cls, ctx, x, dims, keepdim):
        kernel = cls.kernels[x._backend]
        out = wrap(kernel(x._data, dims, keepdim), x.device)
        # torch keeps uint8 for uint8 inputs (a legacy rule); every other dtype gives bool
        return out.to(D.uint8) if x.dtype is D.uint8 and out.dtype is not D.uint8 else out


class _IndexReduce(Function):
    """argmax/argmin along ``dim``, or over the flattened input when ``dim`` is None (not
    differentiable); made by ``_reduction_function``."""

    op_name = None  # (the base of argmax/argmin, not an op itself)
    differentiable = False
    kernels: KernelTable

    @classmethod
    def forward(cls, ctx, x, dim, keepdim):
        if x.numel() == 0:
            raise RuntimeError(f"{cls.op_name}(): Expected reduction dim to be specified for "
                               "input.numel() == 0.")
        if x.ndim == 0:  # backends get no dim for 0-d arrays: the answer is index 0
            normalize_dim(0 if dim is None else dim, 0)
            return creation.zeros((), dtype=D.int64, device=x.device)
        kernel = cls.kernels[x._backend]
        if dim is None:
            flat = x.reshape(-1)
            out = wrap(kernel(flat._data, 0, False), x.device)
            return out.reshape((1,) * x.ndim) if keepdim else out
        return wrap(kernel(x._data, normalize_dim(dim, x.ndim), keepdim), x.device)


_RESULT = {  # by ``Reduction.result``: what the docstrings say of the result
    "sum": "the input's dtype (int64 for integer and bool inputs), or ``dtype``",
    "keep": "the input's dtype",
    "logical": "bool (uint8 for a uint8 input, as torch)",
    "index": "int64: positions along ``dim`` (in the flattened tensor when ``dim`` is None)",
}
_ARGS = {
    "sum": "input: the input tensor.\ndim: an int or a tuple of ints to reduce; all dims "
           "when None.\nkeepdim: whether the reduced dims stay, with size 1.\n"
           "dtype: the dtype to compute and return in.",
    "keep": "input: the input tensor.\ndim: an int or a tuple of ints to reduce; all dims "
            "when empty.\nkeepdim: whether the reduced dims stay, with size 1.",
    "logical": "input: the input tensor.\ndim: an int or a tuple of ints to reduce; all dims "
               "when None.\nkeepdim: whether the reduced dims stay, with size 1.",
    "index": "input: the input tensor.\ndim: the dim to search; the flattened tensor when "
             "None.\nkeepdim: whether the reduced dim stays, with size 1.",
}


def _reduction_doc(op: decl.Reduction) -> str:
    """The docstring of a declared reduction's public function, from its row."""
    grad = "differentiable" if op.differentiable else "not differentiable"
    autocast = " Under ``genesis.autocast`` it computes in float32." if op.autocast else ""
    args = "\n".join(f"    {line}" for line in _ARGS[op.result].splitlines())
    return (f"The ``{op.name}`` reduction of ``input`` (as ``torch.{op.name}``).\n\n"
            f"The op is {grad}.{autocast}\n\nArgs:\n{args}\n\nReturns:\n"
            f"    A new tensor with ``dim`` reduced; its dtype is {_RESULT[op.result]}.\n")


def _reduction_class(op: decl.Reduction) -> type:
    """The Function of one declared reduction, filled from its row (``Sum``, ``Argmax`` ...;
    the registry knows it as ``op.name``)."""
    fields = {"op_name": op.name, "decl": op, "autocast": op.autocast, "__module__": __name__,
              "kernels": KernelTable(lambda backend: getattr(backend, op.name)),
              "__doc__": f"Autograd Function of ``{op.name}`` (declared in op_declarations)."}
    if op.result == "logical":
        return type(op.name.capitalize(), (_LogicalReduce,), fields)
    if op.result == "index":
        return type(op.name.capitalize(), (_IndexReduce,), fields)
    code = op.grad.__code__
    reads = op.reads()
    forward = reduce_forward(op, fields["kernels"], "x" in reads, "y" in reads)
    return type(op.name.capitalize(), (_Reduce,), {
        **fields, "forward": staticmethod(forward), "saves_output": "y" in reads,
        "grad": formula_caller(op.grad, ("g", "x", "y", "dims"),
                               code.co_varnames[:code.co_argcount])})


def _reduction_function(op: decl.Reduction):
    """The public function of a declared reduction: its Function's dispatcher entry, named."""
    cls = _reduction_class(op)
    apply = constants_entry(cls, 2 if op.result in ("logical", "index") else 3)
    if op.result == "sum":
        def fn(input: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
            if dim is None:
                try:
                    dims = _ALL_DIMS[len(input.shape)]
                except IndexError:  # (over 16 dims)
                    dims = tuple(range(len(input.shape)))
            else:
                dims = normalize_dims(dim, input.ndim)
            return apply(input, dims, keepdim, dtype)
    elif op.result == "keep":
        def fn(input: Tensor, dim=(), keepdim: bool = False) -> Tensor:
            return apply(input, normalize_dims(dim, input.ndim), keepdim, None)
    elif op.result == "logical":
        def fn(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
            return apply(input, normalize_dims(dim, input.ndim), keepdim)
    else:
        def fn(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:
            return apply(input, dim, keepdim)

    fn.__name__ = fn.__qualname__ = op.name
    fn.__doc__ = _reduction_doc(op)
    fn.function = cls
    return fn


# name -> public function, for every declared reduction
FUNCTIONS = {op.name: _reduction_function(op) for op in decl.REDUCTIONS}
sum, prod = FUNCTIONS["sum"], FUNCTIONS["prod"]  # noqa: A001 - torch's names
amax, amin = FUNCTIONS["amax"], FUNCTIONS["amin"]
all, any = FUNCTIONS["all"], FUNCTIONS["any"]  # noqa: A001
argmax, argmin = FUNCTIONS["argmax"], FUNCTIONS["argmin"]
