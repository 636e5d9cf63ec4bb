"""The declared elementwise ops (``genesis.op_declarations``) made into autograd Functions
and public functions, with the shape rules they share: broadcasting, type promotion and
device checks, stated once here for every elementwise op.

Every declared op is a ``Function`` (``Exp``, ``Mul``, ``Eq`` ...: ``genesis.exp.function``),
so every call goes through the dispatcher, ``Function.apply``. Its ``forward`` meets the
plainest operands first — tensors of one dtype, shape and device, or a tensor and a Python
float — with one kernel call; anything else is promoted and broadcast by ``_operands``.
"""

from __future__ import annotations

from genesis import dtypes as D
from genesis import op_declarations as decl
from genesis.autograd.entries import binary_entry, unary_entry
from genesis.autograd.function import _NO_GRAD_CTX, _TENSOR_TYPES, Function, Node
from genesis.device import CPU
from genesis.ops.common import (
    KernelTable,
    broadcast_size,
    check_same_device,
    expand_array,
    float_dtype_for,
    formula_caller,
    sum_to_shape,
    wrap,
)
from genesis.tensor import Tensor, new_tensor


def scalar_for(value, dtype: D.DType):
    """A Python scalar converted to the kind of ``dtype`` (kernels get matching scalars)."""
    if dtype.is_floating_point:
        return float(value)
    if dtype is D.bool_:
        return bool(value)
    return int(value)


def operands(op: str, a, b, dtype: D.DType | None = None):
    """Promote and broadcast ``a``, ``b``: returns ``(backend, device, x, y, dtype, shape)``.

    ``x`` is always an array; ``y`` is an array or a Python scalar; ``shape`` is the
    result's ``Size``.
    """
    a_t = type(a) is Tensor or isinstance(a, Tensor)
    b_t = type(b) is Tensor or isinstance(b, Tensor)
    if a_t and b_t:
        if a.device is not b.device:
            if dtype is None:
                dtype = D.result_type(a, b)  # before a 0-d tensor becomes a scalar
            return operands(op, *_move_cpu_scalar(op, a, b), dtype)
        if dtype is None:
            dtype = a.dtype if a.dtype is b.dtype else D.result_type(a, b)
        backend = a._backend
        x = a._data if a.dtype is dtype else backend.cast(a._data, dtype)
        y = b._data if b.dtype is dtype else backend.cast(b._data, dtype)
        shape = a.shape
        if shape != b.shape:
            shape = broadcast_size(a.shape, b.shape)
            if a.shape != shape:
                x = expand_array(wrap(x, a.device), shape)
            if b.shape != shape:
                y = expand_array(wrap(y, b.device), shape)
        return backend, a.device, x, y, dtype, shape
    if a_t:
        if not isinstance(b, (int, float, bool)):
            raise TypeError(f"{op}(): unsupported operand type {type(b).__name__}")
        if dtype is None:  # a Python number never raises a floating tensor's dtype
            dtype = a.dtype if a.dtype.is_floating_point else D.result_type(a, b)
        backend = a._backend
        x = a._data if a.dtype is dtype else backend.cast(a._data, dtype)
        return backend, a.device, x, scalar_for(b, dtype), dtype, a.shape
    if not isinstance(a, (int, float, bool)):
        raise TypeError(f"{op}(): unsupported operand type {type(a).__name__}")
    # scalar on the left: make it a 0-d array and broadcast it
    if dtype is None:
        dtype = D.result_type(a, b)
    backend = b._backend
    x0 = wrap(backend.full((), scalar_for(a, dtype), dtype, b.device.index), b.device)
    y = b._data if b.dtype is dtype else backend.cast(b._data, dtype)
    return backend, b.device, expand_array(x0, b.shape), y, dtype, b.shape


def _move_cpu_scalar(op: str, a: Tensor, b: Tensor):
    """torch lets a 0-d CPU tensor meet a tensor on another device; so do we."""
    if a.device is CPU and a.ndim == 0:
        return a.item(), b
    if b.device is CPU and b.ndim == 0:
        return a, b.item()
    check_same_device(op, a, b)
    return a, b


def result_dtype(op: decl.Op, a, b) -> D.DType | None:
    """The dtype a binary op computes in (None: plain promotion, left to ``operands``)."""
    if op.ints != "float":
        return None
    dtype = D.result_type(a, b)
    return dtype if dtype.is_floating_point else D.get_default_dtype()


def _formula(op: decl.Op, i: int, names: tuple):
    """``call(values)``: input ``i``'s gradient formula of ``op`` on its arguments (``g``
    first, then what it reads) picked from ``values``, laid out as ``names``
    (``formula_caller``); None when that input has no gradient."""
    f = op.grads[i] if i < len(op.grads) else None
    if f is None:
        return None
    return formula_caller(f, names, ("g",) + op.reads(i))


# --------------------------------------------------------------------- unary
# Each declared op's forward is made for its row (``unary_forward``, ``binary_forward``):
# the row's fields and the op's kernel table are closure cells there. A forward reading them
# off its class instead (``cls.decl``) pays CPython 3.11 an unspecialised lookup per read,
# about 1 % of a tiny op each.
def unary_forward(op: decl.Op, kernels: KernelTable, save_x: bool, save_y: bool):
    """``forward(ctx, x)`` of the declared unary op ``op``: ``y = op(x)``, one kernel call.

    Args:
        op: the op's row.
        kernels: the op's kernel per backend.
        save_x: whether a recorded call saves ``x`` (its gradient reads it); save_y: ``y``.

    Returns:
        The forward (the op's Function has it as a staticmethod).

    Example:
        >>> forward = unary_forward(decl_exp, kernels, save_x=False, save_y=True)
        >>> y = forward(ctx, x)
    """
    check, floats, to_bool, table = op.check, op.ints == "float", op.ints == "bool", kernels.table

    def forward(ctx, x):
        if check is not None:
            check(x)
        dtype, data, backend = x.dtype, x._data, x._backend
        if floats and not dtype.is_floating_point:
            dtype = float_dtype_for(dtype)
            data = backend.cast(data, dtype)
        try:
            kernel = table[backend]
        except KeyError:  # (this backend's first call of the op)
            kernel = kernels.fill(backend)
        y = new_tensor(kernel(data), x.device, backend, x.shape, D.bool_ if to_bool else dtype)
        if ctx is not _NO_GRAD_CTX:  # (recording)
            ctx.save_for_backward(x if save_x else None, y if save_y else None)
        return y

    return forward


class _Unary(Function):
    """``y = f(x)`` for one declared unary op (``decl``); made by ``_unary_function``, with
    ``unary_forward``'s forward."""

    op_name = None  # (the base of the declared ops, not an op itself)
    kernel_forward = True
    decl: decl.Op
    kernels: KernelTable  # backend -> its kernel of this op
    grad = None  # its gradient formula, called on (g, x, y): see _formula

    @classmethod
    def backward(cls, ctx, g):
        x, y = ctx.saved_tensors
        return cls.grad((g, x, y))


# -------------------------------------------------------------------- binary
def binary_forward(op: decl.Op, kernels: KernelTable, saves: tuple):
    """``forward(ctx, a, b)`` of the declared binary op ``op``: ``z = op(a, b)``.

    It meets the plainest operands first (tensors of one dtype, shape and device, or a
    tensor and a Python float: one kernel call); anything else is promoted and broadcast by
    ``operands``.

    Args:
        op: the op's row.
        kernels: the op's kernel per backend.
        saves: what a recorded call saves, per the inputs that want a gradient (``_saves``).

    Returns:
        The forward (the op's Function has it as a staticmethod).

    Example:
        >>> forward = binary_forward(decl_add, kernels, _saves(decl_add))
        >>> z = forward(ctx, a, b)
    """
    check, floats, table = op.check, op.ints == "float", kernels.table
    to_bool = op.ints == "bool"

    def forward(ctx, a, b):
        if check is not None:
            check(a, b)
        if type(a) in _TENSOR_TYPES:  # the plainest operands first: one kernel call
            dtype = a.dtype
            if type(b) in _TENSOR_TYPES:
                plain = (b.dtype is dtype and b.device is a.device
                         and (b.shape is a.shape or b.shape == a.shape))
                y = b._data
            else:
                plain, y = type(b) is float and dtype.is_floating_point, b
        else:
            plain = False
        if plain and (not floats or dtype.is_floating_point):
            backend, device, shape = a._backend, a.device, a.shape  # (three: no tuple made)
            x = a._data
        else:  # promoted and broadcast
            backend, device, x, y, dtype, shape = operands(op.name, a, b,
                                                           result_dtype(op, a, b))
        try:
            kernel = table[backend]
        except KeyError:  # (this backend's first call of the op)
            kernel = kernels.fill(backend)
        z = new_tensor(kernel(x, y), device, backend, shape, D.bool_ if to_bool else dtype)
        if ctx is not _NO_GRAD_CTX:  # (recording)
            save_binary(saves, ctx, a, b, z)
        return z

    return forward


class _Binary(Function):
    """``z = f(a, b)`` with broadcasting and promotion for one declared binary op; made by
    ``_binary_function``, with ``binary_forward``'s forward."""

    op_name = None  # (the base of the declared ops, not an op itself)
    kernel_forward = True
    decl: decl.Op
    kernels: KernelTable  # backend -> its kernel of this op
    grads: tuple = (None, None)  # per input: its formula called on (g, a, b, z) or None

    @classmethod
    def backward(cls, ctx, g):
        a, b, z = ctx.saved_tensors
        vals = (g, a if a is not None else ctx.a_scalar, b if b is not None else ctx.b_scalar,
                z)
        needs, metas = ctx.needs_input_grad, ctx.metas
        ga = gb = None
        grad_a, grad_b = cls.grads
        if grad_a is not None and needs[0] and metas[0] is not None:
            ga = _fit(grad_a(vals), metas[0])
        if grad_b is not None and needs[1] and metas[1] is not None:
            gb = _fit(grad_b(vals), metas[1])
        return ga, gb


_SAVES_NOTHING = (None, None, None)


def save_binary(saves: tuple, ctx: Node, a, b, z) -> None:
    """Save what the wanted gradients read (as torch; ``saves``: see ``_saves``): editing
    anything else in place later does not break backward."""
    a_t, b_t = type(a) in _TENSOR_TYPES, type(b) in _TENSOR_TYPES
    save_a, save_b, save_z = saves[(a_t and a.requires_grad) * 2
                                       + (b_t and b.requires_grad)]
    if save_a or save_b or save_z:
        ctx.save_for_backward(a if save_a and a_t else None, b if save_b and b_t else None,
                              z if save_z else None)
    else:  # (add, sub: what save_for_backward of three Nones records, without the call)
        ctx._saved = _SAVES_NOTHING
    ctx.a_scalar = None if a_t else a
    ctx.b_scalar = None if b_t else b
    ctx.metas = ((a.shape, a.dtype) if a_t else None, (b.shape, b.dtype) if b_t else None)


def _saves(op: decl.Op) -> tuple:
    """Per (a wants grad, b wants grad), as 2 * a + b: whether a, b and z are saved — what
    the wanted gradients read."""
    plans = []
    for a_wanted in (False, True):
        for b_wanted in (False, True):
            read = set(op.reads(0) if a_wanted else ()) | set(op.reads(1) if b_wanted else ())
            plans.append(("a" in read, "b" in read, "z" in read))
    return tuple(plans)


def _fit(g, meta):
    """Reduce a gradient to an input's ``(shape, dtype)``."""
    if g.shape != meta[0]:
        g = sum_to_shape(g, meta[0])
    if g.dtype is not meta[1]:
        g = g.to(meta[1])
    return g


# ------------------------------------------------------ public functions
_RESULT_DTYPE = {  # by ``Op.ints``: what the docstrings say of the result's dtype
    "float": "the (promoted) input dtype; integer and bool inputs give the default float dtype",
    "keep": "the (promoted) input dtype",
    "bool": "bool",
}
_AUTOCAST = {"fp32": " Under ``genesis.autocast`` it computes in float32.", None: ""}


def _function_doc(op: decl.Op, summary: str, args: str) -> str:
    """The docstring of a declared op's public function, from its row of op_declarations."""
    shape = "``input``'s shape" if op.arity == 1 else "the broadcast shape"
    grad = "differentiable" if op.differentiable else "not differentiable"
    args = "\n".join(f"    {line}" for line in args.splitlines())
    return (f"{summary}\n\nThe op is {grad}.{_AUTOCAST[op.autocast]}\n\nArgs:\n{args}\n\n"
            f"Returns:\n    A new tensor of {shape}; its dtype is {_RESULT_DTYPE[op.ints]}.\n")


def _function_class(op: decl.Op, base: type, forward, kernels: KernelTable,
                    fields: dict) -> type:
    """The Function of one declared op: ``base`` (``_Unary``/``_Binary``) filled from its
    row, with ``forward`` made for it. Its name is the op's, capitalised (``Exp``); the
    registry knows it as ``op.name``."""
    return type(op.name.capitalize(), (base,), {
        "op_name": op.name, "decl": op, "autocast": op.autocast,
        "differentiable": op.differentiable, "__module__": __name__, "kernels": kernels,
        "forward": staticmethod(forward),
        "__doc__": f"Autograd Function of ``{op.name}`` (declared in op_declarations).",
        **fields})


def _unary_function(op: decl.Op):
    """The public function of a declared unary op: its Function's dispatcher entry, named."""
    reads = op.reads(0) if op.differentiable else ()
    kernels = KernelTable(lambda backend: backend.unary_kernel(op.name))
    cls = _function_class(op, _Unary, unary_forward(op, kernels, "x" in reads, "y" in reads),
                          kernels, {"grad": _formula(op, 0, ("g", "x", "y"))
                                    if op.differentiable else None,
                                    "saves_output": "y" in reads})
    fn = unary_entry(cls)
    fn.__name__ = fn.__qualname__ = op.name
    fn.__doc__ = _function_doc(op, f"Elementwise ``{op.name}`` of ``input`` (as "
                                   f"``torch.{op.name}``).", "input: a tensor.")
    fn.function = cls
    return fn


_NOTHING_SAVED = ((False, False, False),) * 4  # (the saves of an op that records nothing)


def _binary_function(op: decl.Op):
    """The public function of a declared binary op: its Function's dispatcher entry, named
    (with torch's ``alpha=`` where the row has it)."""
    kernels = KernelTable(lambda backend: backend.binary_kernel(op.name))
    saves = _saves(op) if op.differentiable else _NOTHING_SAVED
    cls = _function_class(op, _Binary, binary_forward(op, kernels, saves), kernels, {
        "grads": tuple(_formula(op, i, ("g", "a", "b", "z")) if op.differentiable else None
                       for i in (0, 1)),
        "saves_output": any(save_z for _, _, save_z in saves)})
    apply = binary_entry(cls)  # (also the Python operators' slot)
    if op.alpha:
        def fn(input, other, *, alpha=1) -> Tensor:
            return apply(input, other if alpha == 1 else other * alpha)
    else:
        fn = apply

    fn.__name__ = fn.__qualname__ = op.name
    args = "input: a tensor.\nother: a tensor or a Python number, broadcastable with ``input``."
    if op.alpha:
        args += "\nalpha: a number multiplying ``other`` first."
    fn.__doc__ = _function_doc(op, f"Elementwise ``{op.name}`` with broadcasting and type "
                                   f"promotion (as ``torch.{op.name}``).", args)
    fn.function, fn.apply = cls, apply
    return fn


# name -> public function, for every declared op (public=False ones included: the
# hand-written public functions in elementwise.py wrap them).
DECLARED = {op.name: _unary_function(op) for op in decl.UNARY}
DECLARED.update({op.name: _binary_function(op) for op in decl.BINARY})
