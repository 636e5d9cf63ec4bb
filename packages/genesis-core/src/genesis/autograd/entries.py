"""The dispatcher's entries for calls of a known arity: ``Function.apply``'s steps, in its
order, without packing the arguments into ``*args``/``**kwargs``.

The public functions of the declared ops (``genesis.exp``, ``a + b``, ``x.sum()``) and
``Tensor.__getitem__`` are made here from their Function: a call then costs one Python frame
before ``forward`` instead of two (the public function, then ``apply``) and no tuple or dict
of arguments. They behave exactly as ``cls.apply`` (autocast, dispatch modes, recording);
``test_dispatch`` checks it. Recording a ``kernel_forward`` op is ``recorded``'s steps for
it, spelled out: the new node, ``forward`` with it, ``connect`` (one frame less than the
call of ``recorded``, which then calls ``forward`` through ``call_forward``) — or
``connect_saving`` for an op whose forward may save its own output (``Function.saves_output``),
which it holds weakly (no reference cycle): ``connect`` alone does not look.
"""

from __future__ import annotations

from genesis.autograd import function as F
from genesis.autograd.function import (
    _NO_GRAD_CTX,
    _TENSOR_TYPES,
    _autocast_anywhere,
    connect,
    connect_saving,
    recorded,
)
from genesis.autograd.grad_mode import _state as _grad_state
from genesis.dispatch import _modes as _intercepting
from genesis.dispatch import intercept


def unary_entry(cls):
    """``call(input)``: ``cls.apply(input)`` for a Function whose forward takes one input, a
    tensor (anything else is a TypeError naming the op)."""
    forward, op, category = cls.forward, cls.op, cls.autocast
    records, direct, new_node = cls.differentiable, cls.kernel_forward, cls._backward_cls
    link = connect_saving if cls.saves_output else connect

    def call(input):  # (torch's parameter name: it is the public function too)
        if category is not None and _autocast_anywhere.on and F._autocast_state.enabled:
            (input,) = F._autocast_state.cast_args(category, (input,))
        if _intercepting:
            return intercept(op, (input,), {})
        try:  # (a try costs nothing until it catches)
            wants_grad = input.requires_grad
        except AttributeError:
            raise not_a_tensor(op, input) from None
        if records and wants_grad and _grad_state.enabled:
            if direct:  # (recorded's steps for a forward that runs no op)
                ctx = new_node()
                return link(ctx, (input,), forward(ctx, input))
            return recorded(cls, (input,), _NO_KWARGS)
        return forward(_NO_GRAD_CTX, input)

    return call


def constants_entry(cls, count: int):
    """``call(input, c1, ..., c<count>)``: ``cls.apply(input, c1, ...)`` for a Function whose
    forward takes one tensor input, then ``count`` constants (1 to 3: a slice's key, a view's
    sizes; a reduction's dims and keepdim, and its dtype). One closure per count, each of fixed
    arity: a ``*args`` entry costs as much host time as all its steps together."""
    forward, op, category = cls.forward, cls.op, cls.autocast
    records, direct, new_node = cls.differentiable, cls.kernel_forward, cls._backward_cls
    link = connect_saving if cls.saves_output else connect

    def call1(input, c1):
        if category is not None and _autocast_anywhere.on and F._autocast_state.enabled:
            (input,) = F._autocast_state.cast_args(category, (input,))
        if _intercepting:
            return intercept(op, (input, c1), {})
        try:
            wants_grad = input.requires_grad
        except AttributeError:
            raise not_a_tensor(op, input) from None
        if records and wants_grad and _grad_state.enabled:
            if direct:  # (recorded's steps for a forward that runs no op)
                ctx = new_node()
                return link(ctx, (input, c1), forward(ctx, input, c1))
            return recorded(cls, (input, c1), _NO_KWARGS)
        return forward(_NO_GRAD_CTX, input, c1)

    def call2(input, c1, c2):
        if category is not None and _autocast_anywhere.on and F._autocast_state.enabled:
            (input,) = F._autocast_state.cast_args(category, (input,))
        if _intercepting:
            return intercept(op, (input, c1, c2), {})
        try:
            wants_grad = input.requires_grad
        except AttributeError:
            raise not_a_tensor(op, input) from None
        if records and wants_grad and _grad_state.enabled:
            if direct:  # (recorded's steps for a forward that runs no op)
                ctx = new_node()
                return link(ctx, (input, c1, c2), forward(ctx, input, c1, c2))
            return recorded(cls, (input, c1, c2), _NO_KWARGS)
        return forward(_NO_GRAD_CTX, input, c1, c2)

    def call3(input, c1, c2, c3):
        if category is not None and _autocast_anywhere.on and F._autocast_state.enabled:
            (input,) = F._autocast_state.cast_args(category, (input,))
        if _intercepting:
            return intercept(op, (input, c1, c2, c3), {})
        try:
            wants_grad = input.requires_grad
        except AttributeError:
            raise not_a_tensor(op, input) from None
        if records and wants_grad and _grad_state.enabled:
            if direct:  # (recorded's steps for a forward that runs no op)
                ctx = new_node()
                return link(ctx, (input, c1, c2, c3), forward(ctx, input, c1, c2, c3))
            return recorded(cls, (input, c1, c2, c3), _NO_KWARGS)
        return forward(_NO_GRAD_CTX, input, c1, c2, c3)

    if count not in (1, 2, 3):
        raise ValueError(f"constants_entry({cls.__name__}, {count}): 1 to 3 constants")
    return (call1, call2, call3)[count - 1]


_NO_KWARGS: dict = {}  # (read only)


def not_a_tensor(op, value) -> TypeError:
    """The error of an op whose tensor input is something else: the entries read the input's
    ``requires_grad`` first, and only a tensor has one."""
    return TypeError(f"{op.name}(): argument 'input' must be a Tensor, not {type(value).__name__}")


def binary_entry(cls):
    """``call(input, other)``: ``cls.apply(input, other)`` for a Function whose forward takes
    two inputs."""
    forward, op, category = cls.forward, cls.op, cls.autocast
    records, direct, new_node = cls.differentiable, cls.kernel_forward, cls._backward_cls
    link = connect_saving if cls.saves_output else connect

    def call(input, other):  # (torch's parameter names: it is the public function too)
        if category is not None and _autocast_anywhere.on and F._autocast_state.enabled:
            input, other = F._autocast_state.cast_args(category, (input, other))
        if _intercepting:
            return intercept(op, (input, other), {})
        if records and ((type(input) in _TENSOR_TYPES and input.requires_grad)
                        or (type(other) in _TENSOR_TYPES and other.requires_grad)) \
                and _grad_state.enabled:
            if direct:  # (recorded's steps for a forward that runs no op)
                ctx = new_node()
                return link(ctx, (input, other), forward(ctx, input, other))
            return recorded(cls, (input, other), _NO_KWARGS)
        return forward(_NO_GRAD_CTX, input, other)

    return call


def ternary_entry(cls):
    """``call(a, b, c)``: ``cls.apply(a, b, c)`` for a Function whose forward takes three
    arguments, any of them a tensor (``linear``'s input, weight and bias; a norm's input,
    weight and eps): recorded when any of them requires grad, as ``apply`` decides."""
    forward, op, category = cls.forward, cls.op, cls.autocast
    records, direct, new_node = cls.differentiable, cls.kernel_forward, cls._backward_cls
    link = connect_saving if cls.saves_output else connect

    def call(a, b, c):
        if category is not None and _autocast_anywhere.on and F._autocast_state.enabled:
            a, b, c = F._autocast_state.cast_args(category, (a, b, c))
        if _intercepting:
            return intercept(op, (a, b, c), {})
        if records and ((type(a) in _TENSOR_TYPES and a.requires_grad)
                        or (type(b) in _TENSOR_TYPES and b.requires_grad)
                        or (type(c) in _TENSOR_TYPES and c.requires_grad)) \
                and _grad_state.enabled:
            if direct:  # (recorded's steps for a forward that runs no op)
                ctx = new_node()
                return link(ctx, (a, b, c), forward(ctx, a, b, c))
            return recorded(cls, (a, b, c), _NO_KWARGS)
        return forward(_NO_GRAD_CTX, a, b, c)

    return call


def slice_key_entry(cls, other):
    """``call(input, key)``, a tensor's ``__getitem__``: ``cls.apply(input, (key,))`` for
    ``x[a:b]`` (``key`` one slice, ``input`` of at least one dim: the most frequent index),
    ``other(input, key)`` for any other key. The ``x[a:b]`` call then costs one Python frame
    before ``forward``, as the other entries' calls do, and makes no key tuple: ``forward``
    gets the slice alone (a mode still sees the op's arguments, ``(input, (key,))``, and the
    recorded node keeps the tuple).

    Args:
        cls: the Function of basic indexing, whose forward takes ``(x, key tuple)`` or
            ``(x, one slice)``.
        other: the function of every index (it also takes ``x[a:b]``).

    Returns:
        The ``__getitem__`` function.

    Example:
        >>> Tensor.__getitem__ = slice_key_entry(Slice, getitem)
    """
    forward, op, category = cls.forward, cls.op, cls.autocast
    records, direct, new_node = cls.differentiable, cls.kernel_forward, cls._backward_cls

    def call(input, key):
        if type(key) is not slice or not input.shape:
            return other(input, key)
        if category is not None and _autocast_anywhere.on and F._autocast_state.enabled:
            (input,) = F._autocast_state.cast_args(category, (input,))
        if _intercepting:  # (a mode sees the op's arguments: the key as a tuple)
            return intercept(op, (input, (key,)), {})
        if records and input.requires_grad and _grad_state.enabled:
            if direct:  # (recorded's steps for a forward that runs no op)
                ctx = new_node()
                return connect(ctx, (input, key), forward(ctx, input, key))
            return recorded(cls, (input, key), _NO_KWARGS)
        return forward(_NO_GRAD_CTX, input, key)

    call.__name__ = call.__qualname__ = "__getitem__"
    return call


def matrix_entry(cls, general):
    """``call(input, other)``, matmul's public function: ``cls.apply(input, other)`` for two
    tensors of at least two dims each (the most frequent product), ``general(input, other)``
    for anything else (torch's 1-d rules, and the errors naming what is not a tensor). The
    product of two matrices then costs one Python frame before ``forward``, as the other
    entries' calls do.

    Args:
        cls: the Function of the matrix product, whose forward takes two tensors.
        general: the function of every pair of operands (it also takes two matrices).

    Returns:
        The ``matmul`` function.

    Example:
        >>> matmul = matrix_entry(Matmul, with_vectors)
    """
    forward, op, category = cls.forward, cls.op, cls.autocast
    records, direct, new_node = cls.differentiable, cls.kernel_forward, cls._backward_cls
    link = connect_saving if cls.saves_output else connect

    def call(input, other):
        try:  # (a try costs nothing until it catches)
            matrices = len(input.shape) >= 2 and len(other.shape) >= 2
            wants_grad = input.requires_grad or other.requires_grad
        except (AttributeError, TypeError):  # (something else than a tensor)
            matrices = False
        if not matrices:
            return general(input, other)
        if category is not None and _autocast_anywhere.on and F._autocast_state.enabled:
            input, other = F._autocast_state.cast_args(category, (input, other))
            wants_grad = input.requires_grad or other.requires_grad
        if _intercepting:
            return intercept(op, (input, other), {})
        if records and wants_grad and _grad_state.enabled:
            if direct:  # (recorded's steps for a forward that runs no op)
                ctx = new_node()
                return link(ctx, (input, other), forward(ctx, input, other))
            return recorded(cls, (input, other), _NO_KWARGS)
        return forward(_NO_GRAD_CTX, input, other)

    call.__name__ = call.__qualname__ = "matmul"
    return call
