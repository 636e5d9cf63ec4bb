"""The dispatcher's entries for calls of a known arity: ``Function.apply``'s steps, in its
order, without packing the arguments into ``*args``/``**kwargs``.

The public functions of the declared ops (``genesis.exp``, ``a + b``, ``x.sum()``) are made
here from their Function: a call then costs one Python frame before ``forward`` instead of
two (the public function, then ``apply``) and no tuple or dict of arguments. They behave
exactly as ``cls.apply`` (autocast, dispatch modes, recording); ``test_dispatch`` checks it.
"""

from __future__ import annotations

from genesis.autograd import function as F
from genesis.autograd.function import _NO_GRAD_CTX, _TENSOR_TYPES, _autocast_anywhere, recorded
from genesis.autograd.grad_mode import _state as _grad_state
from genesis.dispatch import _modes as _intercepting
from genesis.dispatch import intercept


def unary_entry(cls):
    """``call(input)``: ``cls.apply(input)`` for a Function whose forward takes one input."""
    forward, op, category = cls.forward, cls.op, cls.autocast
    records = cls.differentiable

    def call(input):  # (torch's parameter name: it is the public function too)
        if category is not None and _autocast_anywhere.on and F._autocast_state.enabled:
            (input,) = F._autocast_state.cast_args(category, (input,))
        if _intercepting:
            return intercept(op, (input,), {})
        if records and type(input) in _TENSOR_TYPES and input.requires_grad \
                and _grad_state.enabled:
            return recorded(cls, (input,), _NO_KWARGS)
        return forward(_NO_GRAD_CTX, input)

    return call


def constants_entry(cls):
    """``call(input, *args)``: ``cls.apply(input, *args)`` for a Function whose forward takes
    one tensor input, then constants (a reduction's dims, a slice's key)."""
    forward, op, category = cls.forward, cls.op, cls.autocast
    records = cls.differentiable

    def call(input, *args):
        if category is not None and _autocast_anywhere.on and F._autocast_state.enabled:
            (input,) = F._autocast_state.cast_args(category, (input,))
        if _intercepting:
            return intercept(op, (input, *args), {})
        if records and type(input) in _TENSOR_TYPES and input.requires_grad \
                and _grad_state.enabled:
            return recorded(cls, (input, *args), _NO_KWARGS)
        return forward(_NO_GRAD_CTX, input, *args)

    return call


_NO_KWARGS: dict = {}  # (read only)


def binary_entry(cls):
    """``call(input, other)``: ``cls.apply(input, other)`` for a Function whose forward takes
    two inputs."""
    forward, op, category = cls.forward, cls.op, cls.autocast
    records = cls.differentiable

    def call(input, other):  # (torch's parameter names: it is the public function too)
        if category is not None and _autocast_anywhere.on and F._autocast_state.enabled:
            input, other = F._autocast_state.cast_args(category, (input, other))
        if _intercepting:
            return intercept(op, (input, other), {})
        if records and ((type(input) in _TENSOR_TYPES and input.requires_grad)
                        or (type(other) in _TENSOR_TYPES and other.requires_grad)) \
                and _grad_state.enabled:
            return recorded(cls, (input, other), _NO_KWARGS)
        return forward(_NO_GRAD_CTX, input, other)

    return call
